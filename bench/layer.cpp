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
//
// --configs all (the tuning run): after the automatic choice, every compiled grouped-GEMM config
// of the layer's weight format and of either GEMM is forced in turn (FMOE_FORCE_CONFIG's path:
// the other GEMM and the token-tile width follow the layer's rules around it); each distinct
// (gate/up, down) pair the plans then run is checked like the automatic one and timed end to end
// ("layer.tune" rows), and one line per case says how the automatic choice compares with the
// fastest pair. Configs a plan refuses (a width or wave count the shapes do not allow) are listed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/env.hpp"
#include "gemm/gemm_config.hpp"
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
constexpr int kTuneReps = 10;  // graph replays per forced pair (30 for the automatic rows)

const std::vector<long long> kDefaultTokens = {1, 8, 32, 128, 512, 2048, 8192};
const char* const kDefaultPresets = "qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3";

struct Options {
  std::vector<std::string> presets;
  std::vector<int> tokens;
  std::vector<Precision> precisions;
  std::vector<ReductionMode> modes;
  bool stages = true;
  bool tune = false;  // --configs all
  bool unbiased = false;  // --routing unbiased
  uint64_t seed = 1;
  std::string routes_path;  // --routes FILE: each (preset, T)'s routes per expert, JSON lines
};

// One JSON line per (preset, T): the routed rows of each expert under the bench's routing, for
// peer benchmarks that must run the same grouped GEMMs (python/bench/deepgemm_peer.py). The shared
// expert (when the preset has one) is listed apart: it takes every token, with its own width.
void append_routes(const std::string& path, const MoeConfig& c, const std::string& shape, int T,
                   const ref::Routing& routing) {
  std::vector<int64_t> rows(size_t(c.num_experts), 0);
  for (const int32_t e : routing.ids)
    if (e >= 0 && e < c.num_experts) ++rows[size_t(e)];
  FILE* f = std::fopen(path.c_str(), "a");
  FMOE_REQUIRE(f, "bench layer: cannot append the routes to \"%s\"", path.c_str());
  std::string list;
  for (const int64_t r : rows) list += strf("%s%lld", list.empty() ? "" : ", ", (long long)r);
  std::fprintf(f,
               "{\"preset\": \"%s\", \"shape\": \"%s\", \"tokens\": %d, \"hidden\": %d, "
               "\"intermediate\": %d, \"top_k\": %d, \"shared_rows\": %d, "
               "\"shared_intermediate\": %d, \"routes_per_expert\": [%s]}\n",
               c.name.c_str(), shape.c_str(), T, c.hidden, c.intermediate, c.top_k,
               c.num_shared_experts > 0 ? T : 0, c.num_shared_experts > 0 ? c.shared_intermediate : 0,
               list.c_str());
  std::fclose(f);
}

// The kernels a plan runs for the two GEMMs (a row's config).
std::string kernels_of(const LayerPlan& p) {
  if (p.gemv) return "decode GEMVs";
  return strf("%s+%s", detail::gemm_config_info(p.up_config).name, detail::gemm_config_info(p.down_config).name);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class LayerBench {
 public:
  LayerBench(const Context& ctx, const MoeConfig& cfg, const Options& opt, int max_t);
  void run_tokens(int T);

 private:
  void add_row(Row row, const std::string& note);
  const MoeLayer& layer_of(int copy) const { return copy == 0 ? *gpu_.layer : *copies_[size_t(copy)]; }
  void tune(const MoeForwardArgs& a, int T, int copies, int per_graph, const Row& auto_row,
            const std::function<const ref::LayerResult*(int)>& reference, const DeviceBuffer& d_y);

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
  // The seeded correction / router bias (uniform +-0.05 / +-0.5) is large against the spread of
  // the top scores it tilts: deepseek-v3 at T=512 hits 164 of 256 experts, one with 67 routes
  // against a mean of 16. Without it the random logits route about evenly.
  if (opt.unbiased && !host_.route_bias.empty()) {
    std::fill(host_.route_bias.begin(), host_.route_bias.end(), 0.0f);
    shape_name_ += " unbiased";
  }
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
  if (!opt_.routes_path.empty()) append_routes(opt_.routes_path, c, shape_name_, T, routing);
  const double weight_bytes = cost.weight_bytes, io_bytes = cost.bytes - cost.weight_bytes;
  const double flops = cost.flops;

  // The reference, when it takes seconds.
  const MoeLayer::Impl& L = gpu_.layer->impl();
  const bool checked = double(T) * L.k_total * 3.0 * H * L.I_pad <= kCheckMacsMax;
  // The reference quantizes the fp8 intermediate with the plan's scale block (64 or 128 columns:
  // LayerPlan::h_block), one result per block, computed when a plan first needs it.
  std::unique_ptr<ref::LayerResult> wants[2];
  auto reference = [&](int h_block) -> const ref::LayerResult* {
    if (!checked) return nullptr;
    std::unique_ptr<ref::LayerResult>& w = wants[h_block == 128 ? 1 : 0];
    if (!w) {
      const auto t0 = std::chrono::steady_clock::now();
      w = std::make_unique<ref::LayerResult>(ref::moe_layer(host_, in.x.data(), in.logits.data(), T, h_block));
      std::printf("# %s T=%d: CPU reference (intermediate scales per %d) in %.1f s\n", c.name.c_str(), T,
                  h_block, seconds_since(t0));
      std::fflush(stdout);
    }
    return w.get();
  };

  const int wanted = std::max(1, int(std::ceil(kColdL2Factor * ctx_.ceil->l2_bytes / (weight_bytes + io_bytes))));
  const int copies = std::min(wanted, max_copies_);
  if (copies_.empty()) copies_.push_back(nullptr);  // slot 0: gpu_.layer
  while (int(copies_.size()) < copies)
    copies_.push_back(std::make_unique<MoeLayer>(c, gpu_.weights, ctx_.stream));
  const int per_graph = copies * ((kLaunchesPerGraph + copies - 1) / copies);

  const std::vector<uint16_t> x_bits = cli::to_bf16_bits(in.x);
  DeviceBuffer d_x = DeviceBuffer::from(x_bits), d_logits = DeviceBuffer::from(in.logits);
  DeviceBuffer d_y(size_t(T) * H * 2);
  d_y.fill(0xFF);
  FMOE_CUDA(cudaDeviceSynchronize());
  std::printf("# %s T=%d: %d/%d experts hit, %d prepared cop%s rotated (%d wanted for cold L2), "
              "CPU reference %s\n", c.name.c_str(), T, cost.hit, E, copies, copies == 1 ? "y" : "ies",
              wanted, checked ? "at each plan's intermediate scale block" : "skipped (too large)");
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
    const std::string config = kernels_of(plans[0]);
    gpu_.layer->forward(a, workspace_.get(), workspace_.bytes(), ctx_.stream);
    cli::wait_or_die(ctx_.stream, kFirstLaunchSeconds,
                     strf("layer %s T=%d, first launch", c.name.c_str(), T));
    const std::vector<uint16_t> y_first = d_y.to_host<uint16_t>();
    std::string note;
    if (const ref::LayerResult* want = reference(plans[0].h_block)) {
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
    if (opt_.tune) tune(a, T, copies, per_graph, row, reference, d_y);
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

// The tuning run (--configs all): see the top of this file.
void LayerBench::tune(const MoeForwardArgs& a, int T, int copies, int per_graph, const Row& auto_row,
                      const std::function<const ref::LayerResult*(int)>& reference,
                      const DeviceBuffer& d_y) {
  const MoeLayer::Impl& L = gpu_.layer->impl();
  const detail::GemmWeights gw = L.fp8 ? detail::GemmWeights::fp8_block
                                 : L.e2m1 ? detail::GemmWeights::e2m1 : detail::GemmWeights::bf16;
  std::set<std::string> seen = {auto_row.config};
  std::string best = auto_row.config + " (automatic)", refused;
  double best_us = auto_row.t.median_us;
  int timed = 0;
  for (int i = 0; i < int(detail::GemmConfigId::count); ++i) {
    const detail::GemmConfigInfo ci = detail::gemm_config_info(detail::GemmConfigId(i));
    const bool up = ci.epilogue == detail::GemmEpilogue::swiglu;
    const bool down = ci.epilogue == detail::GemmEpilogue::combine && ci.rows != detail::GemmRows::gathered;
    if (ci.weights != gw || !(up || down)) continue;
    std::vector<LayerPlan> plans;
    {
      detail::ScopedKnob<std::string> forced(&detail::Knobs::force_config, ci.name);
      try {
        for (int c = 0; c < copies; ++c)
          plans.push_back(detail::plan_layer_forward(layer_of(c).impl(), a, workspace_.get(),
                                                     workspace_.bytes(), ctx_.stream));
      } catch (const Error&) {
        refused += std::string(refused.empty() ? "" : ", ") + ci.name;
        continue;
      }
    }
    const std::string pair = kernels_of(plans[0]);
    if (!seen.insert(pair).second) continue;  // another forced name led to the same kernels
    for (LayerStage s : detail::kLayerStages) detail::run_layer_stage(plans[0], s, ctx_.stream);
    cli::wait_or_die(ctx_.stream, kFirstLaunchSeconds,
                     strf("layer %s T=%d, first launch with %s forced", cfg_.name.c_str(), T, ci.name));
    const std::vector<uint16_t> y = d_y.to_host<uint16_t>();
    std::string note;
    if (const ref::LayerResult* want = reference(plans[0].h_block)) {
      const cli::LayerCheck chk = cli::check_layer_output(y, want->y, cfg_.hidden, L.fp8);
      FMOE_REQUIRE(chk.ok(), "bench layer --configs all: %s T=%d %s with %s forced differs from the "
                   "CPU reference (seed %llu): %s", cfg_.name.c_str(), T, auto_row.mode.c_str(), ci.name,
                   (unsigned long long)opt_.seed, cli::describe_layer_check(chk, y, want->y, cfg_.hidden).c_str());
      note = strf("rel L2 err %.1e", chk.rel_l2);
    } else {
      for (size_t j = 0; j < y.size(); ++j)
        FMOE_REQUIRE(std::isfinite(fmt::bf16_to_float(y[j])), "bench layer --configs all: %s T=%d with "
                     "%s forced: y[%zu] is not finite", cfg_.name.c_str(), T, ci.name, j);
      note = "unchecked (large; finite)";
    }
    const Stats t = time_graph([&](cudaStream_t st, int n) {
      for (LayerStage s : detail::kLayerStages) detail::run_layer_stage(plans[size_t(n % copies)], s, st);
    }, ctx_.stream, per_graph, kTuneReps);
    Row row = auto_row;
    row.op = "layer.tune";
    row.config = pair;
    row.t = t;
    add_row(row, strf("%s forced, automatic / this %.3f, %s", ci.name, auto_row.t.median_us / t.median_us,
                      note.c_str()));
    ++timed;
    if (t.median_us < best_us) {
      best_us = t.median_us;
      best = pair;
    }
  }
  std::printf("# tune %s T=%d %s: automatic %s %.1f us; fastest of %d other pairs: %s %.1f us: the "
              "automatic choice takes %.3fx the fastest%s%s\n", cfg_.name.c_str(), T,
              auto_row.mode.c_str(), auto_row.config.c_str(), auto_row.t.median_us, timed, best.c_str(),
              best_us, auto_row.t.median_us / best_us, refused.empty() ? "" : "; refused by the plan: ",
              refused.c_str());
  std::fflush(stdout);
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
  o.tune = args.str("configs", "auto") == "all";
  o.unbiased = args.str("routing", "model") == "unbiased";
  o.seed = uint64_t(args.integer("seed", 1, 0, 1ll << 62));
  o.routes_path = args.str("routes", "");
  if (!o.routes_path.empty()) {  // start the file empty: each (preset, T) appends its line
    FILE* f = std::fopen(o.routes_path.c_str(), "w");
    FMOE_REQUIRE(f, "bench layer: --routes: cannot write \"%s\"", o.routes_path.c_str());
    std::fclose(f);
  }
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
    {"configs", "auto|all", "all: the tuning run, every compiled GEMM config of either layer GEMM "
     "forced in turn, each distinct pair checked and timed against the automatic choice (default auto)",
     Kind::choice, {"auto", "all"}},
    {"routing", "model|unbiased", "unbiased: route without the seeded layer's random correction / "
     "router bias, which concentrates the routes on a few experts (default model)", Kind::choice,
     {"model", "unbiased"}},
    {"seed", "N", "seed of the random weights and inputs (default 1)", Kind::integer, {}, 0, 1ll << 62},
    {"routes", "FILE", "also write each (preset, T)'s routed rows per expert to FILE, one JSON line "
     "each, for peer benchmarks on the same routing (python/bench/deepgemm_peer.py)"},
};

const Register kLayer{BenchOp{
    "layer", "the whole MoE layer (MoeLayer::forward) end to end and stage by stage, cold L2, checked first",
    kOptions, run_layer}};
const Register kLayerAll{BenchOp{
    "layer_all", "layer on every preset the card holds, fp8 and bf16", kOptions, run_layer_all}};

}  // namespace
}  // namespace fusedmoe::bench
