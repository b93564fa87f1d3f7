// Host side of the fused FP8 MoE projection: argument validation, the workspace plan, the GEMM
// config choice, and the four stage launches (see moe_fp8_plan.hpp for the data flow).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "common/env.hpp"
#include "common/tensor_check.hpp"
#include "common/tma.hpp"
#include "fusedmoe/device.hpp"
#include "moe/moe_fp8_plan.hpp"

namespace fusedmoe {

const char* reduction_mode_name(ReductionMode m) {
  return m == ReductionMode::fast ? "fast" : "deterministic";
}

ReductionMode parse_reduction_mode(const std::string& s) {
  if (s == "fast") return ReductionMode::fast;
  if (s == "deterministic" || s == "det") return ReductionMode::deterministic;
  FMOE_REQUIRE(false, "reduction mode \"%s\" is not one of fast, deterministic", s.c_str());
}

namespace detail {
namespace {

constexpr const char* kOp = "moe_fp8_projection";
constexpr size_t kAlign = 256;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

void check_sizes(int max_tokens, int E, int k, int N, int K) {
  FMOE_REQUIRE(max_tokens >= 0, "%s: max_tokens must be >= 0, got %d", kOp, max_tokens);
  FMOE_REQUIRE(E >= 1 && E <= kRouteMaxExperts,
               "%s: the number of experts must be in [1, %d], got %d", kOp, kRouteMaxExperts, E);
  FMOE_REQUIRE(k >= 1 && k <= E && k <= 32,
               "%s: top_k must be in [1, min(E=%d, 32)], got %d", kOp, E, k);
  FMOE_REQUIRE(N >= 16 && N % 16 == 0, "%s: N (weight rows per expert) must be a positive "
               "multiple of 16, got %d", kOp, N);
  FMOE_REQUIRE(K >= 16 && K % 16 == 0, "%s: K (the reduction dimension) must be a positive "
               "multiple of 16, got %d", kOp, K);
  FMOE_REQUIRE(int64_t(max_tokens) * E < (int64_t(1) << 31) &&
                   int64_t(max_tokens) * k * N < (int64_t(1) << 40),
               "%s: max_tokens=%d is too large for E=%d, k=%d, N=%d", kOp, max_tokens, E, k, N);
}

// Status words first: their place does not depend on T, so moe_fp8_dropped_routes finds them.
size_t layout(int T, int E, int k, int N, int K, ReductionMode mode, void* base,
              MoeFp8Workspace* ws) {
  const int64_t R = int64_t(T) * k, KB = cdiv(K, 128);
  size_t off = 0;
  auto take = [&](auto*& ptr, int64_t count) {
    using T_ = std::remove_pointer_t<std::remove_reference_t<decltype(ptr)>>;
    if (base) ptr = reinterpret_cast<T_*>(static_cast<uint8_t*>(base) + off);
    off = align_up(off + size_t(count) * sizeof(T_));
  };
  MoeFp8Workspace dummy;
  MoeFp8Workspace& w = ws ? *ws : dummy;
  take(w.status, kStatusWords);
  take(w.counts, E);
  take(w.tile_offsets, E + 1);
  take(w.topk_ids, R);
  take(w.topk_weights, R);
  take(w.route_slot, R);
  take(w.sorted_route, int64_t(E) * T);
  take(w.xq, int64_t(T) * K);
  take(w.sa, int64_t(T) * KB);
  take(w.acc, (mode == ReductionMode::fast ? int64_t(T) : R) * N);
  return off;
}

struct DeviceState {
  int sms = 0;
  bool ok = false;
  std::string why;
};

// Per-device facts, read once (the call path must not query the driver every time).
const DeviceState& device_state(int dev) {
  static std::mutex mu;
  static std::vector<DeviceState> states;
  std::lock_guard<std::mutex> lock(mu);
  if (states.empty()) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    states.resize(size_t(std::max(n, 1)));
    for (int i = 0; i < n; ++i) {
      states[size_t(i)].ok = gpu_usable(i, &states[size_t(i)].why);
      if (states[size_t(i)].ok)
        FMOE_CUDA(cudaDeviceGetAttribute(&states[size_t(i)].sms, cudaDevAttrMultiProcessorCount, i));
    }
    if (n == 0) gpu_usable(0, &states[0].why);
  }
  FMOE_REQUIRE(dev >= 0 && dev < int(states.size()), "%s: CUDA device %d does not exist", kOp, dev);
  return states[size_t(dev)];
}

void validate_routing_config(const RoutingConfig& r, int E, int k) {
  switch (r.fn) {
    case RoutingFn::softmax_topk:
    case RoutingFn::topk_softmax:
      break;
    case RoutingFn::sigmoid_grouped_topk:
      FMOE_REQUIRE(r.num_groups >= 1 && r.num_groups <= kRouteMaxGroups && E % r.num_groups == 0,
                   "%s: routing.num_groups=%d must divide E=%d and be at most %d", kOp,
                   r.num_groups, E, kRouteMaxGroups);
      FMOE_REQUIRE(r.topk_groups >= 1 && r.topk_groups <= r.num_groups,
                   "%s: routing.topk_groups=%d must be in [1, num_groups=%d]", kOp, r.topk_groups,
                   r.num_groups);
      FMOE_REQUIRE(k <= r.topk_groups * (E / r.num_groups),
                   "%s: top_k=%d exceeds the %d experts of the %d kept groups", kOp, k,
                   r.topk_groups * (E / r.num_groups), r.topk_groups);
      break;
    case RoutingFn::sigmoid_top1_on_input:
      FMOE_REQUIRE(k == 1, "%s: sigmoid_top1_on_input routing puts the weight on the input and "
                   "needs top_k=1, got %d", kOp, k);
      break;
  }
  FMOE_REQUIRE(std::isfinite(r.routed_scaling_factor),
               "%s: routing.routed_scaling_factor must be finite, got %g", kOp,
               double(r.routed_scaling_factor));
  FMOE_REQUIRE(std::isfinite(r.softcap) && r.softcap >= 0.0f,
               "%s: routing.softcap must be >= 0 (0 = off), got %g", kOp, double(r.softcap));
}

bool needs_bias(const RoutingConfig& r) {
  return (r.fn == RoutingFn::sigmoid_grouped_topk && r.correction_bias) ||
         (r.fn == RoutingFn::topk_softmax && r.router_bias);
}

// Ids given by the caller are checked on the host when the stream is not being captured; the
// device side drops and counts a bad id whatever happens, so nothing is ever read out of bounds.
void check_given_ids(const TensorRef& ids, int E, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FMOE_CUDA(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  std::vector<int32_t> host(size_t(ids.numel()));
  if (host.empty()) return;
  FMOE_CUDA(cudaMemcpyAsync(host.data(), ids.data, host.size() * 4, cudaMemcpyDeviceToHost, stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  const int64_t k = ids.shape[1];
  for (size_t i = 0; i < host.size(); ++i) {
    const long long t = (long long)(int64_t(i) / k), j = (long long)(int64_t(i) % k);
    FMOE_REQUIRE(host[i] >= 0 && host[i] < E,
                 "%s: topk_ids[%lld, %lld] = %d is not an expert id in [0, %d)", kOp, t, j,
                 host[i], E);
    for (int64_t jj = 0; jj < j; ++jj)
      FMOE_REQUIRE(host[i - size_t(j - jj)] != host[i],
                   "%s: topk_ids[%lld, %lld] repeats expert %d of choice %lld: a token's k "
                   "experts must be distinct", kOp, t, j, host[i], (long long)jj);
  }
}

}  // namespace

size_t moe_fp8_workspace_layout(int max_tokens, int E, int k, int N, int K, ReductionMode mode,
                                void* base, MoeFp8Workspace* ws) {
  check_sizes(max_tokens, E, k, N, K);
  return layout(max_tokens, E, k, N, K, mode, base, ws);
}

GemmConfigId select_gemm_config(int T, int k, int E, int N, int K, ReductionMode mode,
                                std::string* reason) {
  const bool det = mode == ReductionMode::deterministic;
  auto pick = [&](int block_t) {
    for (int i = 0; i < int(GemmConfigId::count); ++i) {
      const GemmConfigInfo c = gemm_config_info(GemmConfigId(i));
      if (c.block_t == block_t && c.deterministic == det) return GemmConfigId(i);
    }
    FMOE_REQUIRE(false, "%s: no compiled GEMM config with BLOCK_T=%d (%s)", kOp, block_t,
                 reduction_mode_name(mode));
  };
  if (const std::string& force = knobs().force_config; !force.empty()) {
    const char* forced = force.c_str();
    const GemmConfigId id = gemm_config_by_name(forced);
    FMOE_REQUIRE(id != GemmConfigId::count, "FMOE_FORCE_CONFIG=%s names no grouped GEMM config",
                 forced);
    FMOE_REQUIRE(gemm_config_info(id).deterministic == det,
                 "FMOE_FORCE_CONFIG=%s is a %s config but the call is %s", forced,
                 gemm_config_info(id).deterministic ? "deterministic" : "fast",
                 reduction_mode_name(mode));
    if (reason) *reason = "forced by FMOE_FORCE_CONFIG";
    return id;
  }
  // The tile puts weights on wgmma's M side and the expert's tokens on its N side (BLOCK_T), so
  // the choice is about rows per expert: a tile narrower than an expert's rows streams its
  // weights once per token tile (from L2 after the first, but still issue and smem work); a tile
  // much wider computes and stages empty columns. Expected rows per expert: T * k / E.
  const double rows = double(T) * k / E;
  GemmConfigId id;
  const char* why;
  if (rows <= 6) {
    id = pick(16);
    why = "<= 6 rows per expert expected (decode): BLOCK_T=16 keeps nearly every expert in one "
          "token tile (a Poisson(6) count exceeds 16 with probability < 0.1%)";
  } else if (rows <= 16) {
    id = pick(32);
    why = "7-16 rows per expert expected: BLOCK_T=32 holds the typical expert in one tile";
  } else if (rows <= 40) {
    id = pick(64);
    why = "17-40 rows per expert expected: BLOCK_T=64 holds the typical expert in one tile";
  } else {
    id = pick(128);
    why = "> 40 rows per expert expected: BLOCK_T=128, the widest tile whose two accumulators "
          "(scratch + promoted) fit the consumer registers";
  }
  if (reason) *reason = why;
  return id;
}

}  // namespace detail

size_t moe_fp8_projection_workspace_size(int max_tokens, int num_experts, int top_k, int N, int K,
                                         ReductionMode mode) {
  return detail::moe_fp8_workspace_layout(max_tokens, num_experts, top_k, N, K, mode, nullptr,
                                          nullptr);
}

namespace detail {

MoeFp8Plan plan_moe_fp8_projection(const MoeFp8ProjectionArgs& a, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream) {
  MoeFp8Plan plan;

  // ---- arguments, before anything touches the GPU ----
  FMOE_REQUIRE(a.w.ndim == 3, "%s: w must be [E, N, K] e4m3, got %s", kOp, a.w.describe().c_str());
  const int E = int(a.w.shape[0]), N = int(a.w.shape[1]), K = int(a.w.shape[2]);
  FMOE_REQUIRE(a.x.ndim == 2, "%s: x must be [T, K] bf16, got %s", kOp, a.x.describe().c_str());
  const int T = int(a.x.shape[0]);
  const int k = a.top_k;
  check_sizes(T, E, k, N, K);
  const int KB = int(cdiv(K, 128)), NB = int(cdiv(N, 128));

  check_dtype(kOp, "w", a.w, DType::e4m3);
  check_contiguous(kOp, "w", a.w);
  check_aligned(kOp, "w", a.w, 16);
  check_data(kOp, "w", a.w);
  check_dtype(kOp, "w_scale", a.w_scale, DType::f32);
  check_shape(kOp, "w_scale", a.w_scale, {E, NB, KB});
  check_contiguous(kOp, "w_scale", a.w_scale);
  check_aligned(kOp, "w_scale", a.w_scale, 4);
  check_data(kOp, "w_scale", a.w_scale);
  check_dtype(kOp, "x", a.x, DType::bf16);
  check_shape(kOp, "x", a.x, {T, K});
  check_unit_inner_stride(kOp, "x", a.x);
  check_aligned(kOp, "x", a.x, 16);
  check_data(kOp, "x", a.x);
  check_dtype(kOp, "y", a.y, DType::bf16);
  check_shape(kOp, "y", a.y, {T, N});
  check_unit_inner_stride(kOp, "y", a.y);
  check_aligned(kOp, "y", a.y, 16);
  check_data(kOp, "y", a.y);
  validate_routing_config(a.routing, E, k);
  const bool on_input = a.routing.fn == RoutingFn::sigmoid_top1_on_input;
  std::vector<std::pair<const char*, const TensorRef*>> on_gpu = {
      {"w", &a.w}, {"w_scale", &a.w_scale}, {"x", &a.x}, {"y", &a.y}};
  if (a.routing_given) {
    FMOE_REQUIRE(a.topk_ids.data && a.topk_weights.data,
                 "%s: routing_given needs topk_ids [T, k] i32 and topk_weights [T, k] f32", kOp);
  } else {
    check_dtype(kOp, "router_logits", a.router_logits, DType::f32);
    check_shape(kOp, "router_logits", a.router_logits, {T, E});
    check_unit_inner_stride(kOp, "router_logits", a.router_logits);
    check_aligned(kOp, "router_logits", a.router_logits, 4);
    check_data(kOp, "router_logits", a.router_logits);
    on_gpu.push_back({"router_logits", &a.router_logits});
    if (needs_bias(a.routing)) {
      FMOE_REQUIRE(a.routing_bias.data, "%s: %s routing with a bias needs routing_bias [E] f32",
                   kOp, routing_fn_name(a.routing.fn));
    }
  }
  if (a.routing_bias.data && !a.routing_given) {
    check_dtype(kOp, "routing_bias", a.routing_bias, DType::f32);
    check_shape(kOp, "routing_bias", a.routing_bias, {E});
    check_contiguous(kOp, "routing_bias", a.routing_bias);
    on_gpu.push_back({"routing_bias", &a.routing_bias});
  }
  if (a.topk_ids.data || a.topk_weights.data) {
    FMOE_REQUIRE(a.topk_ids.data && a.topk_weights.data,
                 "%s: give both topk_ids and topk_weights, or neither", kOp);
    check_dtype(kOp, "topk_ids", a.topk_ids, DType::i32);
    check_shape(kOp, "topk_ids", a.topk_ids, {T, k});
    check_contiguous(kOp, "topk_ids", a.topk_ids);
    check_dtype(kOp, "topk_weights", a.topk_weights, DType::f32);
    check_shape(kOp, "topk_weights", a.topk_weights, {T, k});
    check_contiguous(kOp, "topk_weights", a.topk_weights);
    on_gpu.push_back({"topk_ids", &a.topk_ids});
    on_gpu.push_back({"topk_weights", &a.topk_weights});
  }
  for (const auto& [name, t] : on_gpu) {
    check_on_device(kOp, name, *t);
    check_same_device(kOp, name, *t, a.w.device_index);
  }
  const size_t need = layout(T, E, k, N, K, a.mode, nullptr, nullptr);
  FMOE_REQUIRE(workspace != nullptr || need == 0, "%s: workspace is null", kOp);
  FMOE_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % kAlign == 0,
               "%s: workspace must be %zu-byte aligned, got %p", kOp, kAlign, workspace);
  FMOE_REQUIRE(workspace_bytes >= need,
               "%s: workspace of %zu bytes is smaller than the %zu bytes T=%d needs (size it with "
               "moe_fp8_projection_workspace_size)", kOp, workspace_bytes, need, T);

  // ---- the device ----
  int dev = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  FMOE_REQUIRE(dev == a.w.device_index, "%s: the tensors are on cuda:%d but the current device is "
               "cuda:%d", kOp, a.w.device_index, dev);
  const DeviceState& ds = device_state(dev);
  FMOE_REQUIRE(ds.ok, "%s: %s", kOp, ds.why.c_str());
  if (T == 0) {
    // y is empty: nothing to compute. The status words still describe this call (no route
    // dropped), so moe_fp8_dropped_routes reads 0; a memset node is graph-capturable.
    layout(0, E, k, N, K, a.mode, workspace, &plan.ws);
    FMOE_CUDA(cudaMemsetAsync(plan.ws.status, 0, kStatusWords * sizeof(int32_t), stream));
    return plan;
  }
  if (a.routing_given && a.validate_routing) check_given_ids(a.topk_ids, E, stream);

  plan.T = T;
  plan.num_sms = ds.sms;
  MoeFp8Workspace& ws = plan.ws;
  layout(T, E, k, N, K, a.mode, workspace, &ws);
  int32_t* ids = a.topk_ids.data ? static_cast<int32_t*>(a.topk_ids.data) : ws.topk_ids;
  float* weights = a.topk_weights.data ? static_cast<float*>(a.topk_weights.data) : ws.topk_weights;
  const bool det = a.mode == ReductionMode::deterministic;

  std::string& reason = plan.config_reason;
  const GemmConfigId cfg = plan.config = select_gemm_config(T, k, E, N, K, a.mode, &reason);
  const GemmConfigInfo info = gemm_config_info(cfg);
  if (knobs().print_config)
    std::fprintf(stderr, "[fusedmoe] %s T=%d E=%d k=%d N=%d K=%d %s: config %s (%s)\n", kOp, T, E,
                 k, N, K, reduction_mode_name(a.mode), info.name, reason.c_str());

  RouteQuantParams& rq = plan.route_quant;
  rq.logits = static_cast<const float*>(a.router_logits.data);
  rq.logits_ld = a.router_logits.ndim == 2 ? a.router_logits.stride[0] : E;
  rq.bias = static_cast<const float*>(a.routing_bias.data);
  rq.E = E;
  rq.k = k;
  rq.fn = int(a.routing.fn);
  rq.renormalize = a.routing.renormalize;
  rq.num_groups = a.routing.num_groups;
  rq.topk_groups = a.routing.topk_groups;
  rq.softcap = a.routing.softcap;
  rq.routed_scaling_factor = a.routing.routed_scaling_factor;
  rq.routing_given = a.routing_given;
  rq.weight_on_input = on_input;
  rq.x = static_cast<const __nv_bfloat16*>(a.x.data);
  rq.ldx = a.x.stride[0];
  rq.T = T;
  rq.K = K;
  rq.KB = KB;
  rq.topk_ids = ids;
  rq.topk_weights = weights;
  rq.xq = ws.xq;
  rq.sa = ws.sa;
  rq.zero_rows = det ? nullptr : ws.acc;
  rq.N = N;
  rq.counts = ws.counts;
  rq.status = ws.status;

  ScheduleParams& sp = plan.schedule;
  sp.topk_ids = ids;
  sp.T = T;
  sp.k = k;
  sp.E = E;
  sp.block_t = info.block_t;
  sp.n_wblocks = NB;
  sp.counts = ws.counts;
  sp.tile_offsets = ws.tile_offsets;
  sp.sorted_route = ws.sorted_route;
  sp.route_slot = ws.route_slot;
  sp.status = ws.status;

  GemmParams& gp = plan.gemm;
  gp.w_desc = make_tma_2d("moe_fp8_projection: w", a.w.data, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1,
                          uint64_t(E) * N, uint64_t(K), uint64_t(K), 128, 128,
                          CU_TENSOR_MAP_SWIZZLE_128B);
  gp.xq = ws.xq;
  gp.ldx = K;
  gp.sa = ws.sa;
  gp.w_scale = static_cast<const float*>(a.w_scale.data);
  gp.counts = ws.counts;
  gp.tile_offsets = ws.tile_offsets;
  gp.sorted_route = ws.sorted_route;
  gp.topk_weights = weights;
  gp.out = ws.acc;
  gp.T = T;
  gp.E = E;
  gp.k = k;
  gp.N = N;
  gp.K = K;
  gp.KB = KB;
  gp.NB = NB;
  gp.weight_on_input = on_input;
  // Decode sizes: the GEMM builds the schedule from the ids itself (no schedule kernel, one launch
  // and one dependency wait fewer). FMOE_FUSED_SCHEDULE=0 forces the schedule kernel (tests).
  const bool allow_fused = knobs().fused_schedule;
  // Up to 512 routes: each producer's per-tile scan of the ids is <= 4 steps (measured on H100:
  // T=1 13.3 -> 11.9 us, T=32 73.0 -> 70.5 us; at 1024 routes, T=128, it cost 2 us instead).
  plan.fused_schedule = allow_fused && info.block_t <= 64 && int64_t(T) * k <= kFusedScheduleRoutes;
  gp.fused_schedule = plan.fused_schedule;
  gp.topk_ids = ids;
  gp.R = T * k;
  gp.status = ws.status;
  const double hit = 1.0 - std::pow(1.0 - double(k) / E, double(T));  // P(an expert is hit)
  // With nearly every expert hit and one token tile each, the GEMM numbers its tiles statically
  // (every expert's first token tile, empty ones skipped), so its CTAs know their first weight
  // tiles before the routing exists. An L2 prefetch of those tiles while routing runs
  // (FMOE_PREFETCH_UNITS=n) was measured on H100 at T=128 and gave nothing end to end (106.6 us
  // without, 107.7 with 14 units, 108.8 with 28) and slowed the GEMM alone (95.0 -> 98.5 us), so
  // it is off; the static numbering costs nothing and is where a shared-memory prefill would go.
  const bool decode_static = hit > 0.9 && double(T) * k / E <= info.block_t / 2.0;
  gp.static_tiles = decode_static;
  plan.schedule.static_tiles = decode_static;
  gp.prefetch_units = knobs().prefetch_units;

  FinalizeParams& fp = plan.finalize;
  fp.deterministic = det;
  fp.T = T;
  fp.N = N;
  fp.k = k;
  fp.acc = ws.acc;
  fp.route_slot = plan.fused_schedule ? nullptr : ws.route_slot;
  fp.topk_ids = ids;
  fp.E = E;
  fp.y = static_cast<__nv_bfloat16*>(a.y.data);
  fp.ldy = a.y.stride[0];
  return plan;
}

const char* moe_fp8_stage_name(MoeFp8Stage s) {
  switch (s) {
    case MoeFp8Stage::route_quant: return "route_quant";
    case MoeFp8Stage::schedule: return "schedule";
    case MoeFp8Stage::gemm: return "gemm";
    case MoeFp8Stage::finalize: return "finalize";
  }
  return "?";
}

void run_moe_fp8_stage(const MoeFp8Plan& plan, MoeFp8Stage stage, cudaStream_t stream) {
  if (plan.T == 0) return;
  switch (stage) {
    case MoeFp8Stage::route_quant: return launch_route_quant(plan.route_quant, stream);
    case MoeFp8Stage::schedule:
      if (plan.fused_schedule) return;  // the GEMM builds it
      return launch_schedule(plan.schedule, stream);
    case MoeFp8Stage::gemm: return launch_grouped_gemm_fp8(plan.config, plan.gemm, plan.num_sms, stream);
    case MoeFp8Stage::finalize: return launch_finalize(plan.finalize, stream);
  }
}

}  // namespace detail

void moe_fp8_projection(const MoeFp8ProjectionArgs& args, void* workspace, size_t workspace_bytes,
                        Stream stream_in) {
  using namespace detail;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_in);
  const MoeFp8Plan plan = plan_moe_fp8_projection(args, workspace, workspace_bytes, stream);
  for (MoeFp8Stage s : {MoeFp8Stage::route_quant, MoeFp8Stage::schedule, MoeFp8Stage::gemm,
                        MoeFp8Stage::finalize})
    run_moe_fp8_stage(plan, s, stream);
}

int moe_fp8_dropped_routes(const void* workspace, int max_tokens, int num_experts, int top_k, int N,
                           int K, ReductionMode mode, Stream stream) {
  detail::check_sizes(max_tokens, num_experts, top_k, N, K);
  FMOE_REQUIRE(workspace, "moe_fp8_dropped_routes: workspace is null");
  int32_t dropped = 0;
  // The status words sit at the start of the workspace for every T (see layout()).
  FMOE_CUDA(cudaMemcpyAsync(&dropped, static_cast<const int32_t*>(workspace) + detail::kStatusDropped,
                            sizeof(dropped), cudaMemcpyDeviceToHost,
                            reinterpret_cast<cudaStream_t>(stream)));
  FMOE_CUDA(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  return dropped;
}

}  // namespace fusedmoe
