// fusedmoe: one MoE layer of a Hugging Face checkpoint directory (config.json + safetensors,
// single or sharded), in the layouts MoeLayerWeights documents, in host memory this object owns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fusedmoe/config.hpp"
#include "fusedmoe/layer.hpp"
#include "fusedmoe/types.hpp"

namespace fusedmoe {

/// A host tensor the loader owns (contiguous).
struct HostTensor {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  bool empty() const { return bytes.empty() && shape.empty(); }
  /// A CPU TensorRef of this tensor (an empty ref when empty()).
  TensorRef ref();
};

/// The layer's tensors. Supported today: per-expert layouts
/// `model.layers.{N}.mlp.experts.{j}.{gate,up,down}_proj.weight` in BF16, or F8_E4M3 with
/// `weight_scale_inv` (DeepSeek-V3 / Qwen3 FP8: one f32 per 128x128 block; I a multiple of 128 so
/// the gate and up blocks stack), the router `mlp.gate.weight` (+ `e_score_correction_bias`), and
/// shared experts as `mlp.shared_experts.*` (DeepSeek) or `mlp.shared_expert.*` +
/// `mlp.shared_expert_gate.weight` (Qwen). Other layouts (gpt-oss fused/MXFP4, Llama-4 stacked,
/// ModelOpt NVFP4) are refused with an Error naming the format.
struct CheckpointLayer {
  MoeConfig config;
  int layer = 0;
  HostTensor w13, w13_scale, w2, w2_scale;      ///< MoeLayerWeights layouts (gate rows, then up)
  HostTensor shared_w13, shared_w13_scale, shared_w2, shared_w2_scale, shared_gate;
  HostTensor routing_bias;                      ///< [E] f32 (e_score_correction_bias) or empty
  HostTensor router_weight;                     ///< [E, H] as stored (bf16 or f32)
  uint64_t bytes_read = 0;                      ///< tensor bytes copied from the files

  /// Views of the tensors above as MoeLayerWeights (CPU memory: copy to the GPU before
  /// constructing a MoeLayer).
  MoeLayerWeights host_weights();
};

/// Reads layer `layer` of the model in `dir` (config.json beside the safetensors). Throws Error
/// naming the file and tensor key on a missing tensor, a wrong dtype or shape, or a malformed
/// file. `progress(bytes_done, bytes_total)` is called as the expert tensors are copied.
CheckpointLayer load_moe_layer(const std::string& dir, int layer,
                               void (*progress)(uint64_t, uint64_t, void*) = nullptr,
                               void* progress_arg = nullptr);

}  // namespace fusedmoe
