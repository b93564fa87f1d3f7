// fusedmoe: the tensors of one MoE layer in checkpoint layouts (what MoeLayer reads once and
// what load_moe_layer produces). No device operations: this header is usable without CUDA.
#pragma once

#include "fusedmoe/types.hpp"

namespace fusedmoe {

/// The weights of one layer in checkpoint layouts: for MoeLayer's constructor (which reads them
/// once) in CUDA device memory the caller owns; load_moe_layer gives them in host memory
/// (CheckpointLayer::host_weights). E experts, hidden H, expert intermediate I, shared
/// intermediate S (config.shared_intermediate). FP8 (cfg.weight_precision fp8_block): e4m3 values
/// with DeepSeek's `weight_scale_inv` (one f32 per 128x128 block); bf16: no scales. NVFP4
/// (ModelOpt): the matrices are e2m1x2 with the last dimension halved (two values per byte, the
/// even element in the low nibble), `*_scale` their e4m3 block scales (one per 16 values along
/// the last dimension), `*_scale_2` the f32 global scales (`weight_scale_2`): w = e2m1 * e4m3 *
/// global. MXFP4 (gpt-oss's `*_blocks` / `*_scales`): e2m1x2 matrices as for NVFP4, `*_scale`
/// their ue8m0 scales (one per 32 values along the last dimension), no `*_scale_2`:
/// w = e2m1 * 2^(code - 127).
struct MoeLayerWeights {
  TensorRef w13;               ///< [E, 2I, H]: gate rows then up rows (swiglu), or interleaved
                               ///< gate 2i / up 2i+1 (swiglu_clamped, gpt-oss)
  TensorRef w13_scale;         ///< fp8: [E, ceil(2I/128), ceil(H/128)] f32;
                               ///< nvfp4: [E, 2I, H/16] e4m3; mxfp4: [E, 2I, H/32] ue8m0
  TensorRef w13_scale_2;       ///< nvfp4: [E, 2] f32 (gate, up: checkpoints scale them apart) or [E]
  TensorRef w2;                ///< [E, H, I]
  TensorRef w2_scale;          ///< fp8: [E, ceil(H/128), ceil(I/128)] f32; nvfp4: [E, H, I/16] e4m3;
                               ///< mxfp4: [E, H, I/32] ue8m0
  TensorRef w2_scale_2;        ///< nvfp4: [E] f32
  TensorRef b13;               ///< [E, 2I] f32 or bf16, w13's row order (cfg.expert_bias)
  TensorRef b2;                ///< [E, H] f32 or bf16 (cfg.expert_bias)
  TensorRef routing_bias;      ///< [E] f32: e_score_correction_bias or the router bias
  TensorRef shared_w13;        ///< [2S, H], same row layout as w13 (cfg.num_shared_experts > 0)
  TensorRef shared_w13_scale;  ///< fp8: [ceil(2S/128), ceil(H/128)]; nvfp4: [2S, H/16] e4m3;
                               ///< mxfp4: [2S, H/32] ue8m0
  TensorRef shared_w13_scale_2;  ///< nvfp4: [2] f32 (gate, up) or [1]
  TensorRef shared_w2;         ///< [H, S]
  TensorRef shared_w2_scale;   ///< fp8: [ceil(H/128), ceil(S/128)]; nvfp4: [H, S/16] e4m3;
                               ///< mxfp4: [H, S/32] ue8m0
  TensorRef shared_w2_scale_2;   ///< nvfp4: [1] f32
  TensorRef shared_gate;       ///< [H] or [1, H] bf16 (cfg.shared_expert_gate)
};

}  // namespace fusedmoe
