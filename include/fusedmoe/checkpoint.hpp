// fusedmoe: one MoE layer of a Hugging Face checkpoint directory (config.json + safetensors,
// single or sharded), in the layouts MoeLayerWeights documents, in host memory this object owns.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "fusedmoe/config.hpp"
#include "fusedmoe/types.hpp"
#include "fusedmoe/weights.hpp"

namespace fusedmoe {

/// An allocator whose new elements are left uninitialized: the loader writes every byte of its
/// tensors, and zero-filling a layer's 11 GB first would cost as much as reading it.
template <class T>
struct UninitializedAllocator : std::allocator<T> {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialization: no zeroing for bytes
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
using HostBytes = std::vector<uint8_t, UninitializedAllocator<uint8_t>>;

/// A host tensor the loader owns (contiguous, row-major).
struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  HostBytes bytes;

  bool empty() const { return bytes.empty() && shape.empty(); }
  /// A CPU TensorRef of this tensor (an empty ref when empty()).
  TensorRef ref();
};

/// How a checkpoint stores the experts of a layer (the prefix P is the layer's MoE block:
/// `model.layers.{N}.mlp.`, `model.language_model.layers.{N}.mlp.`, Llama-4's
/// `[language_model.]model.layers.{N}.feed_forward.`, Mixtral's `...block_sparse_moe.`).
enum class ExpertLayout {
  /// P`experts.{j}.{gate,up,down}_proj.*` (DeepSeek-V3, Kimi-K2, Qwen2/3, ModelOpt exports), or
  /// Mixtral's P`experts.{j}.{w1,w3,w2}.*`: one tensor per expert and projection.
  per_expert,
  /// P`experts.gate_up_proj` [E, 2I, H] (gate rows, then up rows) + P`experts.down_proj`
  /// [E, H, I] (Qwen3.5 and other Transformers-5 checkpoints): already the layer's layout.
  stacked,
  /// gpt-oss: P`experts.gate_up_proj` [E, H, 2I] with gate and up interleaved by column,
  /// P`experts.gate_up_proj_bias` [E, 2I], P`experts.down_proj` [E, I, H],
  /// P`experts.down_proj_bias` [E, H]; router P`router.weight` + P`router.bias`.
  gpt_oss,
  /// Llama 4: P`experts.gate_up_proj` [E, H, 2I] (gate columns, then up columns) +
  /// P`experts.down_proj` [E, I, H]; router P`router.weight`; shared P`shared_expert.*`.
  llama4,
};
const char* expert_layout_name(ExpertLayout l);

/// One layer's tensors, read from the files into the layouts of MoeLayerWeights (gate rows then
/// up rows for swiglu, interleaved for gpt-oss's clamped SwiGLU; [out, in] matrices).
///
/// Formats (config.json's quantization_config, or ModelOpt's hf_quant_config.json):
/// - BF16 (no quantization): every layout above.
/// - FP8 128x128 blocks (`quant_method: fp8`, DeepSeek-V3 / Kimi-K2 / Qwen3 FP8): per-expert
///   `weight` F8_E4M3 + `weight_scale_inv` F32 [ceil(N/128), ceil(K/128)]; the expert
///   intermediate a multiple of 128 so the gate and up scale blocks stack.
/// - ModelOpt NVFP4 (`quant_method: modelopt` / `quant_algo: NVFP4`): per-expert `weight` U8
///   [N, K/2] (two E2M1 per byte, even element in the low nibble), `weight_scale` F8_E4M3
///   [N, K/16], `weight_scale_2` F32 scalar (w = e2m1 * weight_scale * weight_scale_2),
///   `input_scale` F32 scalar. The checkpoint was calibrated with NVFP4 activations too; the
///   layer runs its 4-bit weights with bf16 activations (W4A16, config.activation_precision
///   bf16): input_scale is read and kept, not used.
/// - MXFP4 as gpt-oss ships it (`quant_method: mxfp4`): `experts.gate_up_proj_blocks` U8
///   [E, 2I, H/32, 16] (E2M1 codes, even element in the low nibble; rows gate 2i / up 2i + 1),
///   `_scales` U8 [E, 2I, H/32] (UE8M0, w = e2m1 * 2^(scale - 127)), `down_proj_blocks`
///   [E, H, I/32, 16] and `_scales` [E, H, I/32]; biases as in the BF16 layout. Read into
///   w13 / w2 e2m1x2 [E, 2I, H/2], [E, H, I/2] and w13_scale / w2_scale ue8m0.
struct CheckpointLayer {
  MoeConfig config;
  int layer = 0;
  ExpertLayout layout = ExpertLayout::per_expert;
  std::string prefix;    ///< the layer's MoE block, e.g. "model.layers.3.mlp."
  std::string router_key;  ///< the router weight's tensor, e.g. "model.layers.3.mlp.gate.weight"
  std::string format;    ///< one line for people: "fp8_block per-expert (weight + weight_scale_inv)"

  HostTensor w13, w13_scale, w2, w2_scale;  ///< MoeLayerWeights layouts; nvfp4 / mxfp4: values
                                            ///< e2m1x2 [E, 2I, H/2], [E, H, I/2] and
                                            ///< weight_scale e4m3 [E, 2I, H/16], [E, H, I/16]
                                            ///< (mxfp4: ue8m0 [E, 2I, H/32], [E, H, I/32])
  HostTensor w13_scale_2, w2_scale_2;       ///< nvfp4: weight_scale_2 f32 [E, 2] (gate, up), [E]
  HostTensor w13_input_scale, w2_input_scale;  ///< nvfp4: input_scale f32 [E, 2], [E] (read and
                                               ///< kept; the layer runs W4A16, bf16 activations)
  HostTensor b13, b2;                       ///< gpt-oss: [E, 2I] (w13's row order), [E, H] bf16
  HostTensor routing_bias;                  ///< [E] f32: e_score_correction_bias or router bias
  HostTensor router_weight;                 ///< [E, H] as stored (bf16 or f32)
  HostTensor shared_w13, shared_w13_scale, shared_w2, shared_w2_scale;  ///< [2S, H], [H, S]
  HostTensor shared_w13_scale_2, shared_w2_scale_2;                     ///< nvfp4: [2], [1]
  HostTensor shared_w13_input_scale, shared_w2_input_scale;             ///< nvfp4: [2], [1]
  HostTensor shared_gate;                   ///< [1, H] bf16 (Qwen's shared_expert_gate)
  uint64_t bytes_read = 0;                  ///< tensor bytes read from the files

  /// Bytes of every tensor above (host memory held).
  uint64_t host_bytes() const;
  /// Views of the tensors above as MoeLayerWeights (CPU memory: copy them to the GPU before
  /// constructing a MoeLayer with `config`). A ModelOpt NVFP4 checkpoint was calibrated with
  /// NVFP4 activations too (input_scale); Hopper has no FP4 tensor cores, and `config` runs its
  /// 4-bit weights with bf16 activations (W4A16), as vLLM's and TensorRT-LLM's Hopper paths run
  /// these checkpoints: the input_scale tensors are not among the views.
  MoeLayerWeights host_weights();
};

/// The MoeConfig of the model in `dir` as load_moe_layer reads it: config.json, with
/// hf_quant_config.json for ModelOpt exports (NVFP4). Reads no tensor. Throws Error naming the
/// file and field, or a quantization format that is not read (GPTQ, AWQ, other quantizers).
MoeConfig checkpoint_config(const std::string& dir);

/// Reads layer `layer` of the model in `dir` (config.json, an optional hf_quant_config.json,
/// `model.safetensors` or `model.safetensors.index.json` and its shards; files memory-mapped).
/// Throws Error naming the file and the tensor key on a missing tensor, a wrong dtype or shape
/// (expected vs actual), a malformed file, a layer without MoE block, or a format not read.
/// `progress(bytes_done, bytes_total, arg)` is called as the tensors are copied, with
/// bytes_done reaching bytes_total.
CheckpointLayer load_moe_layer(const std::string& dir, int layer,
                               void (*progress)(uint64_t, uint64_t, void*) = nullptr,
                               void* progress_arg = nullptr);

}  // namespace fusedmoe
