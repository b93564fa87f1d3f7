// Contract of stage 1, route + quantize (src/route/sm90_route_quant.cuh): routing of every token,
// the activation rows the first GEMM reads, and the per-call zeroing of what later stages
// accumulate into.
//
//   ids[t, j], weights[t, j]  j < k: route(logits[t]) (or the caller's, copied when given_ids);
//                             j = k + c < k_total: shared chunk c, expert E + c, weight
//                             sigmoid(x[t] . shared_gate) (Qwen) or 1
//   rows[t]                   x[t] (or bf16(x[t] * weights[t, 0]) when the weight goes on the input),
//                             as e4m3 + per-128 scales (fp8) or bf16 (bf16: only when it differs from x)
//   rows[T + t]               x[t] unscaled, when the weight goes on the input and shared experts
//                             exist (they see the plain token)
//   counts[E_total], status   zeroed; zero_rows [T, N] fp32 zeroed (fast-mode sums)
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.hpp"

namespace fusedmoe::detail {

enum class RowFormat : int { fp8 = 0, bf16 = 1, none = 2 };

struct RouteQuantParams {
  const float* logits;         // [T, E], row stride logits_ld elements (unused when routing_given)
  int64_t logits_ld;
  const float* bias;           // [E] or nullptr
  int E, k, fn, renormalize, num_groups, topk_groups;
  float softcap, routed_scaling_factor;
  int routing_given;           // the routing is an input: only copy (given_ids) and quantize
  const int32_t* given_ids;    // [T, k] caller's ids to copy into topk_ids, or nullptr (in place)
  const float* given_weights;  // [T, k]
  int weight_on_input;         // rows[t] = bf16(x * weights[t, 0]) (top-1 routing)
  int k_total;                 // k + shared chunks: the row stride of topk_ids / topk_weights
  const __nv_bfloat16* shared_gate;  // [H] bf16 (Qwen shared_expert_gate) or nullptr
  const __nv_bfloat16* x;      // [T, K], row stride ldx elements
  int64_t ldx;
  int T, K, KB;
  RowFormat row_format;        // what rows[] holds; none: the GEMM reads x itself
  int shared_rows;             // 1: also write rows[T + t] = x[t] (weight on input + shared)
  int32_t* topk_ids;           // [T, k_total]
  float* topk_weights;         // [T, k_total]
  uint8_t* rows;               // fp8: [T(2T), K] e4m3; bf16: [T(2T), K] bf16
  float* row_scales;           // fp8: [T(2T), KB]
  float* zero_rows;            // [T, N] fp32 zeroed here (fast mode), or nullptr
  int N;
  int E_total;                 // experts the counts cover (E + shared chunks)
  int32_t* counts;             // [E_total] zeroed here
  int32_t* zero_ints;          // [num_zero_ints] also zeroed here (the GEMM's split-K counters)
  int num_zero_ints;
  int32_t* status;             // [kStatusWords] zeroed here
};

/// From this many tokens, two warps per token instead of four (throughput over latency).
constexpr int kRouteQuantWideFromTokens = 1024;
/// Shared-expert chunks one token can carry (always-selected extra experts).
constexpr int kMaxSharedChunks = 8;

void launch_route_quant(const RouteQuantParams& p, cudaStream_t stream);

}  // namespace fusedmoe::detail
