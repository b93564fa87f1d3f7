// The shared expert's gate (Qwen's shared_expert_gate): sigmoid(x . gate) over one bf16 row, by
// one warp. One definition for route_quant (the single-GPU layer's shared columns) and the
// expert-parallel layer's shared-expert routing, so both give the same bits.
#pragma once

#include <cuda_bf16.h>

namespace fusedmoe::detail {

// K % 2 == 0 (whole bf16 pairs); x and gate 4-byte aligned. Every lane gets the weight.
__device__ __forceinline__ float shared_gate_weight(const __nv_bfloat16* __restrict__ x,
                                                    const __nv_bfloat16* __restrict__ gate, int K,
                                                    int lane) {
  float dot = 0.0f;
  for (int c = lane; c < K / 2; c += 32) {
    const float2 a = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(x)[c]);
    const float2 g = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(gate)[c]);
    dot = fmaf(a.x, g.x, fmaf(a.y, g.y, dot));
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
  return 1.0f / (1.0f + __expf(-dot));
}

}  // namespace fusedmoe::detail
