// Internal plan of the FP8 MoE projection: the workspace carve-up, the parameter block of each
// stage, and the stage launchers. Host code (src/moe/moe_fp8.cpp, tests, benchmarks) sees only
// this header; the kernels live in the stage directories:
//   src/quant/   route_quant  : routing (src/route) + per-token FP8 quantization + per-call zeroing
//   src/permute/ schedule     : per-expert counts, route -> slot, GEMM tile table
//   src/gemm/    grouped GEMM : FP8 wgmma with block scales, weighted scatter epilogue
//   src/combine/ finalize     : fp32 sums -> bf16 y (deterministic mode: ordered sum per token)
// Each stage is launched with programmatic dependent launch (PDL): it may start while its
// predecessor drains, and waits (griddepcontrol.wait) before touching anything the predecessor
// writes or reads.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "common/cuda_check.hpp"
#include "common/launch.hpp"
#include "fusedmoe/moe.hpp"
#include "route/route.hpp"

namespace fusedmoe::detail {

// ---- workspace -----------------------------------------------------------------------------------
// Expert e's routes occupy slots [e * T, e * T + counts[e]) of sorted_route: a token picks k
// distinct experts, so no expert receives more than T routes, and slots follow from one atomic
// per (CTA, expert) with no global prefix scan over routes.
struct MoeFp8Workspace {
  int32_t* topk_ids = nullptr;      // [maxT * k] (when the caller passes none)
  float* topk_weights = nullptr;    // [maxT * k]
  uint8_t* xq = nullptr;            // [maxT, K] e4m3, row stride K bytes
  float* sa = nullptr;              // [maxT, ceil(K/128)] activation scales
  int32_t* counts = nullptr;        // [E] routes per expert
  int32_t* tile_offsets = nullptr;  // [E + 1] exclusive prefix of GEMM tiles per expert
  int32_t* status = nullptr;        // [kStatusWords]
  int32_t* sorted_route = nullptr;  // [E * maxT] route id (t*k + j) of each slot
  int32_t* route_slot = nullptr;    // [maxT * k] slot of each route, -1 if dropped
  float* acc = nullptr;             // fast: [maxT, N] fp32 sums; deterministic: [maxT * k, N] rows
};
enum StatusWord : int { kStatusDropped = 0, kStatusDone = 1, kStatusWords = 4 };

/// Lays the workspace out from `base` (nullptr: sizes only). Returns the bytes needed.
size_t moe_fp8_workspace_layout(int max_tokens, int E, int k, int N, int K, ReductionMode mode,
                                void* base, MoeFp8Workspace* ws);

// ---- stage 1: route + quantize (src/quant) -------------------------------------------------------
struct RouteQuantParams {
  const float* logits;         // [T, E], row stride logits_ld elements
  int64_t logits_ld;
  const float* bias;           // [E] or nullptr
  int E, k, fn, renormalize, num_groups, topk_groups;
  float softcap, routed_scaling_factor;
  int routing_given;           // ids/weights are inputs: only quantize
  int weight_on_input;         // quantize bf16(x * weight) (top-1 routing)
  const __nv_bfloat16* x;      // [T, K], row stride ldx elements
  int64_t ldx;
  int T, K, KB;
  int32_t* topk_ids;           // [T, k]
  float* topk_weights;         // [T, k]
  uint8_t* xq;                 // [T, K]
  float* sa;                   // [T, KB]
  float* zero_rows;            // [T, N] fp32 zeroed here (fast mode), or nullptr
  int N;
  int32_t* counts;             // [E] zeroed here
  int32_t* status;             // [kStatusWords] zeroed here
};
/// From this many tokens, two warps per token instead of four (throughput over latency).
constexpr int kRouteQuantWideFromTokens = 1024;
void launch_route_quant(const RouteQuantParams& p, cudaStream_t stream);

// ---- stage 2: counts + slots + GEMM tile table (src/permute) -------------------------------------
struct ScheduleParams {
  const int32_t* topk_ids;  // [R]
  int T, k, E;
  int block_t;              // GEMM token-tile width: tiles of expert e = ceil(counts[e]/block_t) * NWB
  int n_wblocks;            // NWB = ceil(N / 128)
  int static_tiles;         // the GEMM numbers every expert's first token tile statically
  int32_t* counts;          // [E], zero on entry
  int32_t* tile_offsets;    // [E + 1]
  int32_t* sorted_route;    // [E * T]
  int32_t* route_slot;      // [R]
  int32_t* status;          // [kStatusWords], zero on entry
};
constexpr int kScheduleThreads = 512;
constexpr int kScheduleRoutesPerThread = 8;
void launch_schedule(const ScheduleParams& p, cudaStream_t stream);

// ---- stage 3: grouped FP8 GEMM with the weighted scatter epilogue (src/gemm) -------------------
struct GemmParams {
  CUtensorMap w_desc;             // W as [E*N, K] e4m3, box 128 x 128, 128B swizzle
  const uint8_t* xq;              // [T, K]
  int64_t ldx;                    // bytes
  const float* sa;                // [T, KB]
  const float* w_scale;           // [E, NB, KB]
  const int32_t* counts;          // [E]
  const int32_t* tile_offsets;    // [E + 1]
  const int32_t* sorted_route;    // [E * T]
  const float* topk_weights;      // [T * k] by route id
  float* out;                     // fast: [T, N] sums; deterministic: [T * k, N] rows by route
  int T, E, k, N, K, KB, NB;     // NB = ceil(N/128): weight blocks, also the tiles per token tile
  int weight_on_input;            // epilogue multiplies by 1
  int prefetch_units;             // L2 prefetch of the weights expected first (0: off)
  int static_tiles;               // tiles [0, E*NWB): (e, wb, tb 0) for every expert (see WorkIter)
  // Fused schedule (decode): the kernel builds counts and tiles from the ids itself and takes the
  // routes of each tile in ascending route order; counts/tile_offsets/sorted_route are unused.
  int fused_schedule;
  const int32_t* topk_ids;        // [R] (fused schedule)
  int R;
  int32_t* status;                // [kStatusWords] (fused schedule: dropped ids)
};

/// Routes up to which a BLOCK_T <= 64 config can fuse the schedule into the GEMM (ids in smem),
/// and up to which the host chooses to (moe_fp8.cpp says why).
constexpr int kMaxFusedRoutes = 4096;
constexpr int kFusedScheduleRoutes = 512;

enum class GemmConfigId : int {
#define FMOE_GG(name, bt, stages, det) name,
#include "gemm/gemm_configs.def"
#undef FMOE_GG
  count
};
struct GemmConfigInfo {
  const char* name;
  int block_t, stages;
  bool deterministic;
};
GemmConfigInfo gemm_config_info(GemmConfigId id);
/// The config named `name`, or GemmConfigId::count when there is none.
GemmConfigId gemm_config_by_name(const std::string& name);

/// Picks the token-tile width from the expected routes per expert (reasons in moe_fp8.cpp);
/// FMOE_FORCE_CONFIG=<name> overrides, FMOE_PRINT_CONFIG=1 prints the choice.
GemmConfigId select_gemm_config(int T, int k, int E, int N, int K, ReductionMode mode,
                                std::string* reason = nullptr);

/// Persistent launch, one CTA per SM.
void launch_grouped_gemm_fp8(GemmConfigId id, const GemmParams& p, int num_sms, cudaStream_t stream);

// ---- stage 4: finalize (src/combine) ------------------------------------------------------------
struct FinalizeParams {
  int deterministic;
  int T, N, k;
  const float* acc;           // fast: [T, N]; deterministic: [T * k, N] by route
  const int32_t* route_slot;  // deterministic: [T * k], -1 for a dropped route; nullptr: the
                              // GEMM fused the schedule, a route is dropped iff its id is bad
  const int32_t* topk_ids;    // deterministic with route_slot == nullptr: [T * k]
  int E;
  __nv_bfloat16* y;           // [T, N]
  int64_t ldy;                // elements
};
void launch_finalize(const FinalizeParams& p, cudaStream_t stream);

// ---- the whole projection ------------------------------------------------------------------------
/// Everything one call launches, validated and laid out: moe_fp8_projection = plan + the four
/// stages in order. Benchmarks and tests also run a stage alone (then they own the order; the
/// schedule expects counts and status zeroed, as stage 1 leaves them).
struct MoeFp8Plan {
  int T = 0;                       // 0: nothing to launch
  bool fused_schedule = false;     // the GEMM builds the schedule: the schedule stage is a no-op
  GemmConfigId config = GemmConfigId::count;
  std::string config_reason;
  int num_sms = 0;
  MoeFp8Workspace ws;
  RouteQuantParams route_quant{};
  ScheduleParams schedule{};
  GemmParams gemm{};
  FinalizeParams finalize{};
};
/// Validates `args` (throws Error naming the argument) and builds the plan; touches no GPU memory
/// and does not synchronize (except the optional host check of caller-given ids, see moe.hpp).
MoeFp8Plan plan_moe_fp8_projection(const MoeFp8ProjectionArgs& args, void* workspace,
                                   size_t workspace_bytes, cudaStream_t stream);
enum class MoeFp8Stage { route_quant, schedule, gemm, finalize };
const char* moe_fp8_stage_name(MoeFp8Stage s);
void run_moe_fp8_stage(const MoeFp8Plan& plan, MoeFp8Stage stage, cudaStream_t stream);

}  // namespace fusedmoe::detail
