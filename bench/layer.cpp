// fusedmoe bench --op layer | layer_all: the whole MoE layer (MoeLayer::forward) end to end and
// stage by stage, cold L2, each case checked against the CPU reference first where that takes
// seconds (else only for finite output).
//
// Rows: "layer" is the public forward (route_quant -> schedule -> gate_up -> down -> finalize);
// "layer.<stage>" is one stage alone, launched from the same plan. The floor of a row is the
// larger of its fewest bytes over the byte ceiling and its FLOPs over the dense cuBLASLt rate of
// its precision, both measured in this process. The bytes of the end-to-end row: the weights and
// scales of the routed experts this routing hits (counted on the host from ref::route on the same
// logits) and of the shared experts, plus x, logits and y. FLOPs: 2 * T * 3 * H * (k * I + S).
//
// Cold L2: the layer is prepared `copies` times from one set of weights (identical values) and
// launch i uses copy i % copies, so the weight bytes one launch touches times `copies` is at
// least 3x the L2 (within a memory cap; a row says when not). Weights are drawn as codes
// (cli::random_layer_codes): seconds for the largest presets.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "layer/layer_plan.hpp"
#include "ref/ref.hpp"
#include "tools/layer_case.hpp"
#include "tools/projection_case.hpp"

namespace fusedmoe::bench {
namespace {

using detail::LayerPlan;
using detail::LayerStage;

constexpr double kColdL2Factor = 3.0;
constexpr double kPoolMemFraction = 0.45;  // extra prepared copies may use this share of free memory
constexpr double kCheckMacsMax = 4e10;     // T * k_total * 3 * H * I above this: reference skipped
constexpr int kLaunchesPerGraph = 20;
constexpr int kMaxCopies = 32;
constexpr double kFirstLaunchSeconds = 60;

const std::vector<long long> kDefaultTokens = {1, 8, 32, 128, 512, 2048, 8192};
const char* const kDefaultPresets = "qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3";

struct Options {
  std::vector<std::string> presets;
  std::vector<int> tokens;
  std::vector<Precision> precisions;
  std::vector<ReductionMode> modes;
  bool stages = true;
  uint64_t seed = 1;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class LayerBench {
 public:
  LayerBench(const Context& ctx, const MoeConfig& cfg, const Options& opt, int max_t);
  void run_tokens(int T);

 private:
  void add_row(Row row, const std::string& note);

  const Context& ctx_;
  MoeConfig cfg_;
  const Options& opt_;
  std::string shape_name_;
  ref::LayerWeights host_;
  cli::GpuLayer gpu_;
  std::vector<std::unique_ptr<MoeLayer>> copies_;  // copies_[0] is gpu_.layer
  int max_copies_ = 1;
  DeviceBuffer workspace_;
};

LayerBench::LayerBench(const Context& ctx, const MoeConfig& cfg, const Options& opt, int max_t)
    : ctx_(ctx), cfg_(cfg), opt_(opt) {
  shape_name_ = strf("%s %s", cfg.name.c_str(), precision_name(cfg.weight_precision));
  const auto t0 = std::chrono::steady_clock::now();
  host_ = cli::random_layer_codes(cfg, opt.seed);
  const double gen_s = seconds_since(t0);
  gpu_ = cli::make_gpu_layer(host_, ctx.stream);
  size_t ws = 0;
  for (ReductionMode m : opt.modes) ws = std::max(ws, gpu_.layer->workspace_size(max_t, m));
  workspace_.resize(ws);
  size_t free_bytes = 0, total = 0;
  FMOE_CUDA(cudaMemGetInfo(&free_bytes, &total));
  const double prepared = double(gpu_.layer->prepared_bytes());
  max_copies_ = std::min(kMaxCopies, 1 + int(kPoolMemFraction * double(free_bytes) / prepared));
  std::printf("# %s: prepared weights %.2f GB (drawn in %.1f s), workspace %.1f MB, up to %d "
              "prepared copies for cold L2\n", cfg.summary().c_str(), prepared / 1e9, gen_s,
              double(ws) / 1e6, max_copies_);
  std::fflush(stdout);
}

void LayerBench::add_row(Row row, const std::string& note) {
  row.shape = shape_name_;
  row.note = note;
  set_floor(row, *ctx_.ceil, cfg_.weight_precision == Precision::fp8_block ? "fp8" : "bf16");
  print_row(row, *ctx_.ceil);
  ctx_.rows->push_back(std::move(row));
}

void LayerBench::run_tokens(int T) {
  const MoeConfig& c = cfg_;
  const int H = c.hidden, E = c.num_experts, k = c.top_k;
  const cli::ProjectionInputs in =
      cli::random_projection_inputs(cli::ProjectionShape::of(c), T, opt_.seed);
  const float* bias = host_.route_bias.empty() ? nullptr : host_.route_bias.data();
  const ref::Routing routing = ref::route(c.routing, in.logits.data(), T, E, k, bias);
  const cli::LayerCost cost = cli::layer_cost(c, routing, T);
  const double weight_bytes = cost.weight_bytes, io_bytes = cost.bytes - cost.weight_bytes;
  const double flops = cost.flops;

  // The reference, when it takes seconds.
  const MoeLayer::Impl& L = gpu_.layer->impl();
  const bool checked = double(T) * L.k_total * 3.0 * H * L.I_pad <= kCheckMacsMax;
  std::unique_ptr<ref::LayerResult> want;
  auto t0 = std::chrono::steady_clock::now();
  if (checked) want = std::make_unique<ref::LayerResult>(ref::moe_layer(host_, in.x.data(), in.logits.data(), T));
  const double ref_s = seconds_since(t0);

  const int wanted = std::max(1, int(std::ceil(kColdL2Factor * ctx_.ceil->l2_bytes / (weight_bytes + io_bytes))));
  const int copies = std::min(wanted, max_copies_);
  if (copies_.empty()) copies_.push_back(nullptr);  // slot 0: gpu_.layer
  while (int(copies_.size()) < copies)
    copies_.push_back(std::make_unique<MoeLayer>(c, gpu_.weights, ctx_.stream));
  auto layer_of = [&](int i) -> const MoeLayer& { return i == 0 ? *gpu_.layer : *copies_[size_t(i)]; };
  const int per_graph = copies * ((kLaunchesPerGraph + copies - 1) / copies);

  const std::vector<uint16_t> x_bits = cli::to_bf16_bits(in.x);
  DeviceBuffer d_x = DeviceBuffer::from(x_bits), d_logits = DeviceBuffer::from(in.logits);
  DeviceBuffer d_y(size_t(T) * H * 2);
  d_y.fill(0xFF);
  FMOE_CUDA(cudaDeviceSynchronize());
  std::printf("# %s T=%d: %d/%d experts hit, %d prepared cop%s rotated (%d wanted for cold L2), "
              "CPU reference %s\n", c.name.c_str(), T, cost.hit, E, copies, copies == 1 ? "y" : "ies",
              wanted, checked ? strf("%.1f s", ref_s).c_str() : "skipped (too large)");
  std::fflush(stdout);
  std::string common = strf("%d/%d experts hit", cost.hit, E);
  if (copies < wanted) common += strf(", L2 partly warm: %d of %d copies fit", copies, wanted);

  double fast_us = 0;
  for (const ReductionMode mode : opt_.modes) {
    MoeForwardArgs a;
    a.x = TensorRef::contiguous(d_x.get(), DType::bf16, {T, H}, Device::cuda);
    a.router_logits = TensorRef::contiguous(d_logits.get(), DType::f32, {T, E}, Device::cuda);
    a.y = TensorRef::contiguous(d_y.get(), DType::bf16, {T, H}, Device::cuda);
    a.mode = mode;
    std::vector<LayerPlan> plans;
    for (int i = 0; i < copies; ++i)
      plans.push_back(detail::plan_layer_forward(layer_of(i).impl(), a, workspace_.get(),
                                                 workspace_.bytes(), ctx_.stream));
    const std::string config = strf("%s+%s", detail::gemm_config_info(plans[0].up_config).name,
                                    detail::gemm_config_info(plans[0].down_config).name);
    gpu_.layer->forward(a, workspace_.get(), workspace_.bytes(), ctx_.stream);
    cli::wait_or_die(ctx_.stream, kFirstLaunchSeconds,
                     strf("layer %s T=%d, first launch", c.name.c_str(), T));
    const std::vector<uint16_t> y_first = d_y.to_host<uint16_t>();
    std::string note;
    if (want) {
      const cli::LayerCheck chk = cli::check_layer_output(y_first, want->y, H, L.fp8);
      FMOE_REQUIRE(chk.ok(), "bench layer: %s T=%d %s differs from the CPU reference (seed %llu): %s",
                   c.name.c_str(), T, reduction_mode_name(mode), (unsigned long long)opt_.seed,
                   cli::describe_layer_check(chk, y_first, want->y, H).c_str());
      note = strf("rel L2 err %.1e", chk.rel_l2);
    } else {
      for (size_t i = 0; i < y_first.size(); ++i)
        FMOE_REQUIRE(std::isfinite(fmt::bf16_to_float(y_first[i])),
                     "bench layer: %s T=%d: y[%zu] is not finite", c.name.c_str(), T, i);
      note = "unchecked (large; finite)";
    }
    const Stats t = time_graph([&](cudaStream_t st, int i) {
      for (LayerStage s : detail::kLayerStages) detail::run_layer_stage(plans[size_t(i % copies)], s, st);
    }, ctx_.stream, per_graph);
    if (mode == ReductionMode::deterministic) {
      FMOE_REQUIRE(d_y.to_host<uint16_t>() == y_first, "bench layer: %s T=%d deterministic: output "
                   "after graph replays differs from the first call's", c.name.c_str(), T);
      note += ", replays bit-identical";
      if (fast_us > 0) note += strf(", det/fast %.2fx", t.median_us / fast_us);
    } else {
      fast_us = t.median_us;
    }
    Row row;
    row.op = "layer";
    row.config = config;
    row.mode = reduction_mode_name(mode);
    row.tokens = T;
    row.t = t;
    row.flops = flops;
    row.bytes = weight_bytes + io_bytes;
    row.weight_bytes = weight_bytes;
    add_row(row, note + ", " + common);
    if (!opt_.stages) continue;
    for (const LayerStage stage : detail::kLayerStages) {
      // No schedule kernel runs where the GEMM builds the table or the GEMVs need none.
      if (stage == LayerStage::schedule && (plans[0].fused_schedule || plans[0].gemv)) continue;
      const Stats ts = time_graph([&](cudaStream_t st, int i) {
        const LayerPlan& plan = plans[size_t(i % copies)];
        if (stage == LayerStage::schedule) {  // alone, it needs what stage 1 leaves zeroed
          FMOE_CUDA(cudaMemsetAsync(plan.ws.counts, 0, sizeof(int32_t) * L.E_total, st));
          FMOE_CUDA(cudaMemsetAsync(plan.ws.status, 0, sizeof(int32_t) * detail::kStatusWords, st));
        }
        detail::run_layer_stage(plan, stage, st);
      }, ctx_.stream, per_graph);
      Row sr;
      sr.op = std::string("layer.") + detail::layer_stage_name(stage);
      sr.config = config;
      sr.mode = row.mode;
      sr.tokens = T;
      sr.t = ts;
      add_row(sr, strf("%.0f%% of the layer%s", 100.0 * ts.median_us / t.median_us,
                       stage == LayerStage::gate_up && plans[0].fused_schedule ? " (builds the schedule)"
                       : stage == LayerStage::schedule ? " (with the two memsets it needs alone, which "
                                                         "route_quant does in the layer)"
                                                       : ""));
    }
  }
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

Options parse_options(const cli::Args& args, const char* presets, const char* precisions,
                      const char* modes) {
  Options o;
  for (const std::string& p : split(args.str("presets", presets))) {
    find_preset(p);  // throws, listing the names, when unknown
    o.presets.push_back(p);
  }
  for (const long long t : args.int_list("tokens", kDefaultTokens, 1, 65536)) o.tokens.push_back(int(t));
  const std::string prec = args.str("precision", precisions);
  if (prec == "fp8" || prec == "both") o.precisions.push_back(Precision::fp8_block);
  if (prec == "bf16" || prec == "both") o.precisions.push_back(Precision::bf16);
  if (prec == "nvfp4") o.precisions.push_back(Precision::nvfp4);
  if (prec == "mxfp4") o.precisions.push_back(Precision::mxfp4);
  const std::string mode = args.str("mode", modes);
  if (mode == "fast" || mode == "both") o.modes.push_back(ReductionMode::fast);
  if (mode == "deterministic" || mode == "both") o.modes.push_back(ReductionMode::deterministic);
  o.stages = args.str("stages", "on") == "on";
  o.seed = uint64_t(args.integer("seed", 1, 0, 1ll << 62));
  return o;
}

void run_options(const Context& ctx, const Options& opt) {
  const int max_t = *std::max_element(opt.tokens.begin(), opt.tokens.end());
  for (const std::string& name : opt.presets)
    for (const Precision p : opt.precisions) {
      MoeConfig cfg = find_preset(name);
      cfg.weight_precision = p;
      const bool w4 = p == Precision::nvfp4 || p == Precision::mxfp4;
      cfg.activation_precision = w4 ? Precision::bf16 : p;  // W4A16 on the GPU
      size_t free_bytes = 0, total = 0;
      FMOE_CUDA(cudaMemGetInfo(&free_bytes, &total));
      const double need = 2.2 * (cfg.num_experts * cli::mlp_weight_bytes(cfg, cfg.intermediate) +
                                 (cfg.num_shared_experts ? cli::mlp_weight_bytes(cfg, cfg.shared_intermediate) : 0));
      if (need > 0.9 * double(free_bytes) || need / 2 > 0.45 * cli::host_memory_bytes()) {
        std::printf("# skip %s %s: checkpoint + prepared weights (%.1f GB) do not fit this card's "
                    "free memory (%.1f GB) or half this machine's\n", name.c_str(),
                    precision_name(p), need / 1e9, double(free_bytes) / 1e9);
        continue;
      }
      LayerBench b(ctx, cfg, opt, max_t);
      for (const int T : opt.tokens) b.run_tokens(T);
    }
}

void run_layer(const Context& ctx, const cli::Args& args) {
  run_options(ctx, parse_options(args, kDefaultPresets, "fp8", "fast"));
}

void run_layer_all(const Context& ctx, const cli::Args& args) {
  std::string all;
  for (const MoeConfig& c : model_presets()) all += (all.empty() ? "" : ",") + c.name;
  run_options(ctx, parse_options(args, all.c_str(), "both", "fast"));
}

using Kind = BenchOption::Kind;
const std::vector<BenchOption> kOptions = {
    {"presets", "LIST", "comma-separated presets (layer: qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3; "
     "layer_all: every preset)"},
    {"tokens", "LIST", "comma-separated token counts in [1, 65536] (default 1,8,32,128,512,2048,8192)",
     Kind::int_list, {}, 1, 65536},
    {"precision", "fp8|bf16|both|nvfp4|mxfp4", "weight precision (activations: the same, bf16 for "
     "nvfp4 and mxfp4; layer: fp8, layer_all: both)", Kind::choice,
     {"fp8", "bf16", "both", "nvfp4", "mxfp4"}},
    {"mode", "fast|deterministic|both", "reduction modes to time (default fast)", Kind::choice,
     {"fast", "deterministic", "both"}},
    {"stages", "on|off", "also time each stage alone (default on)", Kind::choice, {"on", "off"}},
    {"seed", "N", "seed of the random weights and inputs (default 1)", Kind::integer, {}, 0, 1ll << 62},
};

const Register kLayer{BenchOp{
    "layer", "the whole MoE layer (MoeLayer::forward) end to end and stage by stage, cold L2, checked first",
    kOptions, run_layer}};
const Register kLayerAll{BenchOp{
    "layer_all", "layer on every preset the card holds, fp8 and bf16", kOptions, run_layer_all}};

}  // namespace
}  // namespace fusedmoe::bench
