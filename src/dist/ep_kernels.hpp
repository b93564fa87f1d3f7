// Contract of the expert-parallel device kernels (src/dist/sm90_ep_kernels.cuh): the plan of
// ep_plan.hpp computed on the GPU, step for step and bit for bit, plus the moves of the rows'
// bytes the host plan only describes. Every launcher runs on the caller's stream, reads no
// counts back to the host, and launches a fixed grid for fixed (T, R, cap): graph-capturable.
//
//   source:  launch_ep_dispatch  ids [T, k] -> route_dest, token_row [T, R], route_row [T, k],
//                                send_counts [R], send rows [R * cap] (payload + k id/weight slots)
//   dest:    launch_ep_receive   recv_counts [R] + recv rows -> recv_offsets, row_slot, the local
//                                layer's routing [R * cap, k] and its compact x [R * cap, payload]
//   dest:    launch_ep_return    the local layer's output -> return rows at the sources' slots
//   source:  launch_ep_combine   returned rows (+ the shared expert's) -> y [T, H] bf16, rank
//                                order or choice order
//   source:  launch_ep_shared_routing  the shared expert's one-expert routing of the own tokens
//
// A send/receive row is `row_bytes` long (ep_row_layout): the payload (the token's activation
// bytes, a multiple of 16), then k int32 local expert ids (-1: the choice is on another rank),
// then k fp32 weights (0 where the id is -1), padded to 16 bytes. One row holds everything a
// destination needs, so a chunk of cap rows is one contiguous NCCL send.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fusedmoe::detail {

/// The ExpertPartition as two ints the kernels can carry (owner and first are its formulas).
struct EpPartitionArgs {
  int num_experts = 0, num_ranks = 0;
  int base = 0;   // floor(E / R)
  int extra = 0;  // E % R: ranks [0, extra) own base + 1
};

/// Byte offsets inside one dispatch row.
struct EpRowLayout {
  int64_t payload_bytes = 0;  // multiple of 16
  int64_t ids_offset = 0;     // k int32
  int64_t weights_offset = 0; // k f32
  int64_t row_bytes = 0;      // multiple of 16
};
EpRowLayout ep_row_layout(int64_t payload_bytes, int k);

/// Counters the kernels add to (sums of per-thread counts: the same whatever the timing). Zeroed
/// by launch_ep_dispatch (its three) and launch_ep_receive (its three).
struct EpCounters {
  unsigned long long dropped_routes;   // plan_dispatch's dropped_routes
  unsigned long long overflow_rows;    // plan_dispatch's overflow_rows
  unsigned long long overflow_routes;  // plan_dispatch's overflow_routes
  unsigned long long recv_dropped;     // plan_receive's dropped_routes
  unsigned long long recv_clamped;     // plan_receive's clamped_counts
  unsigned long long recv_routes;      // plan_receive's num_routes
};

struct EpDispatchParams {
  EpPartitionArgs part;
  int T = 0, k = 0, cap = 0, source_rank = 0;
  // fp8 rows: the pack quantizes x's bf16 row (route_quant's quantize_row) into the payload:
  // e4m3 codes [H], then f32 scales [ceil(H/128)] (payload_bytes = H + 4 ceil(H/128), rounded to
  // 16). Else the payload is x's bytes.
  int fp8_rows = 0, H = 0;
  const int32_t* topk_ids = nullptr;     // [T, k] global expert ids
  const float* topk_weights = nullptr;   // [T, k]
  const uint8_t* x = nullptr;            // [T, payload_bytes], row stride x_ld_bytes (16-aligned)
  int64_t x_ld_bytes = 0;
  EpRowLayout row;
  // scratch
  int32_t* route_dest = nullptr;         // [T * k] owner rank of a kept route, -1: dropped
  int32_t* goes_to = nullptr;            // [R, T] 1 when token t has a kept route on d
  // outputs
  int32_t* token_row = nullptr;          // [T, R] plan's token_row
  int32_t* route_row = nullptr;          // [T, k] plan's route_row
  int32_t* row_token = nullptr;          // [R * cap] plan's row_token (rows below send_counts only)
  int32_t* send_counts = nullptr;        // [R]
  uint8_t* send = nullptr;               // [R * cap, row_bytes]; rows past send_counts untouched
  EpCounters* counters = nullptr;
};
/// Three launches: owners (thread per token), the per-destination scan (CTA per destination,
/// token order), the pack (warp per (token, destination) row).
void launch_ep_dispatch(const EpDispatchParams& p, cudaStream_t stream);

struct EpReceiveParams {
  EpPartitionArgs part;
  int dest_rank = 0, k = 0, cap = 0;
  // fp8 rows: x gets the codes [H] (x_ld_bytes >= H) and x_scales the f32 scales [ceil(H/128)]
  // (row stride x_scales_ld floats); past the arrived rows both are zero.
  int fp8_rows = 0, H = 0;
  float* x_scales = nullptr;
  int64_t x_scales_ld = 0;
  EpRowLayout row;
  const int32_t* recv_counts = nullptr;  // [R] as exchanged (clamped to [0, cap] here)
  const uint8_t* recv = nullptr;         // [R * cap, row_bytes]: chunk s from source s
  // outputs, [R * cap] rows each: rows past recv_offsets[R] get zero payload, ids -1, weights 0
  int32_t* recv_offsets = nullptr;       // [R + 1]
  int32_t* row_slot = nullptr;           // [R * cap] s*cap + i, or -1 past the rows
  int32_t* local_ids = nullptr;          // [R * cap, k]
  float* local_weights = nullptr;        // [R * cap, k]
  uint8_t* x = nullptr;                  // [R * cap, payload_bytes], row stride x_ld_bytes
  int64_t x_ld_bytes = 0;
  int32_t* expert_counts = nullptr;      // [E_local] (zeroed here)
  EpCounters* counters = nullptr;
};
/// One launch: a warp per compact row (each warp scans the R clamped counts itself: R is small).
void launch_ep_receive(const EpReceiveParams& p, cudaStream_t stream);

struct EpReturnParams {
  int R = 0, k = 0, cap = 0, H = 0;
  int choice_order = 0;
  const int32_t* recv_offsets = nullptr;  // [R + 1] (launch_ep_receive's)
  const int32_t* row_slot = nullptr;      // [R * cap]
  const int32_t* local_ids = nullptr;     // [R * cap, k]
  // choice order: the local layer's deterministic route rows, f32 [R * cap * k, H] (row r*k + j);
  // rank order: the local layer's bf16 output [R * cap, H], row stride ld_local elements
  const void* local = nullptr;
  int64_t ld_local = 0;
  // choice order: f32 [R * cap * k, H] at row slot*k + j; rank order: bf16 [R * cap, H] at slot.
  // Rows of routes / slots that carry nothing are untouched.
  void* ret = nullptr;
};
void launch_ep_return(const EpReturnParams& p, cudaStream_t stream);

struct EpCombineParams {
  int T = 0, R = 0, k = 0, cap = 0, H = 0;  // H % 8 == 0
  int choice_order = 0;
  const int32_t* token_row = nullptr;  // rank order: [T, R]
  const int32_t* route_row = nullptr;  // choice order: [T, k]
  const void* ret = nullptr;           // what came back: laid out as EpReturnParams::ret
  const float* shared = nullptr;       // the shared expert's f32 rows [T, H] (row stride H), added
                                       // last, or nullptr
  __nv_bfloat16* y = nullptr;          // [T, H], row stride ldy elements; every element written
  int64_t ldy = 0;
};
/// y[t] = bf16(fp32 sum from 0.0f): rank order over d of the bf16 partials, choice order over j
/// of the f32 route rows (the deterministic finalize's sum, term for term), then the shared
/// expert's row (MoeLayer's shared column comes after the top_k routes).
void launch_ep_combine(const EpCombineParams& p, cudaStream_t stream);

/// The shared expert's routing on the token's rank: its one-expert layer's ids [T] (all 0) and
/// weights [T]: sigmoid(x[t] . gate) (Qwen's shared_expert_gate) or 1, by route_quant's formula.
struct EpSharedRoutingParams {
  int T = 0, H = 0;                        // H % 2 == 0
  const __nv_bfloat16* x = nullptr;        // [T, H], row stride ldx elements (4-byte aligned rows)
  int64_t ldx = 0;
  const __nv_bfloat16* gate = nullptr;     // [H] or nullptr (weight 1)
  int32_t* ids = nullptr;                  // [T]
  float* weights = nullptr;                // [T]
};
void launch_ep_shared_routing(const EpSharedRoutingParams& p, cudaStream_t stream);

}  // namespace fusedmoe::detail
