// fusedmoe run: one MoE layer forward, or with --projection the fused FP8 expert projection
// alone, on seeded random weights and inputs.
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>

#include "common/parallel.hpp"
#include "fusedmoe/checkpoint.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/device.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"
#include "tools/cli.hpp"
#include "tools/ep_launch.hpp"
#include "tools/host_memory.hpp"
#include "tools/model_case.hpp"
#include "tools/progress.hpp"
#include "tools/projection_case.hpp"

#if defined(FMOE_HAS_CUDA)
#include "bench/harness.hpp"
#include "common/device_buffer.hpp"
#include "layer/layer_plan.hpp"
#include "moe/moe_fp8_plan.hpp"
#include "tools/layer_case.hpp"
#endif

namespace fusedmoe::cli {

const char* kRunUsage =
    "usage: fusedmoe run [--preset NAME | --config PATH] [--tokens N] [--seed N]\n"
    "                    [--precision bf16|fp8|nvfp4|mxfp4] [--top-k N] [--backend auto|cpu|gpu]\n"
    "                    [--mode fast|deterministic] [--projection]\n"
    "                    [--ep R [--chunks N] [--rows bf16|fp8]]\n"
    "       fusedmoe run --model DIR --layer N [--tokens N] [--seed N] [--backend B] [--mode M]\n"
    "\n"
    "One MoE layer forward (routing, gate/up, activation, down, weighted combine, shared expert)\n"
    "on seeded random weights and inputs, or with --model on one layer of a checkpoint. On an H100/H200 the layer runs on the GPU\n"
    "(fp8 and bf16 weights; nvfp4 and mxfp4 weights with bf16 activations), is timed (median of\n"
    "CUDA-graph replays; TFLOP/s and x the floor from this card's measured ceilings) and checked\n"
    "against the CPU reference (PASS/FAIL, exit 1 on FAIL); without a GPU the CPU reference\n"
    "runs and says so.\n"
    "\n"
    "  --preset NAME     model preset (default qwen3.5-35b-a3b; see 'fusedmoe list-presets')\n"
    "  --config PATH     a Hugging Face config.json instead of a preset\n"
    "  --tokens N        tokens in the batch (default 128)\n"
    "  --seed N          random seed for weights and inputs (default 1)\n"
    "  --precision P     weight precision override: bf16, fp8 (128x128 blocks), nvfp4, mxfp4\n"
    "                    (the 4-bit ones with bf16 activations)\n"
    "  --top-k N         override the preset's top-k\n"
    "  --backend B       auto (GPU when usable), cpu (the reference), gpu (fail without one)\n"
    "  --projection      only the routed FP8 expert projection y[T, I] = sum over the top-k of\n"
    "                    weight * (fp8(x) @ W_e^T), K = hidden, N = intermediate, with random\n"
    "                    FP8 128x128-block weights: on a GPU the fused pipeline runs, is timed\n"
    "                    (median of CUDA-graph replays) and checked against the CPU reference\n"
    "  --mode M          fast (fp32 atomics, or bf16 route rows once the sums outgrow the L2;\n"
    "                    default) or deterministic (fp32 route rows: bitwise reproducible)\n"
    "  --model DIR       a Hugging Face model directory (config.json + safetensors, single or\n"
    "                    sharded; FP8 128x128 blocks, BF16, ModelOpt NVFP4, gpt-oss MXFP4):\n"
    "                    reads layer --layer (progress on stderr), draws x [T, H] at random and\n"
    "                    computes the router logits with the layer's own router weights, then\n"
    "                    runs as above; prints the peak GPU memory. A ModelOpt NVFP4 checkpoint\n"
    "                    (calibrated with NVFP4 activations too) runs as W4A16: bf16\n"
    "                    activations, its input_scale unused\n"
    "  --layer N         with --model: the index of the MoE layer to read\n"
    "  --ep R            expert parallelism: R processes on this host, rank r on GPU r, each with\n"
    "                    its share of the experts (E / R, contiguous) of the same seeded layer and\n"
    "                    its own --tokens tokens, over NCCL (EpMoeLayer); each rank checks its\n"
    "                    output against the single-GPU layer on the same tokens and routing\n"
    "                    (bitwise in deterministic mode, choice-order combine; relative L2 in\n"
    "                    fast mode, rank-order combine) and prints one line; PASS when all pass.\n"
    "                    Shared experts run on every rank on its own tokens. Needs R sm_90 GPUs,\n"
    "                    a build with NCCL and at least top-k experts per rank\n"
    "  --chunks N        with --ep: the step split into N pipelined chunks (1..8; checked by\n"
    "                    relative L2 when N > 1)\n"
    "  --rows bf16|fp8   with --ep: how the token rows travel (fp8: codes + 1x128 scales,\n"
    "                    quantized on the token's rank as the layer would; fp8 layers)\n";

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Weights above this size say on stderr that they are being generated before the first progress
// line, which may be many seconds away (the buffers of a whole tensor are zeroed first).
void announce_weights(double bytes) {
  constexpr double kAnnounceBytes = 1e9;
  if (bytes < kAnnounceBytes) return;
  std::fprintf(stderr, "  weights  : generating %.1f GB on %d threads; progress every 2 s\n",
               bytes / 1e9, detail::host_threads());
  std::fflush(stderr);
}

void print_header(const char* title, const MoeConfig& cfg, int T, uint64_t seed) {
  std::printf("%s\n", title);
  std::printf("  config   : %s\n", cfg.summary().c_str());
  std::printf("  tokens   : %d   seed: %llu   host threads: %d\n", T, (unsigned long long)seed,
              detail::host_threads());
}

void print_routing(const ref::Routing& r, int E) {
  const ExpertLoad load = expert_load(r, E);
  std::printf("  routing  : %d of %d experts hit, at most %d routes on one expert\n", load.hit, E,
              load.max_routes);
}

void print_output(int rows, int cols, const std::vector<uint16_t>& bits) {
  double sum = 0, sum_abs = 0;
  for (const uint16_t b : bits) {
    const double v = fmt::bf16_to_float(b);
    sum += v;
    sum_abs += std::fabs(v);
  }
  std::printf("  output   : [%d, %d] bf16, sum %.6e, sum|y| %.6e, bits hash %016llx\n", rows, cols,
              sum, sum_abs, (unsigned long long)bf16_hash(bits));
}

constexpr const char* kNoCheck =
    "  check    : none needed (the CPU reference is the oracle other backends are checked "
    "against)\n";

// Without a GPU, `run` reports the CPU reference itself and stops (projection and layer alike).
template <class V>
int report_cpu_only(double t_ref, const char* what, int rows, int cols, const V& y) {
  std::printf("  time     : %.3f s for the CPU reference%s\n", t_ref, what);
  print_output(rows, cols, to_bf16_bits(y));
  std::printf("%s", kNoCheck);
  return 0;
}

#if defined(FMOE_HAS_CUDA)
// Device memory in use (cudaMemGetInfo: this process and any other on the device), sampled at the
// steps of a run: the peak above the first sample is what the run used at its highest point
// (between samples, a step may briefly hold more: MoeLayer's prepare, for one).
struct DeviceMemory {
  size_t base = 0, peak = 0;
  void sample() {
    size_t free_b = 0, total = 0;
    FMOE_CUDA(cudaMemGetInfo(&free_b, &total));
    const size_t used = total - free_b;
    if (base == 0) base = used;
    peak = std::max(peak, used);
  }
  double used_peak() const { return double(peak - base); }
};

// The layer on the GPU: made by `make` on a fresh stream (uploads + prepare), run once (y_first)
// and timed over CUDA-graph replays (y_last); prints the backend, time and rate lines.
struct GpuLayerRun {
  std::vector<uint16_t> y_first, y_last;
  DeviceMemory memory;
  int h_block = 64;  // fp8: the intermediate's scale block the plan chose (the reference matches it)
};

GpuLayerRun run_layer_gpu(const MoeConfig& cfg, int T, const std::string& mode,
                          const std::vector<float>& x, const std::vector<float>& logits,
                          const std::vector<float>& route_bias, const char* prepared_what,
                          const std::function<GpuLayer(cudaStream_t)>& make) {
  GpuLayerRun r;
  const ReductionMode rmode = parse_reduction_mode(mode);
  cudaDeviceProp prop{};
  FMOE_CUDA(cudaSetDevice(0));
  FMOE_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream = nullptr;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const bench::Ceilings& ceil = bench::ceilings(stream);
  r.memory.sample();
  auto t0 = std::chrono::steady_clock::now();
  GpuLayer g = make(stream);
  const double prep_s = seconds_since(t0);
  r.memory.sample();
  g.buffers.clear();  // the prepared layer holds its own copy
  const int H = cfg.hidden;
  DeviceBuffer d_x = DeviceBuffer::from(to_bf16_bits(x)), d_logits = DeviceBuffer::from(logits);
  DeviceBuffer d_y(size_t(T) * H * 2), ws(g.layer->workspace_size(T, rmode));
  r.memory.sample();
  d_y.fill(0xFF);  // NaN: the layer must write every output
  MoeForwardArgs a;
  a.x = TensorRef::contiguous(d_x.get(), DType::bf16, {T, H}, Device::cuda);
  a.router_logits = TensorRef::contiguous(d_logits.get(), DType::f32, {T, cfg.num_experts}, Device::cuda);
  a.y = TensorRef::contiguous(d_y.get(), DType::bf16, {T, H}, Device::cuda);
  a.mode = rmode;
  const detail::LayerPlan plan = detail::plan_layer_forward(g.layer->impl(), a, ws.get(), ws.bytes(), stream);
  g.layer->forward(a, ws.get(), ws.bytes(), stream);
  wait_or_die(stream, 60, "MoeLayer::forward (first call)");
  r.memory.sample();
  r.y_first = d_y.to_host<uint16_t>();
  r.h_block = plan.h_block;
  std::printf("  backend  : gpu: %s, %s + %s%s; %s %.1f MB in %.2f s\n", prop.name,
              plan.T ? detail::gemm_config_info(plan.up_config).name : "-",
              plan.T ? detail::gemm_config_info(plan.down_config).name : "-",
              plan.fused_schedule ? " (fused schedule)" : "", prepared_what,
              double(g.layer->prepared_bytes()) / 1e6, prep_s);
  if (T > 0) {
    const bench::Stats t = bench::time_graph([&](cudaStream_t st, int) {
      g.layer->forward(a, ws.get(), ws.bytes(), st);
    }, stream, 20);
    r.memory.sample();
    const ref::Routing routing = ref::route(cfg.routing, logits.data(), T, cfg.num_experts,
                                            cfg.top_k, route_bias.empty() ? nullptr : route_bias.data());
    const LayerCost cost = layer_cost(cfg, routing, T);
    bench::Row row;
    row.bytes = cost.bytes;
    row.flops = cost.flops;
    row.t = t;
    // 4-bit weights run on bf16 wgmma (W4A16): their FLOP floor is the bf16 rate.
    bench::set_floor(row, ceil, cfg.weight_precision == Precision::fp8_block ? "fp8" : "bf16");
    std::printf("  time     : %.2f us median (p10 %.2f, p90 %.2f) per call over CUDA-graph replays "
                "(one input set: small T may read weights from L2; 'fusedmoe bench --op layer' "
                "rotates copies)\n", t.median_us, t.p10_us, t.p90_us);
    std::printf("  rate     : %.1f TFLOP/s, %.0f GB/s (weights of %d experts hit + shared, x, "
                "logits, y); floor %.2f us (%s), %.2fx the floor\n", cost.flops / t.median_us / 1e6,
                cost.bytes / t.median_us / 1e3, cost.hit, row.floor_us, row.floor_kind.c_str(),
                t.median_us / row.floor_us);
    r.y_last = d_y.to_host<uint16_t>();
  }
  FMOE_CUDA(cudaStreamDestroy(stream));
  std::fflush(stdout);
  return r;
}

// The GPU's outputs against the reference's: the check and replay lines, PASS/FAIL; the exit code.
int report_gpu_check(const MoeConfig& cfg, int T, const std::string& mode, double t_ref,
                     const GpuLayerRun& gpu, const ref::LayerResult& res) {
  std::printf("  reference: %.3f s on the CPU\n", t_ref);
  print_output(T, cfg.hidden, gpu.y_first);
  const bool fp8 = cfg.weight_precision == Precision::fp8_block;
  const LayerCheck first = check_layer_output(gpu.y_first, res.y, cfg.hidden, fp8);
  std::printf("  check    : %s vs the CPU reference\n",
              describe_layer_check(first, gpu.y_first, res.y, cfg.hidden).c_str());
  bool pass = first.ok();
  if (T > 0) {
    const bool det = mode == "deterministic";
    const LayerCheck last = check_layer_output(gpu.y_last, res.y, cfg.hidden, fp8);
    const bool replays_ok = det ? gpu.y_last == gpu.y_first : last.ok();
    std::printf("  replays  : after the CUDA-graph replays the output is %s\n",
                det ? (replays_ok ? "bit-identical to the first call's" : "NOT bit-identical to the first call's")
                    : (replays_ok ? "within the same bounds" : "OUT of bounds"));
    pass = pass && replays_ok;
  }
  std::printf("  result   : %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
#endif

#if defined(FMOE_HAS_CUDA)
// The projection on the GPU: the output of the first call and of the last CUDA-graph replay.
struct GpuProjection {
  std::string device, config;
  std::vector<uint16_t> y_first, y_last;
  bench::Stats t;
  int launches = 0;
};

struct StreamDeleter {
  void operator()(CUstream_st* s) const { cudaStreamDestroy(s); }
};

GpuProjection run_projection_gpu(const ProjectionShape& s, int T, ReductionMode mode,
                                 const ref::WeightSet& w, const ProjectionInputs& in) {
  GpuProjection r;
  cudaDeviceProp prop{};
  FMOE_CUDA(cudaGetDeviceProperties(&prop, 0));
  FMOE_CUDA(cudaSetDevice(0));
  r.device = prop.name;
  cudaStream_t raw = nullptr;
  FMOE_CUDA(cudaStreamCreate(&raw));  // blocking: ordered after the legacy-stream uploads
  const std::unique_ptr<CUstream_st, StreamDeleter> stream(raw);

  const DeviceBuffer d_w = DeviceBuffer::from(w.q), d_scale = DeviceBuffer::from(w.scale);
  const DeviceBuffer d_x = DeviceBuffer::from(to_bf16_bits(in.x));
  const DeviceBuffer d_logits = DeviceBuffer::from(in.logits), d_bias = DeviceBuffer::from(in.bias);
  DeviceBuffer d_y(size_t(T) * s.N * 2);
  d_y.fill(0xFF);  // NaN: the pipeline must write every output
  const MoeFp8ProjectionArgs args = projection_args(
      s, T, mode, {d_x.get(), d_logits.get(), d_bias.get(), d_w.get(), d_scale.get(), d_y.get()});
  DeviceBuffer ws(moe_fp8_projection_workspace_size(T, s.E, s.k, s.N, s.K, mode));
  const detail::MoeFp8Plan plan =
      detail::plan_moe_fp8_projection(args, ws.get(), ws.bytes(), stream.get());
  r.config = plan.T ? strf("GEMM config %s", detail::gemm_config_info(plan.config).name)
                    : std::string("no GEMM (T=0: nothing to launch)");

  moe_fp8_projection(args, ws.get(), ws.bytes(), stream.get());
  wait_or_die(stream.get(), 60, "moe_fp8_projection (first call)");
  r.y_first = d_y.to_host<uint16_t>();
  if (T > 0) {
    constexpr int kPerGraph = 20;
    r.t = bench::time_graph([&](cudaStream_t st, int) {
      moe_fp8_projection(args, ws.get(), ws.bytes(), st);
    }, stream.get(), kPerGraph);
    r.launches = kPerGraph * r.t.samples;
  }
  r.y_last = d_y.to_host<uint16_t>();
  return r;
}
#endif

// `run --projection`: the FP8 expert projection of the model, on the GPU when usable.
int run_projection(const MoeConfig& cfg, int T, uint64_t seed, const std::string& backend,
                   const std::string& mode) {
  const ProjectionShape s = ProjectionShape::of(cfg);
  std::string why_cpu;
  const bool have_gpu = gpu_usable(0, &why_cpu);
  FMOE_REQUIRE(backend != "gpu" || have_gpu, "--backend gpu: %s", why_cpu.c_str());
  const bool on_gpu = have_gpu && backend != "cpu";
  if (backend == "cpu") why_cpu = "--backend cpu";
  const int threads = detail::host_threads();
  require_host_memory(cfg.name + " --projection", T, [&](double t) {
    return projection_footprint(cfg, t, on_gpu, threads);
  });

  print_header("fusedmoe run --projection", cfg, T, seed);
  std::printf("  op       : y[%d, %d] = sum over top-%d of weight * (fp8(x) @ W_e^T), x [%d, %d] "
              "bf16, W [%d, %d, %d] e4m3 + 128x128 scales, mode %s\n", T, s.N, s.k, T, s.K, s.E,
              s.N, s.K, mode.c_str());
  if (!on_gpu) std::printf("  backend  : cpu-reference (%s)\n", why_cpu.c_str());
  std::fflush(stdout);

  auto t0 = std::chrono::steady_clock::now();
  set_activity("generating the weights");
  announce_weights(s.weight_bytes());
  ProgressLine progress("weights  ");
  const ref::WeightSet w = random_fp8_weights(s, seed, std::ref(progress));
  set_activity("generating the inputs");
  const ProjectionInputs in = random_projection_inputs(s, T, seed);
  std::printf("  weights  : %.1f MB e4m3 + scales, %d experts, generated in %.2f s\n",
              s.weight_bytes() / 1e6, s.E, seconds_since(t0));
  std::fflush(stdout);

#if defined(FMOE_HAS_CUDA)
  std::unique_ptr<GpuProjection> gpu;
  if (on_gpu) {
    set_activity("running the GPU pipeline");
    gpu = std::make_unique<GpuProjection>(
        run_projection_gpu(s, T, parse_reduction_mode(mode), w, in));
    std::printf("  backend  : gpu: %s, %s\n", gpu->device.c_str(), gpu->config.c_str());
    if (T > 0)
      std::printf("  time     : %.2f us median (p10 %.2f, p90 %.2f) per call, CUDA-graph replays; "
                  "one input set, so small T may read weights from L2 ('fusedmoe bench --op "
                  "moe_fp8' rotates copies)\n", gpu->t.median_us, gpu->t.p10_us, gpu->t.p90_us);
    std::fflush(stdout);
  }
#endif

  t0 = std::chrono::steady_clock::now();
  set_activity("running the CPU reference");
  const ref::ProjectionResult want =
      ref::moe_projection(s.routing, in.x.data(), in.logits.data(), in.bias_or_null(), T, s.k, w);
  const double t_ref = seconds_since(t0);
  print_routing(want.routing, s.E);
  if (!on_gpu) return report_cpu_only(t_ref, "", T, s.N, want.y);
#if defined(FMOE_HAS_CUDA)
  std::printf("  reference: %.3f s on the CPU\n", t_ref);
  print_output(T, s.N, gpu->y_first);
  const ProjectionCheck first = check_projection(gpu->y_first, want.y);
  const ProjectionCheck last = check_projection(gpu->y_last, want.y);
  const bool det = mode == "deterministic";
  const bool replays_ok = det ? gpu->y_last == gpu->y_first : last.ok();
  const bool pass = first.ok() && replays_ok;
  std::printf("  check    : max abs err %.3e, max rel err %.3e vs the CPU reference (|got - want| "
              "<= 0.02|want| + 0.01 max|want|)%s\n", first.max_abs_err, first.max_rel_err,
              first.ok() ? "" : (": " + describe_failure(first, gpu->y_first, want.y, s.N)).c_str());
  if (T > 0) {
    std::string replays = det ? "bit-identical to the first call's" : "within tolerance";
    if (!replays_ok)
      replays = det ? "NOT bit-identical to the first call's"
                    : "outside tolerance: " + describe_failure(last, gpu->y_last, want.y, s.N);
    std::printf("  replays  : after %d calls in %d CUDA-graph replays, the output is %s\n",
                gpu->launches, gpu->t.samples, replays.c_str());
  }
  std::printf("  result   : %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
#else
  return 0;  // unreachable: on_gpu needs a CUDA build
#endif
}

// --config PATH: read here rather than by config_from_hf_json_file so that an unreadable path is
// echoed quoted and truncated, and an unprintable one names the file quoted in every message.
MoeConfig read_config(const std::string& path, const Precision* precision) {
  set_activity("reading the config file");
  struct stat st{};
  const bool exists = stat(path.c_str(), &st) == 0;
  const int stat_errno = errno;
  FMOE_REQUIRE(exists && !S_ISDIR(st.st_mode), "--config: cannot open config file %s (%s)",
               cli::quoted(path).c_str(), exists ? "it is a directory" : std::strerror(stat_errno));
  std::ifstream in(path, std::ios::binary);
  FMOE_REQUIRE(in.good(), "--config: cannot open config file %s", cli::quoted(path).c_str());
  std::ostringstream text;
  text << in.rdbuf();
  const bool plain = path.size() <= 200 && cli::quoted(path) == "\"" + path + "\"";
  return config_from_hf_json_text(text.str(), plain ? path : cli::quoted(path), precision);
}

// The model: a preset or a config file, then the --precision and --top-k overrides. A preset's
// name, and overrides the model cannot take, are command-line mistakes (UsageError).
MoeConfig model_from_args(const Args& args, bool projection) {
  std::optional<Precision> precision;
  if (args.has("precision")) {
    const std::string p = args.choice("precision", "", {"bf16", "fp8", "fp8_block", "nvfp4", "mxfp4"});
    precision = parse_precision(p);
    if (projection && *precision != Precision::fp8_block)
      throw UsageError(strf("--projection runs the FP8 pipeline; --precision %s is not supported "
                            "with it", p.c_str()));
  }
  std::optional<int> top_k;
  if (args.has("top-k")) top_k = int(args.integer("top-k", 0, 1, 1 << 20));

  MoeConfig cfg;
  if (args.has("config")) {
    cfg = read_config(args.str("config", ""), precision ? &*precision : nullptr);
  } else {
    const std::string name = args.str("preset", default_preset_name());
    std::string names;
    bool found = false;
    for (const MoeConfig& c : model_presets()) {
      names += (names.empty() ? "" : ", ") + c.name;
      found = found || c.name == name;
    }
    if (!found)
      throw UsageError(strf("--preset: unknown preset %s; the presets are: %s",
                            cli::quoted(name).c_str(), names.c_str()));
    cfg = find_preset(name);
    if (precision) {
      cfg.weight_precision = *precision;
      const bool w4 = *precision == Precision::nvfp4 || *precision == Precision::mxfp4;
      cfg.activation_precision = w4 ? Precision::bf16 : *precision;
    }
  }
  cfg.validate();  // the model as given: its own faults are not the override's
  if (!top_k) return cfg;
  cfg.top_k = *top_k;
  try {
    cfg.validate();
  } catch (const Error& e) {
    std::string why = e.what();
    if (why.rfind("fusedmoe: ", 0) == 0) why = why.substr(10);
    throw UsageError(strf("--top-k %d does not suit the model: %s", *top_k, why.c_str()));
  }
  return cfg;
}

}  // namespace

namespace {

// ProgressLine as load_moe_layer's callback.
void progress_thunk(uint64_t done, uint64_t total, void* line) {
  (*static_cast<ProgressLine*>(line))(int64_t(done), int64_t(total));
}

// `run --model DIR --layer N`: one layer of a checkpoint, on the GPU when usable, checked
// against the CPU reference; else the reference alone. A ModelOpt NVFP4 checkpoint (calibrated
// with NVFP4 activations too, input_scale) runs as W4A16 on both: bf16 activations.
int run_model(const std::string& dir, int layer, int T, uint64_t seed, const std::string& backend,
              const std::string& mode) {
  set_activity("reading the model's config");
  const MoeConfig cfg = checkpoint_config(dir);
  std::string why_cpu;
  const bool have_gpu = gpu_usable(0, &why_cpu);
  FMOE_REQUIRE(backend != "gpu" || have_gpu, "--backend gpu: %s", why_cpu.c_str());
  const bool on_gpu = have_gpu && backend != "cpu";
  if (backend == "cpu") why_cpu = "--backend cpu";
  const int threads = detail::host_threads();
  require_host_memory(strf("%s layer %d", cfg.name.c_str(), layer), T,
                      [&](double t) { return checkpoint_footprint(cfg, t, threads); });

  // Read first (progress on stderr), so that a checkpoint the loader refuses is one line.
  set_activity("reading the layer's weights");
  auto t0 = std::chrono::steady_clock::now();
  ProgressLine reading("reading  ");
  reading.in_bytes();
  CheckpointLayer ck = load_moe_layer(dir, layer, progress_thunk, &reading);
  const double t_read = seconds_since(t0);

  print_header("fusedmoe run --model", cfg, T, seed);
  std::printf("  model    : %s, layer %d\n", cli::quoted(dir).c_str(), layer);
  if (!on_gpu) std::printf("  backend  : cpu-reference (%s)\n", why_cpu.c_str());
  if (cfg.weight_precision == Precision::nvfp4)
    std::printf("  note     : NVFP4 checkpoint run as W4A16 (bf16 activations; its input_scale, "
                "for NVFP4 activations, is not used: Hopper has no FP4 tensor cores)\n");
  std::printf("  weights  : %s, %s; %s read in %.2f s (%s/s)\n", cli::quoted(ck.prefix).c_str(),
              ck.format.c_str(), ProgressLine::amount(double(ck.bytes_read)).c_str(), t_read,
              ProgressLine::amount(double(ck.bytes_read) / std::max(t_read, 1e-9)).c_str());

  // A real layer's router logits come from its input: x random, the logits from the layer's router.
  set_activity("generating the inputs");
  const std::vector<float> x = ref::random_bf16(int64_t(T) * cfg.hidden, seed, kStreamX, 1.0f);
  const std::vector<float> logits = router_logits(x, T, ck.router_weight);
  const std::vector<float> bias = routing_bias(ck);
  std::printf("  inputs   : x [%d, %d] ~ U(-1, 1) in bf16 (seed %llu); router logits = x . %s^T "
              "(the layer's own router, %s, summed in double)\n", T, cfg.hidden,
              (unsigned long long)seed, cli::quoted(ck.router_key).c_str(),
              dtype_name(ck.router_weight.dtype));
  std::fflush(stdout);

  int h_block = 64;  // the GPU plan's intermediate scale block, which the reference follows
#if defined(FMOE_HAS_CUDA)
  std::unique_ptr<GpuLayerRun> gpu;
  if (on_gpu) {
    set_activity("uploading the layer and running it on the GPU");
    gpu = std::make_unique<GpuLayerRun>(run_layer_gpu(
        cfg, T, mode, x, logits, bias, "uploaded + prepared", [&](cudaStream_t stream) {
          ProgressLine up("uploading");
          up.in_bytes();
          return make_gpu_layer(ck, stream, std::ref(up));
        }));
    std::printf("  gpu mem  : peak %s in use by this run (device memory sampled after the upload "
                "and prepare, the buffers, the first call and the replays)\n",
                ProgressLine::amount(gpu->memory.used_peak()).c_str());
    h_block = gpu->h_block;
  }
#endif

  set_activity("running the CPU reference");
  const ref::LayerWeights lw = ref::layer_from_checkpoint(std::move(ck));
  t0 = std::chrono::steady_clock::now();
  const ref::LayerResult res = ref::moe_layer(lw, x.data(), logits.data(), T, h_block);
  const double t_ref = seconds_since(t0);
  print_routing(res.routing, cfg.num_experts);
  if (!on_gpu) return report_cpu_only(t_ref, " forward", T, cfg.hidden, res.y);
#if defined(FMOE_HAS_CUDA)
  return report_gpu_check(cfg, T, mode, t_ref, *gpu, res);
#else
  return 0;  // unreachable: on_gpu needs a CUDA build
#endif
}

}  // namespace

int cmd_run(const std::vector<std::string>& argv) {
  set_activity("reading the arguments");
  Args args(argv, {"preset", "config", "tokens", "seed", "precision", "top-k", "backend", "mode",
                   "model", "layer", "ep", "chunks", "rows", kEpChildOption},
            {"projection"});
  if (args.has("preset") && args.has("config"))
    throw UsageError("give either --preset or --config, not both");
  const int T = int(args.integer("tokens", 128, 0, 1 << 20));
  const uint64_t seed = uint64_t(args.integer("seed", 1, 0, (1ll << 62)));
  const std::string backend = args.choice("backend", "auto", {"auto", "cpu", "gpu"});
  const bool projection = args.has("projection");
  const std::string mode = args.choice("mode", "fast", {"fast", "deterministic"});
  if (args.has("model")) {
    if (args.has("ep"))
      throw UsageError("--ep runs a seeded random layer (--preset or --config); it does not take --model yet");
    for (const char* o : {"preset", "config", "precision", "top-k"})
      if (args.has(o))
        throw UsageError(strf("--%s does not go with --model: the model's own config.json and "
                              "weights say it", o));
    if (projection) throw UsageError("--projection runs on random weights; it does not take --model");
    if (!args.has("layer")) throw UsageError("--model needs --layer N: the index of the MoE layer to read");
    return run_model(args.str("model", ""), int(args.integer("layer", 0, 0, 1 << 20)), T, seed,
                     backend, mode);
  }
  if (args.has("layer")) throw UsageError("--layer needs --model DIR");
  if (args.has("chunks") && !args.has("ep")) throw UsageError("--chunks needs --ep R");
  if (args.has("rows") && !args.has("ep")) throw UsageError("--rows needs --ep R");
  if (args.has(kEpChildOption) && !args.has("ep"))
    throw UsageError(strf("--%s is internal: the ranks of --ep get it from their parent", kEpChildOption));
  if (args.has("ep")) {
    const long long R = args.integer("ep", 1, 1, 1 << 10);
    if (projection) throw UsageError("--ep runs the whole layer; it does not take --projection");
    if (backend == "cpu")
      throw UsageError(strf("--ep %lld runs on GPUs; it does not take --backend cpu", R));
    return run_ep(args, argv, model_from_args(args, false), T, seed, mode);
  }
  const MoeConfig cfg = model_from_args(args, projection);
  if (projection) return run_projection(cfg, T, seed, backend, mode);

  // Backend: the GPU when usable and the weights are fp8 or bf16, or nvfp4 with bf16
  // activations (W4A16), else the CPU reference, saying why.
  std::string why_cpu;
  const bool have_gpu = gpu_usable(0, &why_cpu);
  const bool gpu_precision = cfg.weight_precision == Precision::fp8_block ||
                             cfg.weight_precision == Precision::bf16 ||
                             ((cfg.weight_precision == Precision::nvfp4 ||
                               cfg.weight_precision == Precision::mxfp4) &&
                              cfg.activation_precision == Precision::bf16);
  FMOE_REQUIRE(backend != "gpu" || have_gpu, "--backend gpu: %s", why_cpu.c_str());
  FMOE_REQUIRE(backend != "gpu" || gpu_precision, "--backend gpu: %s weights with %s activations "
               "have no GPU kernels (fp8, bf16, and nvfp4 / mxfp4 weights with bf16 activations do)",
               precision_name(cfg.weight_precision), precision_name(cfg.activation_precision));
  const bool on_gpu = have_gpu && gpu_precision && backend != "cpu";
  if (backend == "cpu") why_cpu = "--backend cpu";
  else if (have_gpu && !gpu_precision)
    why_cpu = strf("%s weights with %s activations have no GPU kernels",
                   precision_name(cfg.weight_precision), precision_name(cfg.activation_precision));
  const int threads = detail::host_threads();
  require_host_memory(cfg.name, T, [&](double t) { return layer_footprint(cfg, t, threads); });
  const double weight_bytes = layer_footprint(cfg, 0, threads).weights;

  print_header("fusedmoe run", cfg, T, seed);
  if (!on_gpu) std::printf("  backend  : cpu-reference (%s)\n", why_cpu.c_str());
  std::fflush(stdout);

  auto t0 = std::chrono::steady_clock::now();
  set_activity("generating the weights");
  announce_weights(weight_bytes);
  ProgressLine progress("weights  ");
  const ref::LayerWeights lw = ref::make_random_layer(cfg, seed, std::ref(progress));
  std::printf("  weights  : %.1f MB %s, %d experts + %d shared, generated in %.2f s\n",
              weight_bytes / 1e6, precision_name(cfg.weight_precision), cfg.num_experts,
              cfg.num_shared_experts, seconds_since(t0));

  // Inputs: x ~ U(-1, 1) in bf16; router logits ~ U(-3, 3) (the projection's streams).
  set_activity("generating the inputs");
  const ProjectionInputs in = random_projection_inputs(ProjectionShape::of(cfg), T, seed);

  int h_block = 64;  // the GPU plan's intermediate scale block, which the reference follows
#if defined(FMOE_HAS_CUDA)
  std::unique_ptr<GpuLayerRun> gpu;
  if (on_gpu) {
    set_activity("running the layer on the GPU");
    gpu = std::make_unique<GpuLayerRun>(run_layer_gpu(
        cfg, T, mode, in.x, in.logits, lw.route_bias, "prepared weights",
        [&](cudaStream_t stream) { return make_gpu_layer(lw, stream); }));
    h_block = gpu->h_block;
  }
#endif

  t0 = std::chrono::steady_clock::now();
  set_activity("running the CPU reference");
  const ref::LayerResult res = ref::moe_layer(lw, in.x.data(), in.logits.data(), T, h_block);
  const double t_ref = seconds_since(t0);

  print_routing(res.routing, cfg.num_experts);
  if (!on_gpu) return report_cpu_only(t_ref, " forward", T, cfg.hidden, res.y);
#if defined(FMOE_HAS_CUDA)
  return report_gpu_check(cfg, T, mode, t_ref, *gpu, res);
#else
  return 0;  // unreachable: on_gpu needs a CUDA build
#endif
}

}  // namespace fusedmoe::cli
