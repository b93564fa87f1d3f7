// Internal plan of the FP8 MoE projection (include/fusedmoe/moe.hpp): the workspace carve-up and
// the parameters of each stage, whose contracts live in their folders:
//   src/route/     route_quant   routing + per-token FP8 quantization + per-call zeroing
//   src/schedule/  schedule      per-expert counts, route -> slot, tile table
//   src/gemm/      grouped GEMM  the engine: fp8 weights, gathered rows, combine epilogue
//   src/finalize/  finalize      fp32 sums -> bf16 y (deterministic: ordered sum per token)
// Each stage is launched with programmatic dependent launch (PDL): it may start while its
// predecessor drains, and waits (griddepcontrol.wait) before touching what the predecessor
// writes or reads.
#pragma once

#include <cstdint>
#include <string>

#include "finalize/finalize.hpp"
#include "fusedmoe/moe.hpp"
#include "gemm/grouped_gemm.hpp"
#include "route/route_quant.hpp"
#include "schedule/schedule.hpp"

namespace fusedmoe::detail {

// Expert e's routes occupy slots [e * T, e * T + counts[e]) of sorted_route: a token picks k
// distinct experts, so no expert receives more than T routes, and slots follow from one atomic
// per (CTA, expert) with no global prefix scan over routes.
struct MoeFp8Workspace {
  int32_t* topk_ids = nullptr;       // [maxT * k] (when the caller passes none)
  float* topk_weights = nullptr;     // [maxT * k]
  uint8_t* xq = nullptr;             // [maxT, K] e4m3, row stride K bytes
  float* sa = nullptr;               // [maxT, ceil(K/128)] activation scales
  int32_t* counts = nullptr;         // [E] routes per expert
  int32_t* tile_offsets = nullptr;   // [E + 1] exclusive prefix of token tiles per expert
  int32_t* route_offsets = nullptr;  // [E + 1] exclusive prefix of counts
  int32_t* status = nullptr;         // [kStatusWords]
  int32_t* sorted_route = nullptr;   // [E * maxT] route id (t*k + j) of each slot
  int32_t* route_slot = nullptr;     // [maxT * k] slot of each route, -1 if dropped
  float* acc = nullptr;              // fast: [maxT, N] fp32 sums; deterministic: [maxT * k, N] rows
};

/// Lays the workspace out from `base` (nullptr: sizes only). Returns the bytes needed.
size_t moe_fp8_workspace_layout(int max_tokens, int E, int k, int N, int K, ReductionMode mode,
                                void* base, MoeFp8Workspace* ws);

/// The projection's GEMM config: token-tile width from the expected routes per expert (reasons
/// in src/gemm/gemm_config.cpp); FMOE_FORCE_CONFIG=<name> overrides, FMOE_PRINT_CONFIG=1 prints.
GemmConfigId select_projection_config(int T, int k, int E, int N, int K,
                                      std::string* reason = nullptr);

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
  GroupedGemmParams gemm{};
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
