// Host side of the fused FP8 MoE projection: argument validation, the workspace plan, the GEMM
// config choice, and the four stage launches (see moe_fp8_plan.hpp for the data flow).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_state.hpp"
#include "common/env.hpp"
#include "common/tensor_check.hpp"
#include "common/tma.hpp"
#include "moe/moe_fp8_plan.hpp"
#include "route/route.hpp"
#include "route/routing_host.hpp"

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
  FMOE_REQUIRE(int64_t(E) * N < (int64_t(1) << 31), "%s: E*N = %lld weight rows exceed the "
               "int32 TMA coordinate range", kOp, (long long)E * N);
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
  take(w.route_offsets, E + 1);
  take(w.topk_ids, R);
  take(w.topk_weights, R);
  take(w.route_slot, R);
  take(w.sorted_route, int64_t(E) * T);
  take(w.xq, int64_t(T) * K);
  take(w.sa, int64_t(T) * KB);
  take(w.acc, (mode == ReductionMode::fast ? int64_t(T) : R) * N);
  return off;
}

}  // namespace

size_t moe_fp8_workspace_layout(int max_tokens, int E, int k, int N, int K, ReductionMode mode,
                                void* base, MoeFp8Workspace* ws) {
  check_sizes(max_tokens, E, k, N, K);
  return layout(max_tokens, E, k, N, K, mode, base, ws);
}

GemmConfigId select_projection_config(int T, int k, int E, int N, int K, std::string* reason) {
  const GemmFamily fam{GemmWeights::fp8_block, GemmRows::gathered, GemmEpilogue::combine};
  std::string why;
  const int bt = select_block_t(T, k, E, knobs().force_config, {fam}, &why);
  const int waves = select_waves(fam, bt, int(cdiv(N, 128)), K, knobs().force_config, &why);
  const GemmOperands operands = select_operands(fam, bt, K, true, knobs().force_config, &why);
  if (reason) *reason = why;
  return gemm_config_of(fam.weights, fam.rows, fam.epilogue, bt, waves, operands);
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
  validate_routing_config(kOp, a.routing, E, k);
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
    if (routing_needs_bias(a.routing)) {
      FMOE_REQUIRE(a.routing_bias.data, "%s: %s routing with a bias needs routing_bias [E] f32",
                   kOp, routing_fn_name(a.routing.fn));
    }
  }
  if (a.routing_bias.data && !a.routing_given) {
    check_dtype(kOp, "routing_bias", a.routing_bias, DType::f32);
    check_shape(kOp, "routing_bias", a.routing_bias, {E});
    check_contiguous(kOp, "routing_bias", a.routing_bias);
    check_aligned(kOp, "routing_bias", a.routing_bias, 4);
    on_gpu.push_back({"routing_bias", &a.routing_bias});
  }
  if (a.topk_ids.data || a.topk_weights.data) {
    FMOE_REQUIRE(a.topk_ids.data && a.topk_weights.data,
                 "%s: give both topk_ids and topk_weights, or neither", kOp);
    check_dtype(kOp, "topk_ids", a.topk_ids, DType::i32);
    check_shape(kOp, "topk_ids", a.topk_ids, {T, k});
    check_contiguous(kOp, "topk_ids", a.topk_ids);
    check_aligned(kOp, "topk_ids", a.topk_ids, 4);
    check_dtype(kOp, "topk_weights", a.topk_weights, DType::f32);
    check_shape(kOp, "topk_weights", a.topk_weights, {T, k});
    check_contiguous(kOp, "topk_weights", a.topk_weights);
    check_aligned(kOp, "topk_weights", a.topk_weights, 4);
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
  const DeviceState& ds = current_device_state(kOp, a.w.device_index);
  if (T == 0) {
    // y is empty: nothing to compute. The status words still describe this call (no route
    // dropped), so moe_fp8_dropped_routes reads 0; a memset node is graph-capturable.
    layout(0, E, k, N, K, a.mode, workspace, &plan.ws);
    FMOE_CUDA(cudaMemsetAsync(plan.ws.status, 0, kStatusWords * sizeof(int32_t), stream));
    return plan;
  }
  if (a.routing_given && a.validate_routing) check_given_ids(kOp, a.topk_ids, E, stream);

  plan.T = T;
  plan.num_sms = ds.sms;
  MoeFp8Workspace& ws = plan.ws;
  layout(T, E, k, N, K, a.mode, workspace, &ws);
  int32_t* ids = a.topk_ids.data ? static_cast<int32_t*>(a.topk_ids.data) : ws.topk_ids;
  float* weights = a.topk_weights.data ? static_cast<float*>(a.topk_weights.data) : ws.topk_weights;
  const bool det = a.mode == ReductionMode::deterministic;

  std::string& reason = plan.config_reason;
  const GemmConfigId cfg = plan.config = select_projection_config(T, k, E, N, K, &reason);
  const GemmConfigInfo info = gemm_config_info(cfg);
  if (knobs().print_config)
    std::fprintf(stderr, "[fusedmoe] %s T=%d E=%d k=%d N=%d K=%d %s: config %s (%s)\n", kOp, T, E,
                 k, N, K, reduction_mode_name(a.mode), info.name, reason.c_str());

  RouteQuantParams& rq = plan.route_quant;
  set_routing_params(rq, a.routing, static_cast<const float*>(a.routing_bias.data), E, k);
  rq.logits = static_cast<const float*>(a.router_logits.data);
  rq.logits_ld = a.router_logits.ndim == 2 ? a.router_logits.stride[0] : E;
  rq.routing_given = a.routing_given;
  rq.k_total = k;
  rq.x = static_cast<const __nv_bfloat16*>(a.x.data);
  rq.ldx = a.x.stride[0];
  rq.T = T;
  rq.K = K;
  rq.KB = KB;
  rq.row_format = RowFormat::fp8;
  rq.topk_ids = ids;
  rq.topk_weights = weights;
  rq.rows = ws.xq;
  rq.row_scales = ws.sa;
  rq.zero_rows = det ? nullptr : ws.acc;
  rq.N = N;
  rq.E_total = E;
  rq.counts = ws.counts;
  rq.status = ws.status;

  ScheduleParams& sp = plan.schedule;
  sp.topk_ids = ids;
  sp.T = T;
  sp.k = k;
  sp.E = E;
  sp.block_t = info.block_t;
  sp.counts = ws.counts;
  sp.tile_offsets = ws.tile_offsets;
  sp.route_offsets = ws.route_offsets;
  sp.sorted_route = ws.sorted_route;
  sp.route_slot = ws.route_slot;
  sp.status = ws.status;

  GroupedGemmParams& gp = plan.gemm;
  gp.w_desc = make_tma_2d("moe_fp8_projection: w", a.w.data, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1,
                          uint64_t(E) * N, uint64_t(K), uint64_t(K), 128, 128,
                          CU_TENSOR_MAP_SWIZZLE_128B);
  gp.w_scale = static_cast<const float*>(a.w_scale.data);
  gp.sb_groups = 1;  // DeepSeek's layout: one scale per 128x128 block
  gp.n_rows = N;
  gp.a = ws.xq;
  gp.lda = K;
  gp.sa = ws.sa;
  gp.sa_ld = KB;
  gp.counts = ws.counts;
  gp.tile_offsets = ws.tile_offsets;
  gp.route_offsets = ws.route_offsets;
  gp.sorted_route = ws.sorted_route;
  gp.topk_weights = weights;
  gp.T = T;
  gp.E = E;
  gp.k = k;
  gp.k_routed = k;
  gp.weight_on_input = on_input;
  gp.N = N;
  gp.K = K;
  gp.KB = KB;
  gp.NB = NB;
  gp.deterministic = det;
  gp.out = ws.acc;
  // Decode sizes: the GEMM builds the schedule from the ids itself (no schedule kernel, one launch
  // and one dependency wait fewer). FMOE_FUSED_SCHEDULE=0 forces the schedule kernel (tests).
  // Up to 512 routes: each producer's per-tile scan of the ids is <= 4 steps (measured on H100:
  // T=1 13.3 -> 11.9 us, T=32 73.0 -> 70.5 us; at 1024 routes, T=128, it cost 2 us instead).
  plan.fused_schedule = knobs().fused_schedule && info.block_t <= 64 &&
                        int64_t(T) * k <= kFusedScheduleRoutes;
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
  gp.narrow_tails = knobs().narrow_tails;

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
      return launch_schedule(plan.schedule, plan.num_sms, stream);
    case MoeFp8Stage::gemm: return launch_grouped_gemm(plan.config, plan.gemm, plan.num_sms, stream);
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
