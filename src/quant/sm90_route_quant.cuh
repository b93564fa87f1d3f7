// Stage 1 of the FP8 MoE projection: routing + per-token FP8 quantization + per-call zeroing.
//
//   ids[t, :], weights[t, :] = route(logits[t, :])                 (unless the caller routed)
//   xq[t, c] = e4m3(a[t, c] * 448 / amax_b),  sa[t, b] = amax_b / 448  for each 128-column block b,
//   with a = x (or bf16(x * weight) when the weight goes on the input), amax NaN-propagating,
//   an all-zero block giving scale 0 and codes 0: bit for bit the host quantizer
//   (fmt::quantize_fp8_per_token_128), which the tests check.
// Also zeroes what the later stages accumulate into: the expert counts, the status words and, in
// fast mode, the fp32 output sums: a call needs no initialized workspace.
// Design: four warps per token, kTokensPerCta tokens per CTA. The token's first warp routes (a
// serial chain of k warp-wide argmax steps) while its other three quantize, so the two latencies
// overlap; only when the weight goes on the input do all four quantize after the routing. Several
// tokens per CTA keep the CTA count low at decode sizes, leaving SMs free for the GEMM's CTAs,
// which launch early (PDL) and prefetch weights while this runs. A half-warp owns a 128-column block (16 lanes x
// 8 bf16), so the block max is four shuffles. Loads are 16 bytes, kBatch in flight per lane.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "common/ptx/sm90_ptx.cuh"
#include "moe/moe_fp8_plan.hpp"
#include "route/sm90_route.cuh"

namespace fusedmoe::detail {

// kWarpsPerToken: 4 at decode sizes (routing latency overlapped by three quantizing warps);
// 2 for large T, where tokens in flight per SM matter more than each token's latency (the
// registers allow 1024 threads per SM: 16 tokens of 2 warps instead of 8 of 4).
template <int kWarpsPerToken_>
struct RouteQuantConfig {
  static constexpr int kWarpsPerToken = kWarpsPerToken_;
  static constexpr int kThreads = 512;
  static constexpr int kTokensPerCta = kThreads / (32 * kWarpsPerToken);
};

// Quantizes one row of K bf16 (K % 16 == 0) to e4m3 codes and per-128 scales. `num_warps` warps
// share the row (this one is `warp` of them). A pass is 32 chunks of 8 columns = two 128-column
// blocks, one per half-warp; warp w takes passes w, w + num_warps, ...; all its lanes call this.
__device__ __forceinline__ void quantize_row(const __nv_bfloat16* __restrict__ x, int K, float w_in,
                                             bool scale_input, uint8_t* __restrict__ q,
                                             float* __restrict__ scales, int warp, int num_warps,
                                             int lane) {
  constexpr int kBatch = 2;  // 16-byte loads in flight per lane
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
        if (scale_input) {  // the weight goes on the input: the kernel quantizes bf16(x * w)
          v.x = __bfloat162float(__float2bfloat16_rn(v.x * w_in));
          v.y = __bfloat162float(__float2bfloat16_rn(v.y * w_in));
        }
        f[2 * i] = v.x;
        f[2 * i + 1] = v.y;
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

// V: the selection arithmetic (float when exact, see sm90_route.cuh); kPer: experts per lane.
template <typename V, int kPer, int kWarpsPerToken>
__global__ void __launch_bounds__(RouteQuantConfig<kWarpsPerToken>::kThreads)
route_quant_kernel(const __grid_constant__ RouteQuantParams p) {
  using Cfg = RouteQuantConfig<kWarpsPerToken>;
  __shared__ float s_weight_in[Cfg::kTokensPerCta];
  // The previous call's kernels may still read the buffers written below.
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int slot = warp / Cfg::kWarpsPerToken, role = warp % Cfg::kWarpsPerToken;
  const int t = blockIdx.x * Cfg::kTokensPerCta + slot;
  const bool valid = t < p.T;
  if (blockIdx.x == 0) {
    for (int e = threadIdx.x; e < p.E; e += blockDim.x) p.counts[e] = 0;
    if (threadIdx.x < kStatusWords) p.status[threadIdx.x] = 0;
  }
  if (valid && p.zero_rows) {  // N % 16 == 0
    float4* row = reinterpret_cast<float4*>(p.zero_rows + int64_t(t) * p.N);
    for (int c = role * 32 + lane; c < p.N / 4; c += 32 * Cfg::kWarpsPerToken)
      row[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const bool on_input = p.weight_on_input != 0;  // uniform: the barrier below is too
  if (valid && role == 0) {
    float w = 1.0f;
    if (!p.routing_given) {
      const RouteDeviceParams rp{p.E, p.k, p.fn, p.renormalize, p.softcap, p.num_groups,
                                 p.topk_groups, p.bias, p.routed_scaling_factor};
      int id;
      route_token_warp<V, kPer>(rp, p.logits + int64_t(t) * p.logits_ld, lane, id, w);
      if (lane < p.k) {
        p.topk_ids[int64_t(t) * p.k + lane] = id;
        p.topk_weights[int64_t(t) * p.k + lane] = w;
      }
    } else if (on_input) {
      w = p.topk_weights[int64_t(t) * p.k];
    }
    if (on_input && lane == 0) s_weight_in[slot] = w;  // top-1: choice 0's weight
  }
  // With the weight on the input every warp needs the routing first; otherwise the routing warp
  // is done and the token's other three warps quantize meanwhile.
  if (on_input) __syncthreads();
  if (!valid || (!on_input && role == 0)) return;
  const int first = on_input ? role : role - 1;
  const int num = on_input ? Cfg::kWarpsPerToken : Cfg::kWarpsPerToken - 1;
  quantize_row(p.x + int64_t(t) * p.ldx, p.K, on_input ? s_weight_in[slot] : 1.0f, on_input,
               p.xq + int64_t(t) * p.K, p.sa + int64_t(t) * p.KB, first, num, lane);
}

}  // namespace fusedmoe::detail
