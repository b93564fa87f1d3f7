// Stage 1, route + quantize (contract: route_quant.hpp): the routing of each token, the rows the
// first GEMM reads, and the per-call zeroing.
//
// rows (fp8): xq[t, c] = e4m3(a[t, c] * 448 / amax_b), scale[t, b] = amax_b / 448 for each
// 128-column block b, a = x (or bf16(x * weight) when the weight goes on the input), amax
// NaN-propagating, an all-zero block giving scale 0 and codes 0: bit for bit the host quantizer
// (fmt::quantize_fp8_per_token_128), which the tests check. rows (bf16): a itself.
// Design: four warps per token (two from kRouteQuantWideFromTokens tokens), several tokens per CTA.
// The token's first warp routes (a serial chain of k warp-wide argmax steps; then the shared
// columns and Qwen's shared gate, a dot product over the row) while the others quantize, so the
// two latencies overlap; only when the weight goes on the input do all warps wait for the routing.
// DeepSeek-V3's grouped sigmoid routing (kBlockRoute, below 1024 tokens) is instead ranked by all
// the token's warps (route_token_block), the rows after it.
// Several tokens per CTA keep the CTA count low at decode sizes, leaving SMs free for the GEMM's
// CTAs, which launch early (PDL). A half-warp owns a 128-column block (16 lanes x 8 bf16), so the
// block max is four shuffles. Loads are 16 bytes, kBatch in flight per lane.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "common/ptx/sm90_ptx.cuh"
#include "route/route_quant.hpp"
#include "route/sm90_route.cuh"
#include "route/sm90_quantize_row.cuh"
#include "route/sm90_shared_gate.cuh"

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

// One row of the GEMM's input: quantized (fp8) or copied (bf16), scaled by w_in when asked.
// kBatch: loads in flight per lane. At large T one warp writes a token's row and its passes wait
// on DRAM one after another, so more loads in flight shorten it. 4 instead of 2 cost 16 registers
// that the double-precision routing has already taken (113 either way): deepseek-v3 (H200)
// 37.5 -> 31.3 µs at T = 2048, 133.1 -> 108.2 at T = 8192, unchanged at T <= 512. The float
// kernels keep 2: with 4 they go from 64 registers to 80, one CTA an SM instead of two.
template <int kBatch>
__device__ __forceinline__ void emit_row(const RouteQuantParams& p, int64_t row, int t, float w_in,
                                         bool scale_input, int warp, int num_warps, int lane) {
  const __nv_bfloat16* x = p.x + int64_t(t) * p.ldx;
  if (p.row_format == RowFormat::fp8)
    quantize_row<false, kBatch>(x, p.K, w_in, scale_input, p.rows + row * p.K,
                                p.row_scales + row * p.KB, warp, num_warps, lane);
  else
    quantize_row<true, kBatch>(x, p.K, w_in, scale_input, p.rows + row * p.K * 2, nullptr, warp,
                               num_warps, lane);
}

// The shared columns of token t: expert E + c, weight sigmoid(x . shared_gate) or 1. One warp.
__device__ __forceinline__ void route_shared(const RouteQuantParams& p, int t, int lane) {
  // K % 16 == 0: whole bf16 pairs
  const float w = p.shared_gate ? shared_gate_weight(p.x + int64_t(t) * p.ldx, p.shared_gate, p.K, lane)
                                : 1.0f;
  const int chunks = p.k_total - p.k;
  if (lane < chunks) {
    p.topk_ids[int64_t(t) * p.k_total + p.k + lane] = p.E + lane;
    p.topk_weights[int64_t(t) * p.k_total + p.k + lane] = w;
  }
}

// V: the selection arithmetic (float when exact, see sm90_route.cuh); kPer: experts per lane of
// the warp path; kBlockRoute: all the token's warps route it (route_token_block, the launcher's
// conditions), then the rows as below.
template <typename V, int kPer, int kWarpsPerToken, bool kBlockRoute>
__global__ void __launch_bounds__(RouteQuantConfig<kWarpsPerToken>::kThreads)
route_quant_kernel(const __grid_constant__ RouteQuantParams p) {
  using Cfg = RouteQuantConfig<kWarpsPerToken>;
  __shared__ float s_weight_in[Cfg::kTokensPerCta];
  // The previous call's kernels may still read the buffers written below.
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Role 0 routes (a serial chain of double-precision work at decode); it is a different warp of
  // each token's group so that the CTA's routing warps spread over the SM's four schedulers
  // (warp w issues on scheduler w % 4): all on one, deepseek-v3 took 19.9 us at T=4 against
  // 12.2 at T=1 (docs/performance.md, session 22).
  const int slot = warp / Cfg::kWarpsPerToken;
  const int router = (slot * Cfg::kWarpsPerToken / 4) % Cfg::kWarpsPerToken;
  const int role = (warp % Cfg::kWarpsPerToken + Cfg::kWarpsPerToken - router) % Cfg::kWarpsPerToken;
  const int t = blockIdx.x * Cfg::kTokensPerCta + slot;
  const bool valid = t < p.T;
  if (blockIdx.x == 0) {
    for (int e = threadIdx.x; e < p.E_total; e += blockDim.x) p.counts[e] = 0;
    for (int i = threadIdx.x; i < p.num_zero_ints; i += blockDim.x) p.zero_ints[i] = 0;
    if (threadIdx.x < kStatusWords) p.status[threadIdx.x] = 0;
  }
  if (valid && p.zero_rows) {  // N % 16 == 0
    float4* row = reinterpret_cast<float4*>(p.zero_rows + int64_t(t) * p.N);
    for (int c = role * 32 + lane; c < p.N / 4; c += 32 * Cfg::kWarpsPerToken)
      row[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const bool on_input = p.weight_on_input != 0;  // uniform: the barrier below is too
  const RouteDeviceParams rp{p.E, p.k, p.fn, p.renormalize, p.softcap, p.num_groups,
                             p.topk_groups, p.bias, p.routed_scaling_factor};
  int id = -1;
  float w = 1.0f;
  if constexpr (kBlockRoute) {  // every warp of a valid token (the launcher: no given routing)
    static_assert(sizeof(V) == 8 && kPer % kWarpsPerToken == 0, "block routing is double's");
    using Shared = BlockRouteShared<kWarpsPerToken, kPer / kWarpsPerToken>;
    __shared__ Shared s_route[Cfg::kTokensPerCta];
    // Barrier 0 is __syncthreads below; each token's warps meet at their own.
    if (valid)
      route_token_block(rp, p.logits + int64_t(t) * p.logits_ld, s_route[slot],
                        (warp % Cfg::kWarpsPerToken) * 32 + lane, 1 + slot, id, w);
  }
  if (valid && role == 0) {
    const int64_t out = int64_t(t) * p.k_total;
    if (!p.routing_given) {
      if constexpr (!kBlockRoute)
        route_token_warp<V, kPer>(rp, p.logits + int64_t(t) * p.logits_ld, lane, id, w);
      if (lane < p.k) {
        p.topk_ids[out + lane] = id;
        p.topk_weights[out + lane] = w;
      }
      w = __shfl_sync(0xffffffffu, w, 0);  // choice 0's weight (top-1 on the input)
    } else {
      if (p.given_ids && lane < p.k) {  // the layer's own [T, k_total] copy of the caller's
        // An id outside [0, E) becomes -1: dropped, as without shared columns; as itself, an id
        // E + c would be taken for shared chunk c (and the real shared column dropped as its
        // repeat).
        const int32_t id = p.given_ids[int64_t(t) * p.k + lane];
        p.topk_ids[out + lane] = id >= 0 && id < p.E ? id : -1;
        p.topk_weights[out + lane] = p.given_weights[int64_t(t) * p.k + lane];
      }
      if (on_input) w = p.given_weights ? p.given_weights[int64_t(t) * p.k] : p.topk_weights[out];
    }
    if (p.k_total > p.k) route_shared(p, t, lane);
    if (on_input && lane == 0) s_weight_in[slot] = w;
  }
  // With the weight on the input every warp needs the routing first; otherwise the routing warp
  // is done and the token's other warps write the rows meanwhile.
  if (on_input) __syncthreads();
  if (!valid || (!on_input && role == 0) || p.row_format == RowFormat::none) return;
  const int first = on_input ? role : role - 1;
  const int num = on_input ? Cfg::kWarpsPerToken : Cfg::kWarpsPerToken - 1;
  constexpr int kBatch = sizeof(V) == 8 ? 4 : 2;
  emit_row<kBatch>(p, t, t, on_input ? s_weight_in[slot] : 1.0f, on_input, first, num, lane);
  if (p.shared_rows) emit_row<kBatch>(p, int64_t(p.T) + t, t, 1.0f, false, first, num, lane);
}

}  // namespace fusedmoe::detail
