// The grouped GEMM's mainloop parts: what fills a k-stage (weight loader x row loader) and what
// consumes it (MMA policy). A stage is (BLOCK_W = kWaves x 128 weight rows x 128 bytes) + (BLOCK_T
// rows x 128 bytes), both K-major with the 128-byte swizzle TMA writes and wgmma reads, plus the
// fp8 scales:
//   weights fp8_block: 128 K per stage, sb[w][16] = the weight scale of each 8-row group of wave w
//   weights bf16:       64 K per stage, no scales
//   weights e2m1:       64 K per stage: one prepared block per wave (e2m1_layout.hpp) by one bulk
//                       copy; the codes and their E4M3 block scales, read by plain loads
//   rows gathered:      cp.async of 16-byte chunks from the row of each column's token
//                       (+ sa[0][c] = its per-128 scale, fp8)
//   rows tma:           one TMA box of BLOCK_T compact rows (+ sa[0..1][c] = per-64 scales, fp8;
//                       tma_s128: sa[0][c] = the per-128 scale)
// With tokens_m (gemm_configs.def) the same stage is read with the operands swapped: activations
// as wgmma's A (M), each weight wave as its B (N).
// Contract between the parts: the producer's 128 threads call issue() of both loaders for every
// stage, then arrive on the stage's full barrier (thread 0 with the TMA bytes, and each of the 128
// by a cp.async arrival when Cfg::kCpAsync, else a plain one); the MMA reads only the stage and its
// own registers, and arrives on the stage's empty barrier as soon as its last read of the stage is
// done.
#pragma once

#include <cuda/ptx>

#include <type_traits>

#include "common/ptx/sm90_ptx.cuh"
#include "common/ptx/wgmma_bf16.cuh"
#include "common/ptx/wgmma_bf16_rs.cuh"
#include "common/ptx/wgmma_fp8.cuh"
#include "gemm/e2m1_layout.hpp"
#include "gemm/sm90_gemm_scheduler.cuh"

namespace fusedmoe::detail {

// ---- weight loader ----------------------------------------------------------------------------
template <class Cfg>
struct WeightLoader {
  // Stage kb of segment s: one 128-row weight box per wave by TMA (thread 0); fp8: the 16 group
  // scales of each wave by cp.async (one thread each; with one scale per 128-row tile every group
  // of the wave reads the same float).
  // wb_add: the weight tile s.wb + wb_add (a HalfTile pair's second tail).
  // blocks: k-blocks kb, kb + 1, ... in this stage (Cfg::kKBlocks; e2m1 one-wave configs only).
  __device__ static void issue(const GroupedGemmParams& p, const Segment& s, int kb,
                               typename Cfg::Stage& st, uint64_t* full, int tid, int wb_add = 0,
                               int blocks = 1) {
    namespace cptx = cuda::ptx;
    const int wb = s.wb + wb_add;
    if constexpr (Cfg::kE2M1) {
      // The prepared blocks of a weight tile are adjacent along k ([E, NB, KB] blocks): a stage's
      // k-blocks of one wave are one copy.
      if (tid == 0) {
#pragma unroll
        for (int w = 0; w < Cfg::kWaves; ++w) {
          const int64_t blk = (int64_t(s.e) * p.NB + wb * Cfg::kWaves + w) * p.KB + kb;
          const uint32_t bytes = e2m1::kBlockBytes * (Cfg::kKBlocks == 1 ? 1 : blocks);
          cptx::cp_async_bulk(cptx::space_cluster, cptx::space_global,
                              st.w + w * e2m1::kBlockBytes, p.w_blocks + blk * e2m1::kBlockBytes,
                              bytes, full);
        }
      }
      return;
    }
    if (tid == 0) {
#pragma unroll
      for (int w = 0; w < Cfg::kWaves; ++w) {
        const int32_t coords[2] = {kb * Cfg::BLOCK_K,
                                   s.e * p.n_rows + wb * Cfg::BLOCK_W + w * Cfg::WAVE_W};
        cptx::cp_async_bulk_tensor(cptx::space_cluster, cptx::space_global,
                                   st.w + w * Cfg::WAVE_W * 128, &p.w_desc, coords, full);
      }
    }
    if constexpr (Cfg::kFp8) {
      constexpr int kScales = Cfg::kGroupScales ? 16 : 1;  // p.sb_groups (checked at launch)
      if (tid < Cfg::kWaves * kScales) {
        const int w = tid / kScales, g = tid % kScales;
        const int64_t tile_kb = (int64_t(s.e) * p.NB + wb * Cfg::kWaves + w) * p.KB + kb;
        ptx::cp_async_4(ptx::smem_addr(&st.sb[w][g]), p.w_scale + tile_kb * kScales + g, 4);
      }
    }
  }
};

// ---- row loaders ------------------------------------------------------------------------------
// kCopyThreads: the producer threads that run the k-loop (128, or 32 with a lean producer).
template <class Cfg, GemmRows kRows = Cfg::kRows, int kCopyThreads = 128>
struct RowLoader;

// One row per token, gathered: route r of a column reads row r / k (+ shared_row_offset when r is
// a shared route). This thread copies 16-byte chunk (tid % 8) of rows tid / 8 + kRowStep j (16 with
// 128 copying threads, 4 with a lean producer's 32).
// The row addresses are formed once per tile (ncu: the 64-bit row * lda product and the parameter
// reloads per chunk and stage were ~15 of the producer's instructions per copy); a stage adds the
// k offset.
// NOTE: one TMA box per row (Hopper's TMA has no row gather) was measured slower on H100 at
// BLOCK_T=128 (T=2048: 189 vs 146 us for the projection GEMM).
template <class Cfg, int kCopyThreads>
struct RowLoader<Cfg, GemmRows::gathered, kCopyThreads> {
  static constexpr int kChunksPerThread = (Cfg::BLOCK_T * 8 + kCopyThreads - 1) / kCopyThreads;
  static constexpr int kRowStep = kCopyThreads / 8;  // rows between a thread's chunks
  const uint8_t* src[kChunksPerThread];  // this thread's chunk of each tile row, nullptr: absent
  const float* scale;                    // fp8: scales of column tid's row, nullptr: absent

  __device__ static int row_of(const GroupedGemmParams& p, int route) {
    if (route < 0) return -1;
    const int token = route / p.k;
    return route % p.k < p.k_routed ? token : token + p.shared_row_offset;
  }

  // Reads the tile's column routes from its meta slot (published, producer barrier passed).
  __device__ RowLoader(const GroupedGemmParams& p, const typename Cfg::TileMeta& m, int tid) {
#pragma unroll
    for (int j = 0; j < kChunksPerThread; ++j) {
      const int r = tid / 8 + kRowStep * j;
      const int row = r < Cfg::BLOCK_T ? row_of(p, m.col_route[r]) : -1;
      src[j] = row >= 0 ? p.a + int64_t(row) * p.lda + (tid % 8) * 16 : nullptr;
    }
    const int col_row = tid < Cfg::BLOCK_T ? row_of(p, m.col_route[tid]) : -1;
    scale = col_row >= 0 ? p.sa + int64_t(col_row) * p.sa_ld : nullptr;
  }

  // sub: the stage's k-block this is (its activation tile; Cfg::kKBlocks).
  __device__ void issue(const GroupedGemmParams& p, const Segment& s, int kb,
                        typename Cfg::Stage& st, uint64_t* full, int tid, int sub = 0) const {
    const int chunk = tid % 8;
    const int64_t k_off = int64_t(kb) * 128;
    // Zero-fill padding columns (beyond K) and absent rows: no garbage (or NaN codes) ever meets
    // a weight.
    const bool in_k = k_off + chunk * 16 < int64_t(p.K) * Cfg::kElemBytes;
    const uint32_t a_base = ptx::smem_addr(st.a + sub * Cfg::kABytes);
    // A half-height tile (HalfTile) reads rows [0, 64) only: the copies of the other 64 (all
    // absent, zero-filled) would keep its stages as long to fill as a full tile's. Told from this
    // thread's row 64 + tid / 8 (s.nrows or a flag held through the k-loop made ptxas spill): it
    // is absent in a half tile, and where it is absent in a full one (nrows <= 79) the rows this
    // skips are absent too, left with stale bytes; a tokens-as-M row only feeds its own outputs,
    // which the epilogues drop for an absent token. The same for the scale of an absent column.
    const bool half = HalfTile<Cfg>::kOn && p.narrow_tails && src[kChunksPerThread / 2] == nullptr;
#pragma unroll
    for (int j = 0; j < kChunksPerThread; ++j) {
      const int r = tid / 8 + kRowStep * j;
      if (r < Cfg::BLOCK_T && !(half && j >= kChunksPerThread / 2)) {
        const bool ok = src[j] != nullptr && in_k;
        ptx::cp_async_16(a_base + ptx::swizzle128_offset(r, chunk), ok ? src[j] + k_off : p.a,
                         ok ? 16 : 0);
      }
    }
    if constexpr (Cfg::kFp8) {
      // (column tid's own absence: `half` here says only that rows from 64 + tid / 8 are absent)
      if (tid < Cfg::BLOCK_T && !(half && scale == nullptr))
        ptx::cp_async_4(ptx::smem_addr(&st.sa[0][tid]), scale ? scale + kb : p.sa, scale ? 4 : 0);
    }
  }
};

// Compact rows, contiguous per tile: rows [row0, row0 + BLOCK_T) by one TMA box (thread 0). Rows
// past the expert's routes belong to the next expert (their columns are discarded by the
// epilogue); rows past the tensor's end arrive as zeros. fp8: the two per-64 scales (tma) or the
// one per-128 scale (tma_s128) of each real column by cp.async.
template <class Cfg, int kCopyThreads>
struct RowLoader<Cfg, GemmRows::tma, kCopyThreads> {
  __device__ RowLoader(const GroupedGemmParams&, const typename Cfg::TileMeta&, int) {}

  __device__ void issue(const GroupedGemmParams& p, const Segment& s, int kb,
                        typename Cfg::Stage& st, uint64_t* full, int tid, int sub = 0) const {
    namespace cptx = cuda::ptx;
    if (tid == 0) {
      const int32_t coords[2] = {kb * Cfg::BLOCK_K, s.row0};
      cptx::cp_async_bulk_tensor(cptx::space_cluster, cptx::space_global, st.a + sub * Cfg::kABytes,
                                 &p.a_desc, coords, full);
    }
    if constexpr (Cfg::kFp8) {
      constexpr int kBlocks = Cfg::kScaleBlocks, kCols = 128 / kBlocks;  // per stage, per scale
      if (tid < Cfg::BLOCK_T) {
        const bool ok = tid < s.nrows;
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) {
          const int blk = kBlocks * kb + b;
          // A K tail inside the last block has fewer blocks: clamp the read, zero the scale.
          const bool in_k = blk * kCols < p.K;
          const float* src = p.sa + (ok && in_k ? int64_t(s.row0 + tid) * p.sa_ld + blk : 0);
          ptx::cp_async_4(ptx::smem_addr(&st.sa[b][tid]), src, ok && in_k ? 4 : 0);
        }
      }
    }
  }
};

template <class Cfg, int kCopyThreads>
struct RowLoader<Cfg, GemmRows::tma_s128, kCopyThreads> : RowLoader<Cfg, GemmRows::tma, kCopyThreads> {
  using RowLoader<Cfg, GemmRows::tma, kCopyThreads>::RowLoader;
};

// ---- MMA policies -----------------------------------------------------------------------------
// Narrow tail tiles. An expert's last token tile is padded to BLOCK_T columns; where its routes
// fill at most a half (a quarter) of them, the weights-as-M policies run wgmma with N = BLOCK_T / 2
// (/ 4) on the first columns. The other accumulators keep the zeros the tile started with and
// their columns are absent, which every epilogue skips. At BLOCK_T = 128 an expert with 1.5 token
// tiles of routes on average (qwen3-30b-a3b at T = 2048) pays a half-empty tile in half of its
// experts. Measured on H100 against the same binary at full width (docs/performance.md, session
// 27): qwen3.5-35b-a3b's fp8 down GEMM 6.5% / 3.0% faster at T = 2048 / 8192, the NVFP4 down
// GEMMs 3-5%, the contest's NVFP4 grouped GEMM 1% (geomean). Against the code before (one k-loop):
// the fp8 GEMMs -1..-6%, but the e2m1 k-loop with the width in it lost 1-6% at full width, so
// the contest op is 2.3% slower (geomean) and the NVFP4 layer at T = 2048 1.4% faster.
// Left at full width, measured or not:
// - tokens as M: a consumer whose 64 tokens were all absent skipped its wgmmas. deepseek-v3's
//   T = 8192 gate/up GEMM ran 1.28x slower and qwen3-30b-a3b's T = 2048 one 1.07x (the
//   projection 2-3% faster). Probably the L2 reuse of the static round robin: the token tiles of
//   one weight tile run side by side on neighbouring CTAs and share its k-blocks in L2 while they
//   stay in step; a tile that finishes early moves its CTA ahead of its neighbours for good.
//   The two-wave configs run such a tail at half height instead (HalfTile,
//   sm90_gemm_scheduler.cuh).
// - bf16 weights: not measured (compute-bound at prefill, where that drift would cost most).
// - the fp8 two-wave swiglu tile with weights as M: its consumers sit at their register budget
//   (Mma's note), and the narrow variants made ptxas spill 196 bytes. The layer runs that tile
//   only where tokens as M cannot (a gate/up with more than two scales per wave).
// The width is chosen once per tile and the skeleton compiles a whole k-loop per width: chosen
// per stage from a value ptxas could not prove warp-uniform, it moved the ring's barrier addresses
// out of uniform registers (and the deepseek-v3 T = 8192 gate/up ran 1.30x slower).
template <class Cfg>
struct TileWidth {
  static constexpr bool kNarrow = Cfg::BLOCK_T >= 64 && !Cfg::kTokensM &&
                                  Cfg::kWeights != GemmWeights::bf16 &&
                                  !(Cfg::kFp8 && Cfg::kWaves == 2 && Cfg::kGroupScales);
  // log2(BLOCK_T / N) for a tile of nrows real columns, broadcast from lane 0 so that ptxas
  // knows it is the same in the whole warp.
  __device__ static int shift(const GroupedGemmParams& p, int nrows) {
    static_assert(kNarrow, "full-width configs run the k-loop without a width");
    if (!p.narrow_tails) return 0;
    const int sh = nrows <= Cfg::BLOCK_T / 4 ? 2 : nrows <= Cfg::BLOCK_T / 2 ? 1 : 0;
    return __shfl_sync(0xffffffffu, sh, 0);
  }
  // Calls f(std::integral_constant<int, shift>): one compiled variant per width.
  template <class F>
  __device__ __forceinline__ static void dispatch(int sh, F&& f) {
    if constexpr (kNarrow) {
      if (sh == 2) return f(std::integral_constant<int, 2>{});
      if (sh == 1) return f(std::integral_constant<int, 1>{});
    }
    f(std::integral_constant<int, 0>{});
  }
};

// The first n of a fragment's registers, as the fragment of a narrower wgmma (its layout is the
// wider one's first columns).
template <int n, int m>
__device__ __forceinline__ float (&first_regs(float (&d)[m]))[n] {
  static_assert(n <= m, "a narrower fragment");
  return *reinterpret_cast<float (*)[n]>(&d[0]);
}

// Accumulator fragment of a consumer warpgroup in one wave (64 weight rows x BLOCK_T columns), per
// thread: acc[w][4b + 2r + h] is row 16 * warp + lane / 4 + 8 r of its 64 in wave w, column
// 8 b + 2 (lane % 4) + h.
template <class Cfg, bool kFp8 = Cfg::kFp8>
struct Mma;

// FP8 with per-block promotion: each scale block of K (128, or 64 for the intermediate) is summed
// by wgmma into a scratch fragment, then added to the running sum times sb(row) * sa(column).
// Order within a block (as DeepGEMM's): issue the wgmmas, read the block's scales from shared
// memory while they run, wait, release the stage after its last block (everything it holds is in
// registers by then), promote. The two consumer warpgroups' promotions overlap each other's wgmmas.
// With two waves the scratch fragment serves them in turn (a second one would not fit the
// registers next to the two running sums), and the column scales are read after the wait, as the
// promotion consumes them (held through the wgmmas they were 32 more live registers: ptxas
// spilled), so the stage is released after the last wave's promotion instead of before it.
template <class Cfg>
struct Mma<Cfg, true> {
  static constexpr bool kPipelined = false;  // one stage at a time: stage()
  static constexpr int kSteps = Cfg::BLOCK_K / 32 / Cfg::kScaleBlocks;  // k32 wgmmas per block
  static constexpr int kCols = Cfg::BLOCK_T / 8;  // this thread's column pairs
  float part_full[Cfg::kAccRegs];  // (64 rows, BLOCK_T cols) for one scale block, before scaling

  __device__ void finish(const GroupedGemmParams&, const Segment&,
                         float (&)[Cfg::kWaves][Cfg::kAccRegs], int, int) {}

  // One k-stage at width BLOCK_T >> kShift (TileWidth).
  template <int kShift = 0>
  __device__ void stage(const typename Cfg::Stage& st, float (&acc)[Cfg::kWaves][Cfg::kAccRegs],
                        int wgc, int tid, uint64_t* empty) {
    constexpr int N = Cfg::BLOCK_T >> kShift, kRegs = N / 2, kColsN = kCols >> kShift;
    using W = ptx::WgmmaFp8<N>;
    // (64 rows, N cols) for one scale block, before scaling. The narrow widths have registers of
    // their own: one array shared by wgmmas of several widths made ptxas serialize them (C7511);
    // the full width keeps a member (a local one made the two-wave swiglu consumer spill 300 bytes).
    float part_narrow[kShift > 0 ? kRegs : 1];
    float(&part)[kRegs] = [&]() -> float(&)[kRegs] {
      if constexpr (kShift > 0) return part_narrow; else return part_full;
    }();
    const int warp = tid / 32, lane = tid % 32;
    const uint64_t desc_a = ptx::smem_desc_k128b(st.a);
#pragma unroll
    for (int wave = 0; wave < Cfg::kWaves; ++wave) {
      const uint64_t desc_w = ptx::smem_desc_k128b(st.w + (wave * Cfg::WAVE_W + wgc * 64) * 128);
#pragma unroll
      for (int blk = 0; blk < Cfg::kScaleBlocks; ++blk) {
#pragma unroll
        for (int i = 0; i < kRegs; ++i) ptx::fence_operand(part[i]);
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kSteps; ++kk)  // 32 bytes of K = 2 in descriptor units
          W::mma(desc_w + 2 * (blk * kSteps + kk), desc_a + 2 * (blk * kSteps + kk), part, kk > 0);
        ptx::wgmma_commit();
        // While the wgmmas run: this thread's column scales (adjacent pairs, 8-byte loads; one wave
        // only) and row scales. Per 8-row group (the layer's gate/up pairs: the thread's two rows
        // differ), or one per tile (DeepSeek's 128x128 blocks: both rows share it, folded into the
        // column scale).
        constexpr bool kEarly = Cfg::kWaves == 1;
        auto col_scales = [&](int b) {
          return *reinterpret_cast<const float2*>(&st.sa[blk][8 * b + 2 * (lane % 4)]);
        };
        float2 sa[kEarly ? kColsN : 1];
        if constexpr (kEarly) {
#pragma unroll
          for (int b = 0; b < kColsN; ++b) sa[b] = col_scales(b);
        }
        float sb_a, sb_b;
        if constexpr (Cfg::kGroupScales) {
          sb_a = st.sb[wave][(4 * wgc + warp) * 2];
          sb_b = st.sb[wave][(4 * wgc + warp) * 2 + 1];
        } else {
          sb_a = sb_b = st.sb[wave][0];
        }
        ptx::wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < kRegs; ++i) ptx::fence_operand(part[i]);
        const bool last = wave == Cfg::kWaves - 1 && blk == Cfg::kScaleBlocks - 1;
        if (kEarly && last) cuda::ptx::mbarrier_arrive(empty);
#pragma unroll
        for (int b = 0; b < kColsN; ++b) {
          const float2 sab = kEarly ? sa[kEarly ? b : 0] : col_scales(b);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float s = h == 0 ? sab.x : sab.y;
            float* a = acc[wave];
            if constexpr (Cfg::kGroupScales) {
              a[4 * b + h] = fmaf(part[4 * b + h], sb_a * s, a[4 * b + h]);
              a[4 * b + 2 + h] = fmaf(part[4 * b + 2 + h], sb_b * s, a[4 * b + 2 + h]);
            } else {
              const float sc = sb_a * s;
              a[4 * b + h] = fmaf(part[4 * b + h], sc, a[4 * b + h]);
              a[4 * b + 2 + h] = fmaf(part[4 * b + 2 + h], sc, a[4 * b + 2 + h]);
            }
          }
        }
        if (!kEarly && last) cuda::ptx::mbarrier_arrive(empty);
      }
    }
  }
};

// FP8 with tokens as wgmma's M side (tokens_m, prefill): consumer warpgroup c multiplies its 64
// token rows (A: activations [64 c, 64 c + 64) of the stage) by each 128-row weight wave (B: the
// wave's rows as N). Fragment: acc[w][4b + 2r + h] is token 64 c + 16 warp + lane/4 + 8r of the
// tile, weight row 8b + 2(lane%4) + h of wave w. The promotion scales a thread's two token rows by
// sa(token) * sb: sb is one value per wave (the combine GEMMs' 128x128 blocks) or, for the swiglu
// GEMM, one per 64-row half (gate rows, then up rows in the layer's 8-row interleave: groups 0
// and 1 of the wave's 16, which the host checked are the halves' only values), so each block costs
// 4 products and the FMAs, against 32 column scales and 32-64 products with weights as M.
template <class Cfg>
struct MmaTokensM {
  static constexpr bool kPipelined = false;  // one stage at a time: stage()
  static constexpr int kSteps = Cfg::BLOCK_K / 32 / Cfg::kScaleBlocks;  // k32 wgmmas per block
  float part[Cfg::kAccRegs];

  __device__ void finish(const GroupedGemmParams&, const Segment&,
                         float (&)[Cfg::kWaves][Cfg::kAccRegs], int, int) {}

  __device__ void stage(const typename Cfg::Stage& st, float (&acc)[Cfg::kWaves][Cfg::kAccRegs],
                        int wgc, int tid, uint64_t* empty) {
    const int warp = tid / 32, lane = tid % 32;
    const int t0 = 64 * wgc + 16 * warp + lane / 4;  // this thread's token rows t0, t0 + 8
    const uint64_t desc_a = ptx::smem_desc_k128b(st.a + 64 * wgc * 128);
#pragma unroll
    for (int wave = 0; wave < Cfg::kWaves; ++wave)
#pragma unroll
      for (int blk = 0; blk < Cfg::kScaleBlocks; ++blk)
        block(st, desc_a, wave, blk, t0, acc[wave],
              wave == Cfg::kWaves - 1 && blk == Cfg::kScaleBlocks - 1 ? empty : nullptr);
  }

  // A half-height tile (HalfTile): the tile's first 64 tokens, consumer c multiplying them by
  // wave c alone into acc_c (its one accumulator). The same wgmmas and promotions as the full
  // tile's consumer 0 runs for these tokens, so each value comes out bit for bit the same.
  __device__ void stage_half(const typename Cfg::Stage& st, float (&acc_c)[Cfg::kAccRegs], int wgc,
                             int tid, uint64_t* empty) {
    static_assert(Cfg::kWaves == 2, "one wave per consumer");
    const int warp = tid / 32, lane = tid % 32;
    const uint64_t desc_a = ptx::smem_desc_k128b(st.a);
#pragma unroll
    for (int blk = 0; blk < Cfg::kScaleBlocks; ++blk)
      block(st, desc_a, wgc, blk, 16 * warp + lane / 4, acc_c,
            blk == Cfg::kScaleBlocks - 1 ? empty : nullptr);
  }

 private:
  // One scale block of K: 64 tokens (desc_a) x weight wave `wave`, summed into part, promoted
  // into a (this thread's token rows t0, t0 + 8); `empty` set: the stage's last read by this
  // thread, handed back after the wait.
  __device__ __forceinline__ void block(const typename Cfg::Stage& st, uint64_t desc_a, int wave,
                                        int blk, int t0, float (&a)[Cfg::kAccRegs], uint64_t* empty) {
    using W = ptx::WgmmaFp8<Cfg::WAVE_W>;
    const uint64_t desc_w = ptx::smem_desc_k128b(st.w + wave * Cfg::WAVE_W * 128);
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(part[i]);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {  // 32 bytes of K = 2 in descriptor units
      const int k2 = 2 * (blk * kSteps + kk);
      W::mma(desc_a + k2, desc_w + k2, part, kk > 0);
    }
    ptx::wgmma_commit();
    // While the wgmmas run: the two token scales and the wave's gate and up scales (one
    // value for the combine GEMMs' 128x128 blocks).
    const float sa0 = st.sa[blk][t0], sa1 = st.sa[blk][t0 + 8];
    const float sg = st.sb[wave][0], su = Cfg::kGroupScales ? st.sb[wave][1] : sg;
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(part[i]);
    // Everything this thread reads of the stage is in registers after the last wait.
    if (empty != nullptr) cuda::ptx::mbarrier_arrive(empty);
    const float g0 = sa0 * sg, g1 = sa1 * sg, u0 = sa0 * su, u1 = sa1 * su;
#pragma unroll
    for (int b = 0; b < Cfg::kAccRegs / 4; ++b) {
      // Weight rows 8b..8b+7 of the wave: gate rows for even b, up rows for odd b.
      const float s0 = b % 2 == 0 ? g0 : u0, s1 = b % 2 == 0 ? g1 : u1;
      a[4 * b] = fmaf(part[4 * b], s0, a[4 * b]);
      a[4 * b + 1] = fmaf(part[4 * b + 1], s0, a[4 * b + 1]);
      a[4 * b + 2] = fmaf(part[4 * b + 2], s1, a[4 * b + 2]);
      a[4 * b + 3] = fmaf(part[4 * b + 3], s1, a[4 * b + 3]);
    }
  }
};

// BF16: wgmma accumulates straight into the running sums (zeroed at the tile's start); every
// wave's wgmmas go out as one batch.
template <class Cfg>
struct Mma<Cfg, false> {
  static constexpr bool kPipelined = false;  // one stage at a time: stage()
  __device__ void finish(const GroupedGemmParams&, const Segment&,
                         float (&)[Cfg::kWaves][Cfg::kAccRegs], int, int) {}

  __device__ void stage(const typename Cfg::Stage& st, float (&acc)[Cfg::kWaves][Cfg::kAccRegs],
                        int wgc, int tid, uint64_t* empty) {
    using W = ptx::WgmmaBf16<Cfg::BLOCK_T>;
    const uint64_t desc_a = ptx::smem_desc_k128b(st.a);
#pragma unroll
    for (int w = 0; w < Cfg::kWaves; ++w)
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(acc[w][i]);
    ptx::wgmma_fence();
#pragma unroll
    for (int w = 0; w < Cfg::kWaves; ++w) {
      const uint64_t desc_w = ptx::smem_desc_k128b(st.w + (w * Cfg::WAVE_W + wgc * 64) * 128);
#pragma unroll
      for (int kk = 0; kk < Cfg::BLOCK_K / 16; ++kk)  // k16 = 32 bytes = 2 descriptor units
        W::mma(desc_w + 2 * kk, desc_a + 2 * kk, acc[w], 1);
    }
    ptx::wgmma_commit();
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int w = 0; w < Cfg::kWaves; ++w)
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(acc[w][i]);
    cuda::ptx::mbarrier_arrive(empty);
  }
};

// NVFP4 weights (e2m1) x bf16 activations, weights as wgmma's M side with A from registers: each
// thread decodes its fragments of every wave's block (one 16-byte and one 8-byte shared load,
// e2m1_layout.hpp) into bf16 values * scales * 2^-26, exact, and the wgmmas accumulate straight
// into the running sums. finish() multiplies each row by its global scale * 2^26
// (GroupedGemmParams::row_scale).
// Software-pipelined (kPipelined: the skeleton drives decode / issue / retire): a register operand
// must not change while its wgmma runs, so the fragments are double-buffered, and the next
// (stage, wave) unit is decoded into one buffer while this unit's wgmmas read the other. The
// decode is ~70 instructions per thread and unit (17 a word, session 51), the wgmmas' latency
// about as long at decode sizes: done in turn (decode, issue, wait) the two only added up. One
// wave's fragments per buffer (not a whole stage's) keep the two-wave configs inside their
// registers.
template <class Cfg>
struct MmaE2M1 {
  static constexpr bool kPipelined = true;
  static_assert(Cfg::kWaves <= 2, "e2m1: the skeleton's unit order covers one or two waves");
  uint32_t frag[2][e2m1::kSteps][4];  // (buffer, k16 step, wgmma register)
  uint32_t scale_mul = e2m1::kScaleMul;  // consume sets it from the kernel parameter (scale_pair)

  template <int kBuf>
  __device__ void decode(const typename Cfg::Stage& st, int wave, int wgc, int tid) {
    e2m1::decode_fragments(st.w + wave * e2m1::kBlockBytes, 128 * wgc + tid, frag[kBuf], scale_mul);
  }

  template <int kBuf, int kWave, int kShift = 0>
  __device__ void issue(const typename Cfg::Stage& st, float (&acc)[Cfg::kWaves][Cfg::kAccRegs]) {
    constexpr int N = Cfg::BLOCK_T >> kShift;  // TileWidth
    using W = ptx::WgmmaBf16RegA<N>;
    // The activations (wgmma's B): with two k-blocks a stage, buffer kBuf's block is the stage's
    // block kBuf (consume's unit order).
    constexpr int kSub = Cfg::kKBlocks == 2 ? kBuf : 0;
    const uint64_t desc_a = ptx::smem_desc_k128b(st.a + kSub * Cfg::kABytes);
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(acc[kWave][i]);
    ptx::wgmma_fence();
#pragma unroll
    for (int step = 0; step < e2m1::kSteps; ++step)  // k16 = 32 bytes = 2 descriptor units
      W::mma(frag[kBuf][step], desc_a + 2 * step, first_regs<N / 2>(acc[kWave]), 1);
    ptx::wgmma_commit();
  }

  // Waits for the wgmmas issue<kBuf, kWave>() started; hands their stage back if `empty` is set.
  template <int kBuf, int kWave>
  __device__ void retire(float (&acc)[Cfg::kWaves][Cfg::kAccRegs], uint64_t* empty) {
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(acc[kWave][i]);
    // The buffer stays live up to here, so it can't share registers with the other one while the
    // wgmmas read it.
#pragma unroll
    for (int step = 0; step < e2m1::kSteps; ++step)
#pragma unroll
      for (int r = 0; r < 4; ++r) asm volatile("" ::"r"(frag[kBuf][step][r]) : "memory");
    if (empty != nullptr) cuda::ptx::mbarrier_arrive(empty);
  }

  // The tile's per-row factors (this thread's rows r0, r0 + 8 of each wave), loaded as the tile
  // starts so that finish() does not wait on global memory (ncu, deepseek-v3 T=1 down: the
  // multiply by a factor loaded after the mainloop was among the most sampled stalls).
  float row_factor[Cfg::kWaves][2];
  __device__ void begin(const GroupedGemmParams& p, const Segment& s, int wgc, int tid) {
    const int warp = tid / 32, lane = tid % 32;
#pragma unroll
    for (int w = 0; w < Cfg::kWaves; ++w) {
      const int64_t row = (int64_t(s.e) * p.NB + s.wb * Cfg::kWaves + w) * 128 + 64 * wgc +
                          16 * warp + lane / 4;
      row_factor[w][0] = p.row_scale[row];
      row_factor[w][1] = p.row_scale[row + 8];
    }
  }

  // Fragment: acc[w][4b + 2r + h] is row 16 warp + lane / 4 + 8 r of this warpgroup's 64 in wave w.
  __device__ void finish(const GroupedGemmParams&, const Segment&,
                         float (&acc)[Cfg::kWaves][Cfg::kAccRegs], int, int) {
#pragma unroll
    for (int w = 0; w < Cfg::kWaves; ++w)
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) acc[w][i] *= row_factor[w][(i / 2) % 2];
  }
};

}  // namespace fusedmoe::detail
