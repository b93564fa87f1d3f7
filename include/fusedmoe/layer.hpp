// fusedmoe: the whole MoE layer on the GPU: routing, gate/up GEMM with the activation and the
// intermediate's quantization in its epilogue, down GEMM with the weighted combine in its
// epilogue, shared experts in the same grouped GEMMs. One graph-capturable call.
#pragma once

#include <cstddef>
#include <memory>

#include "fusedmoe/config.hpp"
#include "fusedmoe/moe.hpp"
#include "fusedmoe/stream.hpp"
#include "fusedmoe/types.hpp"
#include "fusedmoe/weights.hpp"

namespace fusedmoe {

/// One forward call. All tensors in CUDA device memory on the layer's device.
struct MoeForwardArgs {
  TensorRef x;              ///< [T, H] bf16, unit column stride, 16-byte aligned rows; with x_fp8
                            ///< it may be left empty (data null), except for Qwen's shared gate
  /// FP8 layers: the activations already quantized as the layer would (fmt::
  /// quantize_fp8_per_token_128, e.g. rmsnorm_quant's e4m3 output, or rows that came over the
  /// wire): e4m3 [T, H] codes (16-byte aligned rows) and f32 [T, ceil(H/128)] scales. The layer
  /// then skips its own quantization of x and its first GEMM reads these; the result is the bits
  /// it gives from x when they are x's quantization. Not with the routing weight on the input.
  TensorRef x_fp8, x_fp8_scales;
  TensorRef router_logits;  ///< [T, E] f32 (unused with routing_given)
  bool routing_given = false;
  TensorRef topk_ids;       ///< routing_given: [T, top_k] i32 (the shared experts are added)
  TensorRef topk_weights;   ///< routing_given: [T, top_k] f32
  /// With routing_given and a stream that is not being captured, the ids are copied to the host
  /// and checked (this synchronizes): an id outside [0, E) or repeated within a token throws.
  /// Unchecked, the kernels drop (and count) such a route: they never read out of bounds.
  bool validate_routing = true;
  TensorRef y;              ///< [T, H] bf16 output, unit column stride, 16-byte aligned rows
  ReductionMode mode = ReductionMode::fast;
  /// The grouped GEMMs' persistent grids use at most this many SMs (0: every SM), leaving the
  /// rest to work that runs beside the layer (the EP layer's NCCL kernels). The configs are
  /// chosen for that many SMs (for 4-bit weights this can change the split of K, and with it the
  /// last bits).
  int max_sms = 0;
  /// FP8 layers: columns per fp32 scale of the intermediate (GEMM 1's output, GEMM 2's input).
  /// 0: the layer's choice: 128 in fast mode where GEMM 1 runs two-wave 128-token tiles (prefill
  /// sizes: the down GEMM then promotes once per k-step, measured 20-28% faster), else 64. 64:
  /// the same quantization at every T (what the expert-parallel layer uses, so that its ranks,
  /// whose local layers see other row counts, agree with a single-GPU layer asked for 64). 128:
  /// only where this call's GEMM 1 runs those tiles (an Error otherwise). Ignored by BF16 and
  /// 4-bit layers (their intermediate is bf16).
  int intermediate_scale_block = 0;
};

class MoeLayer {
 public:
  /// Validates the config and the weights (throws Error naming the tensor, expected vs actual),
  /// then prepares them once into device memory this object owns: gate/up rows re-laid in 8-row
  /// pairs (so GEMM 1's epilogue holds matching gate and up values), the intermediate padded to
  /// a multiple of 64, the shared experts appended as always-selected chunks of I, scales and
  /// biases in the same order. Runs on `stream` and synchronizes it before returning. The
  /// current CUDA device must be the weights' device. GPU weight precisions: fp8_block, bf16.
  MoeLayer(const MoeConfig& cfg, const MoeLayerWeights& weights, Stream stream = nullptr);
  ~MoeLayer();
  MoeLayer(MoeLayer&&) noexcept;
  MoeLayer& operator=(MoeLayer&&) noexcept;
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  const MoeConfig& config() const;
  /// Device bytes of the prepared weights.
  size_t prepared_bytes() const;

  /// Workspace bytes for calls with up to max_tokens tokens in `mode`. The workspace needs no
  /// initialization and serves any later call with T <= max_tokens and the same mode.
  size_t workspace_size(int max_tokens, ReductionMode mode) const;

  /// y = the layer on x. Routing, both grouped GEMMs, the combine and the shared experts run as
  /// a chain of kernels joined by programmatic dependent launch, with no host synchronization
  /// (except the optional id check), so the call captures into a CUDA graph. Throws Error naming
  /// the argument on a wrong dtype, shape, stride, alignment, device or workspace.
  void forward(const MoeForwardArgs& args, void* workspace, size_t workspace_bytes,
               Stream stream) const;

  /// Routes dropped by the last call on this workspace (bad or repeated caller ids).
  /// Synchronizes `stream`; for diagnostics.
  int dropped_routes(const void* workspace, Stream stream) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }  ///< internals for tests and benchmarks

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusedmoe
