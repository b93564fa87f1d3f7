// Contract of the 4-bit layer's decode path (src/layer/sm90_decode_gemv.cuh): at a few tokens the
// two grouped GEMMs run as GEMVs over the same prepared e2m1 blocks (src/gemm/e2m1_layout.hpp).
//
// Work: one CTA of 4 warps per (route r, 64-row half of a prepared 128-row tile). The CTA runs
// only when r is the first kept route of its expert e = ids[r] (routes dropped as
// schedule/sm90_route_drop.cuh says); its columns are e's kept routes in ascending order (at most
// one per token, so at most T <= kDecodeGemvMaxT). Each warp owns 16 prepared rows (its lanes hold
// exactly the words of wgmma's A fragment of those rows, which is also mma.sync.m16n8k16's) and
// multiplies them over the whole K by the columns' activation rows with mma.sync (N = 8).
//   up:   B column c = row(route c) of `a` (route / k, + shared_row_offset for a shared route);
//         epilogue as the engine's swiglu (gate/up 8-row pairs, row factors, bias, activation):
//         h[route c, 64 tile + 8 group + i] = bf16(act(gate_i, up_i)); dropped routes counted in
//         status[kStatusDropped] once (by their route's first CTA).
//   down: B column c = h[route c]; epilogue as the engine's combine with paired rows:
//         fast out[route / k, n] += w * (acc + bias[e, n]) by fp32 atomics, deterministic
//         out[route, n] = w * (acc + bias[e, n]); bias added once (each output has one CTA).
// h rows are indexed by route (the GEMV path needs no schedule), so finalize reads them so too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/e2m1_layout.hpp"

namespace fusedmoe::detail {

/// The largest T the decode path takes (mma.sync's N = 8 columns, one route per token).
constexpr int kDecodeGemvMaxT = 8;
/// K parts inside a CTA of the GEMVs with few CTAs (sm90_decode_gemv.cuh); FMOE_GEMV_SPLIT=1|2|4.
/// Measured on H100 (layer µs, split 1 / 2 / 4, docs/performance.md, session 23): qwen3-30b-a3b
/// NVFP4 T=1 23.71 / 23.16 / 27.20, gpt-oss-120b MXFP4 T=1 42.73 / 40.25 / 42.91; at T >= 2 and
/// for deepseek-v3 the GEMVs have many CTAs and take no split (equal within 1.2%).
constexpr int kDecodeGemvSplit = 2;

struct DecodeGemvParams {
  // ---- weights: prepared blocks [E, NB, KB] of e2m1::kBlockBytes, row factors [E, NB * 128]
  const uint8_t* w_blocks;
  const float* row_scale;
  int NB, KB;
  const float* bias;  // up: [E, NB * 128] prepared rows; down: [E, N]; nullptr: none
  // ---- routing (route_quant's [T, k] tables, shared experts included)
  const int32_t* topk_ids;
  const float* topk_weights;
  int T, k, k_routed, E;
  int weight_on_input;  // routed routes have weight 1 in the combine (it went on the input)
  int32_t* status;      // up: dropped routes counted here; nullptr: not counted
  // ---- activations: bf16 rows of K values (the columns past K read as zero)
  const uint8_t* a;
  int64_t lda;            // bytes
  int shared_row_offset;  // up: a shared route reads row token + this
  int K;
  // ---- up epilogue
  uint8_t* h;
  int64_t ldh;  // bytes
  int act_clamped;
  float act_alpha, act_limit;
  // ---- down epilogue
  float* out;
  int N;
  int deterministic;
  uint32_t e2m1_scale_mul = e2m1::kScaleMul;  // always 16; a parameter on purpose (scale_pair)
  // ---- down: find the columns and load the first weights before waiting on the up GEMV (the
  //      routing is route_quant's, two kernels back: see the kernel)
  int early = 0;
};

void launch_decode_gemv_up(const DecodeGemvParams& p, int num_sms, cudaStream_t stream);
void launch_decode_gemv_down(const DecodeGemvParams& p, int num_sms, cudaStream_t stream);

}  // namespace fusedmoe::detail
