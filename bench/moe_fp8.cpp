// fusedmoe bench --op moe_fp8 | moe_fp8_all: the fused FP8 MoE projection (src/moe) end to end
// and stage by stage, cold L2, each (T, mode) checked against the CPU reference before it is
// timed.
//
// Rows: "moe_fp8" is the public moe_fp8_projection (route_quant -> schedule -> grouped GEMM ->
// finalize); "moe_fp8.<stage>" is one stage alone, launched from the same plan. The floor of a
// row is the larger of its fewest bytes over the copy bandwidth and its FLOPs over the dense
// cuBLASLt FP8 rate, both measured in this process. The bytes of the end-to-end row: the weights
// and scales of the experts this routing hits (counted on the host from ref::route on the same
// logits), plus x, logits and y.
//
// Cold L2: the inputs (weights, x, logits, y) exist in `copies` identical copies and launch i of
// a graph uses copy i % copies, so the bytes one launch touches times `copies` is at least 3x the
// L2 and every launch streams its weights from HBM (within a memory cap; a row says when not). Identical copies keep one routing, one floor and
// one reference for all of them. The workspace is one, as in a real model step.
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
#include "fusedmoe/moe.hpp"
#include "moe/moe_fp8_plan.hpp"
#include "ref/ref.hpp"
#include "tools/projection_case.hpp"

namespace fusedmoe::bench {
namespace {

using cli::ProjectionShape;
using detail::MoeFp8Plan;
using detail::MoeFp8Stage;

constexpr double kColdL2Factor = 3.0;      // bytes touched by the rotating copies >= 3x the L2
constexpr double kPoolMemFraction = 0.5;   // extra weight copies may use this share of free memory
constexpr double kFitMemFraction = 0.6;    // one weight copy + workspace must fit in this share
constexpr double kHostMemFraction = 0.5;   // the host copy of the weights (for the reference)
constexpr double kCheckMacsMax = 2e11;     // T*k*N*K above this: the CPU reference takes minutes
constexpr int kLaunchesPerGraph = 20;      // at least; rounded up to a multiple of the copies
constexpr int kMaxCopies = 64;             // bounds the graph size when a launch touches little
constexpr double kFirstLaunchSeconds = 60; // a first launch takes milliseconds; beyond this, a hang

const std::vector<long long> kDefaultTokens = {1, 8, 32, 128, 512, 2048, 4096, 16384};
constexpr MoeFp8Stage kStages[] = {MoeFp8Stage::route_quant, MoeFp8Stage::schedule,
                                   MoeFp8Stage::gemm, MoeFp8Stage::finalize};

struct Options {
  std::vector<int> tokens;
  std::vector<ReductionMode> modes;
  bool stages = true;
  uint64_t seed = 1;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The fewest bytes and the FLOPs of one launch of a stage alone (inputs + outputs; the gemm
// reads each token's activation row once at the least). R = T*k routes.
struct Cost {
  double bytes = 0, flops = 0;
  bool rotated = false;  // its dominant inputs rotate with the copies (else they sit in the workspace)
};
Cost stage_cost(MoeFp8Stage stage, const ProjectionShape& s, int T, ReductionMode mode,
                double weight_bytes) {
  const double R = double(T) * s.k, KB = double(s.k_blocks());
  const bool det = mode == ReductionMode::deterministic;
  const double acc_bytes = (det ? R : double(T)) * s.N * 4;  // fp32 sums or per-route rows
  switch (stage) {
    case MoeFp8Stage::route_quant:  // x, logits, bias -> xq, sa, ids, weights, counts (+ acc zeroed)
      return {T * (2.0 * s.K + 4.0 * s.E) + (s.has_bias() ? 4.0 * s.E : 0.0) + T * (s.K + 4 * KB) +
                  8 * R + 4.0 * s.E + (det ? 0.0 : acc_bytes), 0, true};
    case MoeFp8Stage::schedule:  // ids -> slots, sorted routes, counts, tile offsets
      return {12 * R + 8.0 * s.E + 4, 0, false};
    case MoeFp8Stage::gemm:  // weights hit + xq, sa, weights, sorted routes -> acc
      return {weight_bytes + T * (s.K + 4 * KB) + 8 * R + acc_bytes, 2 * R * s.N * double(s.K), true};
    case MoeFp8Stage::finalize:  // acc (+ route slots) -> y
      return {acc_bytes + (det ? 4 * R : 0.0) + 2.0 * T * s.N, 0, false};
  }
  return {};
}

struct WeightCopy {
  DeviceBuffer q, scale;
};
struct InputCopy {
  DeviceBuffer x, logits, y;
};

// One preset on the GPU: the weight copies (grown on demand), the bias, the workspace.
class ProjectionBench {
 public:
  ProjectionBench(const Context& ctx, const MoeConfig& cfg, const Options& opt);
  void run_tokens(int T);

 private:
  int cold_copies(double touched_bytes, int* wanted);
  std::string verify(int T, ReductionMode mode, const std::vector<uint16_t>& y,
                     const ref::ProjectionResult* want) const;
  void add_row(Row row, double weight_bytes, const std::string& note);

  const Context& ctx_;
  const MoeConfig& cfg_;
  const Options& opt_;
  ProjectionShape shape_;
  std::string shape_name_;
  ref::WeightSet host_w_;
  std::vector<WeightCopy> pool_;
  int max_copies_ = 1;
  DeviceBuffer bias_, workspace_;
};

ProjectionBench::ProjectionBench(const Context& ctx, const MoeConfig& cfg, const Options& opt)
    : ctx_(ctx), cfg_(cfg), opt_(opt), shape_(ProjectionShape::of(cfg)) {
  const ProjectionShape& s = shape_;
  shape_name_ = strf("%s N%d K%d E%d k%d", cfg.name.c_str(), s.N, s.K, s.E, s.k);
  const int max_t = *std::max_element(opt.tokens.begin(), opt.tokens.end());
  size_t ws_bytes = 0;
  for (ReductionMode m : opt.modes)
    ws_bytes = std::max(ws_bytes, moe_fp8_projection_workspace_size(max_t, s.E, s.k, s.N, s.K, m));

  auto t0 = std::chrono::steady_clock::now();
  host_w_ = cli::random_fp8_weights(s, opt.seed);
  const double gen_s = seconds_since(t0);
  pool_.resize(1);
  pool_[0].q = DeviceBuffer::from(host_w_.q);
  pool_[0].scale = DeviceBuffer::from(host_w_.scale);
  workspace_.resize(ws_bytes);
  if (s.has_bias()) bias_ = DeviceBuffer::from(cli::random_projection_inputs(s, 0, opt.seed).bias);
  FMOE_CUDA(cudaDeviceSynchronize());  // the uploads ran on the legacy stream; ctx.stream does not wait

  size_t free_bytes = 0, total_bytes = 0;
  FMOE_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  max_copies_ = std::min(kMaxCopies, 1 + int(kPoolMemFraction * double(free_bytes) /
                                               s.weight_bytes()));
  std::printf("# %s: weights %.1f MB e4m3 + scales (generated in %.2f s), workspace %.1f MB, "
              "up to %d weight copies for cold L2\n", cfg.summary().c_str(), s.weight_bytes() / 1e6,
              gen_s, double(ws_bytes) / 1e6, max_copies_);
  std::fflush(stdout);
}

// Copies needed so that `touched_bytes` per launch over all copies is >= 3x the L2; grows the
// weight pool up to the memory cap and returns how many copies to rotate (<= *wanted).
int ProjectionBench::cold_copies(double touched_bytes, int* wanted) {
  *wanted = std::max(1, int(std::ceil(kColdL2Factor * ctx_.ceil->l2_bytes / touched_bytes)));
  const int copies = std::min(*wanted, max_copies_);
  while (int(pool_.size()) < copies) {
    WeightCopy c{DeviceBuffer(pool_[0].q.bytes()), DeviceBuffer(pool_[0].scale.bytes())};
    FMOE_CUDA(cudaMemcpy(c.q.get(), pool_[0].q.get(), c.q.bytes(), cudaMemcpyDeviceToDevice));
    FMOE_CUDA(cudaMemcpy(c.scale.get(), pool_[0].scale.get(), c.scale.bytes(),
                         cudaMemcpyDeviceToDevice));
    pool_.push_back(std::move(c));
  }
  // (device-to-device cudaMemcpy returns before the copy is done, on the legacy stream, which the
  // bench's non-blocking stream does not wait for)
  FMOE_CUDA(cudaDeviceSynchronize());
  return copies;
}

// Checks y against the reference (or, past kCheckMacsMax, only that it is finite); throws Error
// on a mismatch. Returns the note: "max rel err 2.1e-03" or "unchecked (...)".
std::string ProjectionBench::verify(int T, ReductionMode mode, const std::vector<uint16_t>& y,
                                    const ref::ProjectionResult* want) const {
  const char* what = reduction_mode_name(mode);
  if (!want) {
    for (size_t i = 0; i < y.size(); ++i)
      FMOE_REQUIRE(std::isfinite(fmt::bf16_to_float(y[i])),
                   "bench moe_fp8: %s T=%d %s: y[%zu, %zu] is not finite (seed %llu)",
                   cfg_.name.c_str(), T, what, i / size_t(shape_.N), i % size_t(shape_.N),
                   (unsigned long long)opt_.seed);
    return strf("unchecked (T*k*N*K %.1e > %.0e; finite)", double(T) * shape_.k * shape_.N *
                shape_.K, kCheckMacsMax);
  }
  const cli::ProjectionCheck c = cli::check_projection(y, want->y);
  FMOE_REQUIRE(c.ok(), "bench moe_fp8: %s T=%d %s differs from the CPU reference (seed %llu): %s",
               cfg_.name.c_str(), T, what, (unsigned long long)opt_.seed,
               cli::describe_failure(c, y, want->y, shape_.N).c_str());
  return strf("max rel err %.1e", c.max_rel_err);
}

void ProjectionBench::add_row(Row row, double weight_bytes, const std::string& note) {
  row.shape = shape_name_;
  row.weight_bytes = weight_bytes;
  row.note = note;
  set_floor(row, *ctx_.ceil, "fp8");
  print_row(row, *ctx_.ceil);
  ctx_.rows->push_back(std::move(row));
}

void ProjectionBench::run_tokens(int T) {
  const ProjectionShape& s = shape_;
  const cli::ProjectionInputs in = cli::random_projection_inputs(s, T, opt_.seed);

  // The reference (once for both modes) and the experts this routing hits.
  const bool checked = double(T) * s.k * s.N * s.K <= kCheckMacsMax;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<ref::ProjectionResult> want;
  ref::Routing routing;
  if (checked) {
    want = std::make_unique<ref::ProjectionResult>(ref::moe_projection(
        s.routing, in.x.data(), in.logits.data(), in.bias_or_null(), T, s.k, host_w_));
    routing = want->routing;
  } else {
    routing = ref::route(s.routing, in.logits.data(), T, s.E, s.k, in.bias_or_null());
  }
  const double ref_s = seconds_since(t0);
  const cli::ExpertLoad load = cli::expert_load(routing, s.E);
  const double weight_bytes = load.hit * s.expert_bytes();
  const double io_bytes = double(T) * (2.0 * s.K + 4.0 * s.E + 2.0 * s.N);

  int wanted = 1;
  const int copies = cold_copies(weight_bytes + io_bytes, &wanted);
  const int per_graph = copies * ((kLaunchesPerGraph + copies - 1) / copies);
  std::vector<InputCopy> inputs(static_cast<size_t>(copies));
  const std::vector<uint16_t> x_bits = cli::to_bf16_bits(in.x);
  for (InputCopy& c : inputs) {
    c.x = DeviceBuffer::from(x_bits);
    c.logits = DeviceBuffer::from(in.logits);
    c.y.resize(size_t(T) * s.N * 2);
    c.y.fill(0xFF);  // NaN: the pipeline must write every output
  }
  FMOE_CUDA(cudaDeviceSynchronize());  // uploads and fills ran on the legacy stream
  std::printf("# %s T=%d: %d/%d experts hit, %d input cop%s rotated (%d wanted for cold L2), CPU "
              "reference %s\n", cfg_.name.c_str(), T, load.hit, s.E, copies, copies == 1 ? "y" : "ies",
              wanted, checked ? strf("%.1f s", ref_s).c_str() : "skipped (too large)");
  std::fflush(stdout);

  std::string common = strf("%d/%d experts hit", load.hit, s.E);
  if (copies < wanted)
    common += strf(", L2 partly warm: %d of %d copies fit", copies, wanted);
  const cudaStream_t stream = ctx_.stream;
  double fast_us = 0;
  for (const ReductionMode mode : opt_.modes) {
    std::vector<MoeFp8ProjectionArgs> args;
    std::vector<MoeFp8Plan> plans;
    for (int i = 0; i < copies; ++i) {
      const WeightCopy& w = pool_[size_t(i)];
      const InputCopy& c = inputs[size_t(i)];
      args.push_back(cli::projection_args(
          s, T, mode, {c.x.get(), c.logits.get(), bias_.get(), w.q.get(), w.scale.get(), c.y.get()}));
      plans.push_back(detail::plan_moe_fp8_projection(args.back(), workspace_.get(),
                                                      workspace_.bytes(), stream));
    }
    const std::string config = detail::gemm_config_info(plans[0].config).name;

    // Verify the first launch, time, then verify what the last replays left.
    moe_fp8_projection(args[0], workspace_.get(), workspace_.bytes(), stream);
    cli::wait_or_die(stream, kFirstLaunchSeconds, strf("moe_fp8 %s T=%d %s, first launch",
                                                       cfg_.name.c_str(), T, reduction_mode_name(mode)));
    const std::vector<uint16_t> y_first = inputs[0].y.to_host<uint16_t>();
    std::string note = verify(T, mode, y_first, want.get());
    const Stats t = time_graph([&](cudaStream_t st, int i) {
      moe_fp8_projection(args[size_t(i % copies)], workspace_.get(), workspace_.bytes(), st);
    }, stream, per_graph);
    const std::vector<uint16_t> y_last = inputs[0].y.to_host<uint16_t>();
    if (mode == ReductionMode::deterministic) {
      FMOE_REQUIRE(y_last == y_first, "bench moe_fp8: %s T=%d deterministic: the output after %d "
                   "graph replays differs from the first run's (seed %llu)", cfg_.name.c_str(), T,
                   t.samples, (unsigned long long)opt_.seed);
      note += ", replays bit-identical";
      if (fast_us > 0) note += strf(", det/fast %.2fx", t.median_us / fast_us);
    } else {
      verify(T, mode, y_last, want.get());
      fast_us = t.median_us;
    }

    Row row;
    row.op = "moe_fp8";
    row.config = config;
    row.mode = reduction_mode_name(mode);
    row.tokens = T;
    row.t = t;
    row.flops = 2.0 * T * s.k * double(s.N) * s.K;
    row.bytes = weight_bytes + io_bytes;
    add_row(row, weight_bytes, note + ", " + common);
    if (!opt_.stages) continue;

    for (const MoeFp8Stage stage : kStages) {
      const Cost cost = stage_cost(stage, s, T, mode, weight_bytes);
      const bool is_schedule = stage == MoeFp8Stage::schedule;
      const Stats ts = time_graph([&](cudaStream_t st, int i) {
        const MoeFp8Plan& plan = plans[size_t(i % copies)];
        if (is_schedule) {  // alone, the schedule needs what stage 1 leaves: counts, status zero
          FMOE_CUDA(cudaMemsetAsync(plan.ws.counts, 0, sizeof(int32_t) * s.E, st));
          FMOE_CUDA(cudaMemsetAsync(plan.ws.status, 0, sizeof(int32_t) * detail::kStatusWords, st));
        }
        detail::run_moe_fp8_stage(plan, stage, st);
      }, stream, per_graph);
      Row sr;
      sr.op = std::string("moe_fp8.") + detail::moe_fp8_stage_name(stage);
      sr.config = config;
      sr.mode = row.mode;
      sr.tokens = T;
      sr.t = ts;
      sr.flops = cost.flops;
      sr.bytes = cost.bytes;
      std::string stage_note = is_schedule ? "incl. memset of counts+status" : "";
      if (cost.bytes * (cost.rotated ? copies : 1) < kColdL2Factor * ctx_.ceil->l2_bytes)
        stage_note += std::string(stage_note.empty() ? "" : ", ") + "L2-warm inputs";
      add_row(sr, stage == MoeFp8Stage::gemm ? weight_bytes : 0.0, stage_note);
    }
  }
}

// Benchmarks one preset; with skip_if_too_big, a preset that does not fit prints why and is
// skipped instead of failing the run.
void bench_preset(const Context& ctx, const std::string& name, const Options& opt,
                  bool skip_if_too_big) {
  const MoeConfig& cfg = find_preset(name);
  const ProjectionShape s = ProjectionShape::of(cfg);
  size_t free_bytes = 0, total_bytes = 0;
  FMOE_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
  const int max_t = *std::max_element(opt.tokens.begin(), opt.tokens.end());
  double ws_bytes = 0;
  for (ReductionMode m : opt.modes)
    ws_bytes = std::max(ws_bytes,
                        double(moe_fp8_projection_workspace_size(max_t, s.E, s.k, s.N, s.K, m)));
  std::string why;
  if (s.weight_bytes() + ws_bytes > kFitMemFraction * double(free_bytes))
    why = strf("one weight copy (%.2f GB) + workspace (%.2f GB) exceed %.0f%% of the %.2f GB of "
               "free GPU memory", s.weight_bytes() / 1e9, ws_bytes / 1e9, 100 * kFitMemFraction,
               double(free_bytes) / 1e9);
  else if (s.weight_bytes() > kHostMemFraction * cli::host_memory_bytes())
    why = strf("its weights (%.2f GB) exceed %.0f%% of this machine's %.1f GB of memory",
               s.weight_bytes() / 1e9, 100 * kHostMemFraction, cli::host_memory_bytes() / 1e9);
  if (!why.empty()) {
    FMOE_REQUIRE(skip_if_too_big, "bench moe_fp8: preset %s does not fit: %s", name.c_str(),
                 why.c_str());
    std::printf("# skip %s: %s\n", name.c_str(), why.c_str());
    return;
  }
  ProjectionBench b(ctx, cfg, opt);
  for (const int T : opt.tokens) b.run_tokens(T);
}

Options parse_options(const cli::Args& args) {
  Options o;
  for (const long long t : args.int_list("tokens", kDefaultTokens, 1, 65536)) o.tokens.push_back(int(t));
  const std::string mode = args.str("mode", "both");
  if (mode == "both") o.modes = {ReductionMode::fast, ReductionMode::deterministic};
  else if (mode == "fast") o.modes = {ReductionMode::fast};
  else if (mode == "deterministic") o.modes = {ReductionMode::deterministic};
  else throw cli::UsageError(strf("--mode must be fast, deterministic or both, got \"%s\"", mode.c_str()));
  const std::string stages = args.str("stages", "on");
  if (stages != "on" && stages != "off")
    throw cli::UsageError(strf("--stages must be on or off, got \"%s\"", stages.c_str()));
  o.stages = stages == "on";
  o.seed = uint64_t(args.integer("seed", 1, 0, 1ll << 62));
  return o;
}

void run_moe_fp8(const Context& ctx, const cli::Args& args) {
  const Options opt = parse_options(args);
  bench_preset(ctx, args.str("preset", default_preset_name()), opt, false);
}

// The headline set: the default preset at every default T, both modes (stages per --stages),
// then one T=128 fast row for each other preset the card holds.
void run_moe_fp8_all(const Context& ctx, const cli::Args& args) {
  const Options opt = parse_options(args);
  bench_preset(ctx, default_preset_name(), opt, true);
  Options one = opt;
  one.tokens = {128};
  one.modes = {ReductionMode::fast};
  one.stages = false;
  for (const char* name : {"qwen3-30b-a3b", "deepseek-v3", "kimi-k2", "mixtral-8x7b",
                           "gpt-oss-120b", "llama4-maverick"})
    bench_preset(ctx, name, one, true);
}

using Kind = BenchOption::Kind;
const BenchOption kStagesOption{"stages", "on|off", "also time each stage alone (default on)",
                                Kind::choice, {"on", "off"}};
const BenchOption kSeedOption{"seed", "N", "seed of the random weights and inputs (default 1)",
                              Kind::integer, {}, 0, 1ll << 62};

const Register kMoeFp8{BenchOp{
    "moe_fp8",
    "FP8 MoE projection end to end and stage by stage, cold L2, each case checked first",
    {{"preset", "NAME", "model preset (default qwen3.5-35b-a3b; see 'fusedmoe list-presets')",
      Kind::preset},
     {"tokens", "LIST", "comma-separated token counts in [1, 65536] (default "
      "1,8,32,128,512,2048,4096,16384)", Kind::int_list, {}, 1, 65536},
     {"mode", "fast|deterministic|both", "reduction modes to time (default both)",
      Kind::choice, {"fast", "deterministic", "both"}},
     kStagesOption, kSeedOption},
    run_moe_fp8}};
const Register kMoeFp8All{BenchOp{
    "moe_fp8_all",
    "Headline set: moe_fp8 on qwen3.5-35b-a3b (default tokens, both modes), then T=128 on "
    "each other preset the card holds",
    {kStagesOption, kSeedOption},
    run_moe_fp8_all}};

}  // namespace
}  // namespace fusedmoe::bench
