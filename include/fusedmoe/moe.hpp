// fusedmoe: the fused FP8 MoE expert projection (route -> quantize -> group -> grouped GEMM ->
// weighted scatter), one graph-capturable call.
#pragma once

#include <cstddef>
#include <string>

#include "fusedmoe/config.hpp"
#include "fusedmoe/stream.hpp"
#include "fusedmoe/types.hpp"

namespace fusedmoe {

/// How the k expert outputs of a token are summed.
enum class ReductionMode {
  fast,           ///< the fastest combine: fp32 atomics straight from the GEMM accumulators (order
                  ///< varies run to run), or in MoeLayer, once the fp32 sums T x hidden x 4 bytes
                  ///< outgrow the L2, one bf16 row per route summed in route order
  deterministic,  ///< per-route fp32 rows, summed per token in choice order: bitwise reproducible
};
const char* reduction_mode_name(ReductionMode m);
ReductionMode parse_reduction_mode(const std::string& s);  ///< "fast" | "deterministic"

/// y[t, :] = sum_j weight[t, j] * (quant(x[t, :]) @ W[id[t, j]]^T), quant = FP8 E4M3 per token per
/// 128 columns; W in FP8 E4M3 with one fp32 scale per 128x128 block (DeepSeek `weight_scale_inv`).
/// Routing weights-on-input (Llama 4): quant(bf16(x * weight)) and no weight on the output.
struct MoeFp8ProjectionArgs {
  TensorRef x;              ///< [T, K] bf16, unit column stride, 16-byte aligned rows
  TensorRef router_logits;  ///< [T, E] f32 (ignored when routing_given)
  TensorRef routing_bias;   ///< [E] f32 correction/router bias, or data == nullptr
  TensorRef topk_ids;       ///< [T, k] i32: output, or input when routing_given; data == nullptr: internal
  TensorRef topk_weights;   ///< [T, k] f32: likewise
  bool routing_given = false;
  TensorRef w;              ///< [E, N, K] e4m3, contiguous, 16-byte aligned
  TensorRef w_scale;        ///< [E, ceil(N/128), ceil(K/128)] f32, contiguous
  TensorRef y;              ///< [T, N] bf16 output, unit column stride, 16-byte aligned rows
  RoutingConfig routing;    ///< the routing function when !routing_given
  int top_k = 0;
  ReductionMode mode = ReductionMode::fast;
  /// With routing_given and a stream that is not being captured, the ids are copied to the host
  /// and checked (this synchronizes the stream): an id outside [0, E) or an expert repeated
  /// within a token throws Error naming it. The device side never reads or writes out of bounds
  /// whatever the ids: it drops such a route and counts it (moe_fp8_dropped_routes).
  bool validate_routing = true;
};

/// Bytes of workspace for up to max_tokens tokens. The workspace holds the quantized
/// activations, the routing, the expert grouping and the fp32 reduction buffer; it needs no
/// initialization and can be reused by any call with T <= max_tokens and the same E, k, N, K.
size_t moe_fp8_projection_workspace_size(int max_tokens, int num_experts, int top_k, int N, int K,
                                         ReductionMode mode);

/// Runs the whole pipeline on `stream` with no host synchronization (graph-capturable). Throws
/// Error naming the argument on a wrong dtype, shape, stride, alignment, device or arch.
void moe_fp8_projection(const MoeFp8ProjectionArgs& args, void* workspace, size_t workspace_bytes,
                        Stream stream);

/// Routes dropped by the last call on this workspace because their expert id was out of range
/// (synchronizes `stream`; for diagnostics, not for the hot path).
int moe_fp8_dropped_routes(const void* workspace, int max_tokens, int num_experts, int top_k, int N,
                           int K, ReductionMode mode, Stream stream);

}  // namespace fusedmoe
