// One bf16 row to e4m3 codes and one f32 scale per 128 columns (the FP8 layer's activation form),
// by one or more warps: the definition route_quant and the expert-parallel dispatch share, so a
// row quantized on the token's rank is the row the single-GPU layer quantizes, bit for bit (and
// both are the host quantizer, fmt::quantize_fp8_per_token_128).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/ptx/sm90_ptx.cuh"

namespace fusedmoe::detail {

// Quantizes one row of K bf16 (K % 16 == 0) to e4m3 codes and per-128 scales. `num_warps` warps
// share the row (this one is `warp` of them). A pass is 32 chunks of 8 columns = two 128-column
// blocks, one per half-warp; warp w takes passes w, w + num_warps, ...; all its lanes call this.
// kBf16Out: write bf16(a) (the bf16 layer's rows) instead of codes and scales. kBatch: 16-byte
// loads in flight per lane (4 registers each).
// kScaleInput: the weight goes on the input (bf16(x * w_in) is quantized). A template parameter,
// not a run-time test inside the loop: predicated-off instructions still issue, and route_quant
// is bound by issue at large T (session 41, ncu: not_selected + math + selected 45% of stalls).
template <bool kBf16Out, int kBatch, bool kScaleInput>
__device__ __forceinline__ void quantize_row_as(const __nv_bfloat16* __restrict__ x, int K, float w_in,
                                                uint8_t* __restrict__ q, float* __restrict__ scales,
                                                int warp, int num_warps, int lane) {
  const int chunks = K / 8;  // 16-byte chunks of 8 bf16; 16 chunks make one 128-column block
  const int num_blocks = (K + 127) / 128;
  for (int p0 = warp; 32 * p0 < chunks; p0 += num_warps * kBatch) {
    uint4 raw[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = 32 * (p0 + num_warps * b) + lane;
      raw[b] = c < chunks ? __ldg(reinterpret_cast<const uint4*>(x) + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = 32 * (p0 + num_warps * b) + lane;
      float f[8];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw[b]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float2 v = __bfloat1622float2(h[i]);
        if constexpr (kScaleInput) {  // the kernel quantizes bf16(x * w)
          v.x = __bfloat162float(__float2bfloat16_rn(v.x * w_in));
          v.y = __bfloat162float(__float2bfloat16_rn(v.y * w_in));
        }
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
      }
      if constexpr (kBf16Out) {
        uint4 out;
        __nv_bfloat162* o = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
        for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
        if (c < chunks) reinterpret_cast<uint4*>(q)[c] = out;
        continue;
      }
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) amax = ptx::abs_max_nan(amax, f[i]);
#pragma unroll
      for (int off = 8; off > 0; off >>= 1)  // stays inside the half-warp that owns the block
        amax = ptx::abs_max_nan(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      // Same operations as the host: scale = amax / 448, codes from x * (448 / amax).
      const float scale = amax == 0.0f ? 0.0f : amax / 448.0f;
      const float inv = amax == 0.0f ? 0.0f : 448.0f / amax;
      uint32_t packed[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
            make_float2(f[4 * i] * inv, f[4 * i + 1] * inv), __NV_SATFINITE, __NV_E4M3);
        const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
            make_float2(f[4 * i + 2] * inv, f[4 * i + 3] * inv), __NV_SATFINITE, __NV_E4M3);
        packed[i] = uint32_t(lo) | (uint32_t(hi) << 16);
      }
      if (c < chunks) *reinterpret_cast<uint2*>(q + 8 * c) = make_uint2(packed[0], packed[1]);
      const int block = 2 * (p0 + num_warps * b) + lane / 16;
      if ((lane & 15) == 0 && block < num_blocks) scales[block] = scale;
    }
  }
}

template <bool kBf16Out, int kBatch = 2>
__device__ __forceinline__ void quantize_row(const __nv_bfloat16* __restrict__ x, int K, float w_in,
                                             bool scale_input, uint8_t* __restrict__ q,
                                             float* __restrict__ scales, int warp, int num_warps,
                                             int lane) {
  if (scale_input)
    quantize_row_as<kBf16Out, kBatch, true>(x, K, w_in, q, scales, warp, num_warps, lane);
  else
    quantize_row_as<kBf16Out, kBatch, false>(x, K, w_in, q, scales, warp, num_warps, lane);
}

}  // namespace fusedmoe::detail
