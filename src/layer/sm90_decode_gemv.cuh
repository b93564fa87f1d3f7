// The 4-bit layer's decode path (contract: decode_gemv.hpp): both GEMMs as GEMVs over the prepared
// e2m1 blocks, for T <= kDecodeGemvMaxT tokens.
//
// Why. At decode the grouped GEMM's fixed costs dominate: a persistent CTA per SM fills a ring of
// 4.5 KB stages through one producer warp, and each CTA's first tile waits for the whole fill
// (ncu, docs/performance.md); two consumer warpgroups decode for one wgmma issue stream. Here every
// warp streams its own 16 rows with plain 16-byte loads, many warps per SM keep the bytes in
// flight (the NVFP4 GEMV reaches 76-83% of copy bandwidth this way), and mma.sync multiplies the
// decoded fragments (the same registers as wgmma's A) by up to 8 columns.
//
// Per warp and k-block: one 16-byte load of its words and one 8-byte load of its quad's scales
// (issued kAhead k-blocks ahead, kept in registers), the decode of e2m1_layout.hpp, the B
// fragments of the 8 columns (two ldmatrix.x4 from the CTA's shared copy of the columns'
// activation rows, below), four mma.sync.m16n8k16.
#pragma once

#include <cuda_bf16.h>
#include <cuda_pipeline_primitives.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <type_traits>

#include "common/cuda_check.hpp"
#include "common/env.hpp"
#include "common/launch.hpp"
#include "common/ptx/sm90_ptx.cuh"
#include "common/status.hpp"
#include "gemm/e2m1_layout.hpp"
#include "gemm/sm90_gemm_epilogue.cuh"
#include "layer/decode_gemv.hpp"
#include "schedule/sm90_route_drop.cuh"

namespace fusedmoe::detail {

namespace decode_gemv {

constexpr int kWarps = 4;    // a CTA: 64 rows, half of a prepared 128-row tile
constexpr int kThreads = 32 * kWarps;
constexpr int kCols = 8;     // mma.sync's N

// Weights are read once: no L1 allocation.
__device__ __forceinline__ uint4 ld_weights_v4(const uint8_t* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_weights_v2(const uint8_t* p) {
  uint2 v;
  asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                               uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four 8x8 b16 matrices from shared memory; lane l gives the address of row l % 8 of matrix l / 8.
// Lane l receives, of each matrix, the pair at row l / 4 and columns 2 (l % 4), + 1: for a matrix
// whose rows are columns n of B and whose columns are 8 consecutive k, that is mma.sync's B half.
__device__ __forceinline__ uint4 ldmatrix_x4(uint32_t addr) {
  uint4 v;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}

// The CTA's expert and columns (warp 0): `route` must be the first kept route of its expert.
struct Columns {
  int e;        // < 0: this CTA has no work
  int n;        // columns (kept routes of e, ascending)
  int route[kCols];
};

__device__ void find_columns(const DecodeGemvParams& p, int route, Columns& c, bool count_drop) {
  const int lane = threadIdx.x % 32;
  const int R = p.T * p.k;
  if (lane == 0) c.e = -1;
  if (route_dropped(p.topk_ids, route, p.k, p.E)) {
    if (count_drop && lane == 0 && p.status) atomicAdd(p.status + kStatusDropped, 1);
    return;
  }
  const int e = p.topk_ids[route];
  // An earlier kept route of the same expert runs it.
  bool earlier = false;
  for (int r = lane; r < route; r += 32)
    earlier |= p.topk_ids[r] == e && !route_dropped(p.topk_ids, r, p.k, p.E);
  if (__any_sync(0xffffffffu, earlier)) return;
  int n = 0;
  for (int r0 = route; r0 < R; r0 += 32) {
    const int r = r0 + lane;
    const bool match = r < R && p.topk_ids[r] == e && !route_dropped(p.topk_ids, r, p.k, p.E);
    const uint32_t ballot = __ballot_sync(0xffffffffu, match);
    const int at = n + __popc(ballot & ((1u << lane) - 1u));
    if (match && at < kCols) c.route[at] = r;  // at most one route per token: n <= T <= 8
    n += __popc(ballot);
  }
  if (lane == 0) {
    c.n = n < kCols ? n : kCols;
    c.e = e;
  }
}

}  // namespace decode_gemv

// B, the columns' activation rows, goes through shared memory a chunk of kAhead k-blocks at a time:
// each column's values in K order (one row per column, 16 bytes of padding so that ldmatrix's
// eight rows fall in different banks), copied by 16-byte cp.async kBufs - 1 chunks ahead of their
// use; each lane reads its eight B registers of a k-block with two ldmatrix.x4. (Each lane loading
// its own eight 4-byte words from global memory made the GEMVs issue-bound: ncu at deepseek-v3
// T=1, issue slots 52%, DRAM 37%; packing them through registers one chunk ahead left the store
// waiting on those loads in 20% of the samples once the k-loop was lean: ncu, session 53.)
// kAhead: k-blocks of weights in flight per warp (a register ring of words and scales).
// kMinCtas: CTAs an SM must hold (the register cap): 5 x 4 warps so that deepseek-v3's 576 up
// CTAs at T=1 run in one round on 132 SMs; where the grid is small, a deeper ring instead.
// kSplit: K parts inside the CTA. Each part is a group of 4 warps over the same 64 rows and its
// own k-blocks (its own B buffers and barrier); the parts' sums meet in shared memory, added in
// part order, and part 0 stores them. Where the grid is small this multiplies the warps (and
// bytes) in flight per SM: qwen3-30b-a3b's T=1 gate/up has 192 CTAs of 4 warps on 132 SMs (ncu:
// DRAM 26%, 0.4 eligible warps per scheduler, docs/performance.md).
template <bool kUp, int kAhead, int kMinCtas, int kSplit = 1>
__global__ void __launch_bounds__(decode_gemv::kThreads * kSplit, kMinCtas)
decode_gemv_kernel(const DecodeGemvParams p) {
  using namespace decode_gemv;
  constexpr int kChunk = kAhead;  // k-blocks of B per shared-memory buffer (the ring's slot of a
                                  // k-block is then a compile-time index)
  // B buffers: three (two chunks in flight while one is read), two in the split kernels (static
  // shared memory stays under 48 KB).
  constexpr int kBufs = kSplit > 1 ? 2 : 3;
  constexpr int kRowBytes = kChunk * e2m1::kBlockK * 2 + 16;  // a column's chunk, padded
  __shared__ Columns cols;
  __shared__ alignas(16) uint8_t sb_all[kSplit][kBufs][kCols][kRowBytes];
  __shared__ alignas(16) float part_sums[kSplit > 1 ? kSplit - 1 : 1][kWarps][32][4];
  const int part = threadIdx.x / kThreads, pt = threadIdx.x % kThreads;  // K part, thread in it
  const int warp = pt / 32, lane = pt % 32;
  const int tile = blockIdx.x / 2, half = blockIdx.x % 2;
  auto& sb = sb_all[part];
  // This part's k-blocks [kb0, kb0 + nkb).
  const int part_kb = (p.KB + kSplit - 1) / kSplit;
  const int kb0 = part * part_kb, nkb = max(0, min(p.KB, kb0 + part_kb) - kb0);
  auto part_sync = [&] {  // the part's 128 threads (named barrier 1 + part)
    if constexpr (kSplit == 1) __syncthreads();
    else asm volatile("bar.sync %0, %1;\n" ::"r"(1 + part), "r"(kThreads) : "memory");
  };
  // The routing (up) or the intermediate (down) comes from the previous kernel. An early down
  // reads the routing before that wait: route_quant wrote it two kernels back, and this grid
  // starts only once every up CTA has passed its own wait on route_quant (PDL: the up triggers
  // after it), so those writes are complete. Only h, the up's output, needs the wait: the down
  // then finds its columns and issues its first weight loads while the up finishes.
  const bool early = !kUp && p.early;
  if (!early) cudaGridDependencySynchronize();
  if (threadIdx.x < 32) find_columns(p, blockIdx.y, cols, kUp && blockIdx.x == 0);
  __syncthreads();
  if (!early) cudaTriggerProgrammaticLaunchCompletion();
  const int e = cols.e, ncols = cols.n;
  if (e < 0) return;

  // The fill: a chunk of a column is kPieces 16-byte pieces; thread pt copies piece pt % kPieces of
  // columns pt / kPieces + j * kColStep (a warp copies whole 512-byte runs of one column). Columns
  // past ncols are not copied: their garbage only reaches accumulator columns never stored. Pieces
  // past K are zero-filled (the weights there are zero codes, and 0 x NaN would not be 0).
  constexpr int kPieces = kChunk * e2m1::kBlockK * 2 / 16;
  constexpr int kColStep = kThreads / kPieces, kPer = kCols / kColStep;
  static_assert(kThreads % kPieces == 0 && kCols % kColStep == 0, "fill: whole columns per pass");
  const int piece = pt % kPieces, col0 = pt / kPieces;
  const uint8_t* fsrc[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const int n = col0 + j * kColStep;
    const int r = cols.route[n < ncols ? n : 0];
    int64_t row = r;
    if constexpr (kUp) row = r / p.k + (r % p.k >= p.k_routed ? p.shared_row_offset : 0);
    fsrc[j] = p.a + row * p.lda + 2 * (int64_t(kb0) * e2m1::kBlockK + 8 * piece);
  }
  const uint32_t fdst = ptx::smem_addr(&sb[0][col0][16 * piece]);
  auto fetch = [&](int chunk) {  // chunk's copies into buffer chunk % kBufs (one group)
    if (chunk * kChunk < nkb) {  // (the k-blocks of a last chunk past this part's: never read)
      const int k = (kb0 + chunk * kChunk) * e2m1::kBlockK + 8 * piece;
      const int bytes = min(16, max(0, 2 * (p.K - k)));
      const uint32_t dst = fdst + uint32_t(chunk % kBufs) * (kCols * kRowBytes);
#pragma unroll
      for (int j = 0; j < kPer; ++j)
        if (col0 + j * kColStep < ncols)
          ptx::cp_async_16(dst + j * kColStep * kRowBytes,
                           fsrc[j] + int64_t(chunk) * (kChunk * e2m1::kBlockK * 2), bytes);
    }
    __pipeline_commit();
  };

  // A: this warp's 16 rows are warp 4 * half + warp of the block's 8 (thread t of its 256).
  // pw / ps: this thread's words and scales in k-block c * kChunk of the chunk c being computed,
  // advanced a chunk at a time, so that each load is one instruction with an immediate offset
  // (the address recomputed from e, tile and kb each time was ~24 instructions a k-block of ~137:
  // ncu, session 53).
  const int t = 128 * half + 32 * warp + lane;
  const uint8_t* blocks = p.w_blocks + ((int64_t(e) * p.NB + tile) * p.KB + kb0) * e2m1::kBlockBytes;
  const uint8_t* pw = blocks + e2m1::value_word_offset(t, 0);
  const uint8_t* ps = blocks + e2m1::kValueBytes + 8 * e2m1::thread_quad(t);
  uint4 words[kAhead];
  uint2 scales[kAhead];
  auto load = [&](int slot, int kb) {  // kb: relative to pw / ps
    words[slot] = ld_weights_v4(pw + kb * e2m1::kBlockBytes);
    scales[slot] = ld_weights_v2(ps + kb * e2m1::kBlockBytes);
  };
#pragma unroll
  for (int i = 0; i < kAhead; ++i)
    if (i < nkb) load(i, i);
  if (early) {  // B is h, which the up GEMV writes
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
  }
#pragma unroll
  for (int c = 0; c < kBufs - 1; ++c) fetch(c);
  __pipeline_wait_prior(kBufs - 2);  // chunk 0 is here
  part_sync();

  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};  // even / odd k16 steps
  const int chunks = (nkb + kChunk - 1) / kChunk;
  for (int c = 0; c < chunks; ++c) {
    // The buffer of chunk c + kBufs - 1 was last read in chunk c - 1, before the barrier.
    fetch(c + kBufs - 1);
    const uint32_t b_addr = ptx::smem_addr(&sb[c % kBufs][lane % 8][16 * (lane / 8)]);
    auto step = [&](int i, bool refill) {
      uint32_t a[e2m1::kSteps][4];
      e2m1::decode_words(words[i], scales[i], a, p.e2m1_scale_mul);
      if (refill) load(i, i + kAhead);  // refill the slot just taken
      const uint4 b01 = ldmatrix_x4(b_addr + i * e2m1::kBlockK * 2);       // k16 steps 0, 1
      const uint4 b23 = ldmatrix_x4(b_addr + i * e2m1::kBlockK * 2 + 64);  // steps 2, 3
      mma_bf16_16816(acc[0], a[0], b01.x, b01.y);
      mma_bf16_16816(acc[1], a[1], b01.z, b01.w);
      mma_bf16_16816(acc[0], a[2], b23.x, b23.y);
      mma_bf16_16816(acc[1], a[3], b23.z, b23.w);
    };
    // kChunk == kAhead: the ring's slot of k-block c * kChunk + i is i. Most chunks need no
    // bounds checks.
    if ((c + 2) * kChunk <= nkb) {  // every k-block of the chunk, and all of the next chunk's
#pragma unroll
      for (int i = 0; i < kChunk; ++i) step(i, true);
    } else {
#pragma unroll
      for (int i = 0; i < kChunk; ++i) {
        const int kb = c * kChunk + i;  // of this part's
        if (kb >= nkb) break;
        step(i, kb + kAhead < nkb);
      }
    }
    pw += kChunk * e2m1::kBlockBytes;
    ps += kChunk * e2m1::kBlockBytes;
    __pipeline_wait_prior(kBufs - 2);  // chunk c + 1 is here (this thread's copies)
    part_sync();  // ... and every thread's; this buffer is read by every warp of the part
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) acc[0][j] += acc[1][j];
  if constexpr (kSplit > 1) {  // the other parts' sums to part 0, added in part order
    if (part > 0) *reinterpret_cast<float4*>(part_sums[part - 1][warp][lane]) = make_float4(acc[0][0], acc[0][1], acc[0][2], acc[0][3]);
    __syncthreads();
    if (part > 0) return;
#pragma unroll
    for (int from = 0; from < kSplit - 1; ++from) {
      const float4 o = *reinterpret_cast<const float4*>(part_sums[from][warp][lane]);
      acc[0][0] += o.x;
      acc[0][1] += o.y;
      acc[0][2] += o.z;
      acc[0][3] += o.w;
    }
  }

  const int g = lane / 4, q = lane % 4;
  // acc: (row g, column 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1) of the warp's 16 rows.
  const int group = 4 * half + warp;                 // the 16-row group of the 128-row tile
  const int prow = tile * 128 + 16 * group + g;      // prepared row (rows prow, prow + 8)
  const int64_t rbase = int64_t(e) * p.NB * 128;
  const float f0 = p.row_scale[rbase + prow], f1 = p.row_scale[rbase + prow + 8];
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const int c = 2 * q + j;
    if (c >= ncols) continue;
    const int r = cols.route[c];
    if constexpr (kUp) {
      // Gate/up 8-row pairs: row g is the gate and row g + 8 the up of intermediate 8 group + g.
      const float bg = p.bias ? p.bias[rbase + prow] : 0.0f, bu = p.bias ? p.bias[rbase + prow + 8] : 0.0f;
      const float gate = acc[0][j] * f0 + bg, up = acc[0][2 + j] * f1 + bu;
      const float v = p.act_clamped ? swiglu_activation<true>(gate, up, p.act_alpha, p.act_limit)
                                    : swiglu_activation<false>(gate, up, p.act_alpha, p.act_limit);
      const int i = 64 * tile + 8 * group + g;
      *reinterpret_cast<__nv_bfloat16*>(p.h + int64_t(r) * p.ldh + 2 * int64_t(i)) = __float2bfloat16_rn(v);
    } else {
      // Paired rows: rows g and g + 8 are the adjacent outputs n, n + 1 (grouped_gemm.hpp).
      const int n = tile * 128 + 16 * group + 2 * g;
      if (n >= p.N) continue;
      const float w = p.weight_on_input && r % p.k < p.k_routed ? 1.0f : p.topk_weights[r];
      const float* b = p.bias ? p.bias + int64_t(e) * p.N + n : nullptr;
      const float va = (acc[0][j] * f0 + (b ? b[0] : 0.0f)) * w, vb = (acc[0][2 + j] * f1 + (b ? b[1] : 0.0f)) * w;
      if (p.deterministic) *reinterpret_cast<float2*>(p.out + int64_t(r) * p.N + n) = make_float2(va, vb);
      else ptx::red_add_v2(p.out + int64_t(r / p.k) * p.N + n, va, vb);
    }
  }
}

inline void launch_decode_gemv_impl(bool up, const DecodeGemvParams& p, int num_sms, cudaStream_t stream) {
  FMOE_REQUIRE(p.e2m1_scale_mul == e2m1::kScaleMul,
               "decode_gemv: e2m1_scale_mul must be %u (a parameter only so that the decode's "
               "multiply stays an IMAD), got %u", e2m1::kScaleMul, p.e2m1_scale_mul);
  const dim3 grid(2 * p.NB, p.T * p.k);
  // Up to T * k CTAs per half tile are launched; about one per hit expert runs. Many: hold five
  // CTAs an SM with a 4-deep weight ring, six past one round of five; few (under two per SM): an
  // 8-deep ring, and K split in the CTA (kSplit above; FMOE_GEMV_SPLIT overrides the split of the
  // few-CTA kernels).
  //
  // Past one round of 5 CTAs an SM both GEMVs hold 6 (78-80 registers, no spill). Measured on
  // H200, even loads, ABBA, layer ratios (docs/performance.md):
  // - the down (session 52, calls 6-7): 6 for every many-CTA down was 0.960-0.973 at deepseek-v3
  //   T=2-8 (1904-7448 CTAs), 0.85 at gpt-oss-120b T=4, but 1.02-1.15 slower at 288-512 CTAs
  //   (qwen3-235b-a22b T=1, qwen3.5-35b-a3b T=1-2), which fit one round of 5 either way. With
  //   this rule: 0.985-0.992 at deepseek-v3 T=2-8, 0.940-0.943 at gpt-oss-120b T=4.
  // - the up (session 53, call 5, once the cp.async B ring had freed its fill registers; at 6 it
  //   spilled before): 0.885-0.891 at qwen3-30b-a3b T=4, 0.894-0.896 at qwen3-235b-a22b T=2,
  //   0.96 at T=4, 0.94-0.95 at gpt-oss-120b T=2-4; 1.010-1.015 at deepseek-v3 T=2 and
  //   qwen3.5-35b-a3b T=8; 6 for every many-CTA up was mixed (0.76-1.16 by kernel).
  constexpr int kManyCtas = 5;  // CTAs an SM the many-CTA kernels hold within one round
  const int64_t running = int64_t(grid.x) * std::min(p.T * p.k, p.E);
  const bool many = running > 2 * int64_t(num_sms);
  const bool past_one_round = running > kManyCtas * int64_t(num_sms);
  const int split = knobs().gemv_split > 0 ? knobs().gemv_split : kDecodeGemvSplit;
  auto go = [&](auto kernel, int threads) {
    launch_pdl(kernel, grid, dim3(threads), 0, stream, p);
  };
  auto launch = [&](auto up_tag) {  // the same choice for both GEMVs
    constexpr bool kUp = decltype(up_tag)::value;
    constexpr int kT = decode_gemv::kThreads;
    constexpr auto many5 = decode_gemv_kernel<kUp, 4, kManyCtas>;
    constexpr auto many6 = decode_gemv_kernel<kUp, 4, kManyCtas + 1>;
    if (many) go(past_one_round ? many6 : many5, kT);
    else if (split == 4) go(decode_gemv_kernel<kUp, 4, 1, 4>, 4 * kT);
    else if (split == 2) go(decode_gemv_kernel<kUp, 8, 2, 2>, 2 * kT);
    else go(decode_gemv_kernel<kUp, 8, 2>, kT);
  };
  if (up) launch(std::true_type{});
  else launch(std::false_type{});
  FMOE_CHECK_LAUNCH(up ? "decode_gemv_kernel<up>" : "decode_gemv_kernel<down>", stream);
}

}  // namespace fusedmoe::detail
