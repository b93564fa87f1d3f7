// The grouped GEMM engine's kernel skeleton (contract: grouped_gemm.hpp). It only wires roles and
// rings; the parts are swapped in by the config:
//   TileScheduler   sm90_gemm_scheduler.cuh   which tile next, its columns (meta ring)
//   WeightLoader    sm90_gemm_mainloop.cuh    fp8_block (TMA + group scales) | bf16 (TMA)
//   RowLoader       sm90_gemm_mainloop.cuh    gathered (cp.async) | tma (compact rows)
//   Mma             sm90_gemm_mainloop.cuh    fp8 with per-block promotion | bf16
//   Epilogue        sm90_gemm_epilogue.cuh    combine | swiglu
// Roles: warpgroup 0 produces (walks the tiles, publishes each tile's meta slot, fills a
// kStages-deep k-stage ring), warpgroups 1-2 consume (64 weight rows each, or with tokens_m 64
// tokens each: MMA per stage, then the epilogue from registers and the meta slot). A tile has kWaves 128-row weight waves: each k-stage
// holds all of them, and every consumer runs its 64 rows of each wave in turn (its own
// accumulator per wave); a two-wave tokens_m tail of <= 64 tokens runs at half height, consumer
// c taking wave c (HalfTile). Persistent: one CTA per SM (two for the configs that say so), launched with PDL.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda/ptx>
#include <cuda_runtime.h>

#include <type_traits>

#include "common/cuda_check.hpp"
#include "fusedmoe/error.hpp"
#include "common/launch.hpp"
#include "gemm/sm90_gemm_epilogue.cuh"
#include "gemm/sm90_gemm_mainloop.cuh"
#include "gemm/sm90_gemm_scheduler.cuh"

namespace fusedmoe::detail {

template <int kBlockT, int kWaves_, int kStages_, GemmWeights kWeights_, GemmRows kRows_,
          GemmEpilogue kEpi_, GemmOperands kOperands_ = GemmOperands::weights_m, int kCtas_ = 1,
          int kKBlocks_ = 1>
struct GemmConfig {
  static constexpr GemmWeights kWeights = kWeights_;
  // Tokens as wgmma's M side (64 per consumer warpgroup), each weight wave its N.
  static constexpr bool kTokensM = kOperands_ == GemmOperands::tokens_m;
  static constexpr GemmRows kRows = kRows_;
  // Compact rows by one TMA box per stage (both tma forms; they differ in the fp8 scales).
  static constexpr bool kTmaRows = kRows != GemmRows::gathered;
  static constexpr GemmEpilogue kEpi = kEpi_;
  static constexpr bool kFp8 = kWeights == GemmWeights::fp8_block;
  // NVFP4 weights decoded in registers (e2m1_layout.hpp); activations and intermediate bf16.
  static constexpr bool kE2M1 = kWeights == GemmWeights::e2m1;
  static constexpr int kElemBytes = kFp8 ? 1 : 2;  // activation bytes
  static constexpr int kWaves = kWaves_;
  static constexpr int WAVE_W = 128;                // weight rows per wave (2 warpgroups x m64)
  static constexpr int BLOCK_W = WAVE_W * kWaves;   // weight rows per tile
  static constexpr int BLOCK_T = kBlockT;           // routes per tile (wgmma N)
  static constexpr int BLOCK_K = 128 / kElemBytes;  // one 128-byte swizzle row per k-block
  // k-blocks per stage (gemm_configs.def: kblocks): a stage holds blocks kb, kb + 1 of a segment
  // (its last stage only kb where the segment's count is odd), the activations of each in a
  // swizzled tile of their own and the e2m1 weights as adjacent prepared blocks.
  static constexpr int kKBlocks = kKBlocks_;
  static constexpr int kStages = kStages_;
  static constexpr int kMetaStages = 2;             // tiles the producer may run ahead
  static constexpr int kConsumerWGs = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  // per wave and consumer: (64 weight rows, BLOCK_T tokens) or, tokens_m, (64 tokens, 128 weight
  // rows) fp32 / 128 threads: BLOCK_T / 2 either way (tokens_m has BLOCK_T = 128)
  static constexpr int kAccRegs = BLOCK_T / 2;
  // fp8 activation scales per stage: gathered token rows are quantized per 128 columns, the
  // layer's intermediate per 64 (tma rows) or per 128 (tma_s128).
  static constexpr int kScaleBlocks = !kFp8 ? 0 : kRows == GemmRows::tma ? 2 : 1;
  // fp8 weight scales: one per 8-row group (the swiglu GEMM's gate/up pairs come from different
  // 128-row blocks) or one per 128x128 block (GroupedGemmParams::sb_groups 16 or 1, checked at
  // launch).
  static constexpr bool kGroupScales = kEpi == GemmEpilogue::swiglu;
  // Fast mode's bf16 rows of the two-wave tokens-as-M down GEMM (scales per 128) leave through
  // 64 KB of staging by TMA tensor stores, in slot order (GroupedGemmParams::sorted_rows,
  // Epilogue::store_rows_staged). The staging takes a fourth k-stage's room: 3 stages measured
  // no slower at T=8192 (docs/performance.md, session 38, call 7).
  static constexpr bool kStagedRows = gemm_staged_rows(kOperands_, kEpi, kWaves, kRows, kStages);
  // The producer arrives per thread through cp.async when it copies anything with it.
  static constexpr bool kCpAsync = kRows == GemmRows::gathered || kFp8;
  // Where thread 0's TMA copies are a k-stage's only bytes (bf16 / e2m1 weights, TMA rows: the
  // down GEMMs), GroupedGemmParams::lean_producer leaves the k-loop to the producer's first warp
  // (the layer's rule, layer_lean_producer, or FMOE_LEAN_PRODUCER; ncu, session 48: the four producer
  // warps' ring polling was 11% of the NVFP4 down GEMM's instructions at T=128). Gathered rows are not lean: one warp holding the
  // row pointers of a 16- or 32-token tile (4 or 8 a lane) spilled 68-238 bytes at the two-CTA
  // configs' 56 producer registers.
  static constexpr bool kLeanCapable = !kFp8 && kRows != GemmRows::gathered;
  // ptxas fits each role's code into its setmaxnreg budget (ptxas -v / --warn-on-spills): the
  // gathered-rows producer spilled 40 bytes at 56 (8 chunk rows + the tile walk) and nothing at
  // 72, which leaves the consumers 216: enough for one wave's two fragments, and for two waves'
  // three (column scales read late, see Mma). The tma-rows producer fits 56, and the two-wave
  // combine consumer needs the 224 that leaves (16 bytes spilled at 216).
  // Two CTAs per SM (gemm_configs.def: the e2m1 decode tiles) share the register file: each is
  // launched with 80 a thread, and setmaxnreg moves registers only inside the CTA's own pool
  // (an increase past it waits forever): 88 for the consumers (one wave: 8-16 accumulators and
  // two fragment buffers of 16), 56 for the producer (48 spilled 8-12 bytes of the gathered
  // walk). The BLOCK_T = 32 swiglu consumer spills 16 bytes at 88, outside its mainloop (saved
  // once per tile before it, read back in the epilogue: ptxas warns), and still measured 1.13x
  // faster than one CTA an SM (qwen3-30b-a3b T=128 gate/up, docs/performance.md).
  static constexpr int kCtasPerSm = kCtas_;
  static constexpr bool kBigConsumer = kWaves == 2 && kTmaRows;
  static constexpr int kProducerRegs = kCtasPerSm == 2 ? 56 : kBigConsumer ? 56 : 72;
  static constexpr int kConsumerRegs = kCtasPerSm == 2 ? 88 : kBigConsumer ? 224 : 216;
  // Registers a thread gets at launch with kCtasPerSm CTAs of kThreads on an SM (warps allocate
  // in units of 8 a thread); the setmaxnreg split must fit in them.
  static constexpr int kLaunchRegs = 65536 / (kThreads * kCtas_) / 8 * 8;
  static constexpr int kMaxExperts = kGemmMaxExperts;
  // Decode sizes (BLOCK_T <= 64) can build the schedule inside the kernel from up to this many
  // routes (their ids staged in shared memory): one launch fewer.
  static constexpr int kFusedRoutes = kBlockT <= 64 ? kMaxFusedRoutes : 0;
  // Weight and activation bytes of one k-block; the TMA bytes of a stage holding `blocks` of them.
  static constexpr uint32_t kWBytes = kE2M1 ? kWaves * e2m1::kBlockBytes : BLOCK_W * 128;
  static constexpr uint32_t kABytes = BLOCK_T * 128;
  static constexpr uint32_t tma_bytes(int blocks) {
    return blocks * (kWBytes + (kTmaRows ? kABytes : 0));
  }

  struct alignas(1024) Stage {
    // Activations first: their size is a multiple of 1024, so both swizzled tiles stay aligned
    // (the e2m1 weights are read by plain loads and need 16).
    // Per k-block (kKBlocks of each, in k order):
    uint8_t a[kKBlocks * kABytes];                 // (BLOCK_T, 128 B) activations, 128B swizzle
    uint8_t w[kKBlocks * kWBytes];                 // (BLOCK_W, 128 B) weights, same swizzle;
                                                   // e2m1: kWaves prepared blocks
    float sa[kScaleBlocks > 0 ? kScaleBlocks : 1][BLOCK_T];  // fp8: per (scale block, column)
    float sb[kWaves][16];                          // fp8: weight scale per wave and 8-row group
  };
  struct TileMeta {
    Segment seg;
    int32_t col_route[BLOCK_T];  // route of each column, -1: absent
    alignas(8) int32_t col_out[BLOCK_T];  // combine: output row of each column (route / k, or the
                                          // route in deterministic mode), -1: absent
    alignas(8) float col_weight[BLOCK_T];  // combine: routing weight of each column
  };
  struct Staging {  // swiglu: a weights-as-M tile of the intermediate on its way out; amax exchanges
    alignas(16) uint8_t tile[BLOCK_T][64 * kElemBytes];
    float amax[8][BLOCK_T];
    float scale[BLOCK_T], inv[BLOCK_T];
    int last;  // split K: this part arrived last
  };
  // kStagedRows: a tile's bf16 outputs as 4 boxes of (128 rows, 64 outputs = 128 bytes), each
  // with the 128-byte swizzle the TMA store undoes (16-byte chunk j of row c at chunk j ^ c % 8):
  // a warp's 8-byte stores (8 rows x 32 bytes) take two wavefronts.
  struct RowStaging {
    alignas(1024) uint8_t box[4][BLOCK_T][128];
  };
  struct SharedStorage {
    Stage stages[kStages];
    TileMeta meta[kMetaStages];
    int32_t tile_offsets[kMaxExperts + 1];   // the schedule, copied (or built) once per CTA:
    int32_t route_offsets[kMaxExperts + 1];  // the tile walk's search runs on shared memory
    int32_t counts[kMaxExperts];
    // HalfTile: the walk's items per expert, scanned
    int32_t item_offsets[kTokensM && kWaves == 2 ? kMaxExperts + 1 : 1];
    int32_t ids[kFusedRoutes > 0 ? kFusedRoutes : 1];  // fused schedule: each route's expert
    int32_t warp_count[4];                             // fused schedule: matches per producer warp
    int32_t fetched;                                   // dynamic fetching: the producer's next tile
    typename cub::BlockScan<int, kThreads>::TempStorage scan;
    std::conditional_t<kEpi == GemmEpilogue::swiglu, Staging,
                       std::conditional_t<kStagedRows, RowStaging, char>> staging;
    uint64_t full[kStages];        // producer -> consumers: TMA bytes + 128 arrivals (cp.async or plain)
    uint64_t empty[kStages];       // consumers -> producer: one arrival per consumer thread
    uint64_t meta_full[kMetaStages];   // producer -> consumers: 128 arrivals (each releases its writes)
    uint64_t meta_empty[kMetaStages];  // consumers -> producer: 256 arrivals after the epilogue
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  static_assert(BLOCK_T % 16 == 0, "wgmma N: a multiple of 16 here");
  static_assert(!kE2M1 || (!kTokensM && BLOCK_K == e2m1::kBlockK),
                "e2m1: weights as wgmma's M side (A from registers), 64 K per stage");
  static_assert(kKBlocks == 1 || (kKBlocks == 2 && kE2M1 && kWaves == 1),
                "two k-blocks per stage: one-wave e2m1 configs (the unit order of consume)");
  static_assert(!kTokensM || (BLOCK_T == 128 && kFp8),
                "tokens_m: fp8 weights and 128-token tiles (2 consumers x m64) only");
  static_assert(kABytes % 1024 == 0, "activation tile must keep stages 1024-aligned");
  static_assert(kCtasPerSm == 1 || kCtasPerSm == 2, "one or two CTAs per SM");
  // 228 KB of shared memory per SM, 1 KB of it reserved per CTA.
  static_assert(kSmemBytes <= (kCtasPerSm == 1 ? 227 * 1024 : 113 * 1024),
                "shared memory budget of one SM exceeded");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= kLaunchRegs * kThreads,
                "setmaxnreg split exceeds the registers the CTA is launched with");
};

// A position in a ring of mbarrier-guarded slots.
template <int kSlots>
struct RingPos {
  int idx = 0;
  uint32_t phase = 0;
  __device__ void advance() {
    if (++idx == kSlots) {
      idx = 0;
      phase ^= 1;
    }
  }
};

__device__ __forceinline__ void wait_barrier(uint64_t* bar, uint32_t parity) {
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity)) {
  }
}

// The same for a wait that is usually long (the e2m1 producer on a full ring: the consumers set
// the rate): the thread is suspended until the phase completes or up to 10 us passes. Without
// the hint the try_wait came back 7.7 times per wait (ncu, deepseek-v3 T=1 down), ~7% of the
// kernel's instructions issued in the retry loop. Measured on H100 (docs/performance.md): the
// layer's time unchanged within 2% at T=1..128, so those retries were not what limits it.
__device__ __forceinline__ void wait_barrier_long(uint64_t* bar, uint32_t parity) {
  constexpr uint32_t kSuspendNs = 10000;
  while (!cuda::ptx::mbarrier_try_wait_parity(bar, parity, kSuspendNs)) {
  }
}

// ---- producer: walks the tiles; thread 0 issues the TMA, all 128 the cp.async copies ---------
template <class Cfg>
__device__ __forceinline__ void produce(const GroupedGemmParams& p, typename Cfg::SharedStorage& ss, int tid) {
  namespace cptx = cuda::ptx;
  TileScheduler<Cfg> sched(p, ss, blockIdx.x, gridDim.x, &ss.fetched);
  RingPos<Cfg::kStages> stage;
  RingPos<Cfg::kMetaStages> meta;
  Segment s;
  for (;;) {
    const bool more = sched.next(s, tid);
    wait_barrier(&ss.meta_empty[meta.idx], meta.phase ^ 1);  // first lap passes at once
    typename Cfg::TileMeta& m = ss.meta[meta.idx];
    if (!more) {
      if (tid == 0) m.seg.e = -1;
      cptx::mbarrier_arrive(&ss.meta_full[meta.idx]);
      break;
    }
    publish_columns<Cfg>(p, ss, s, m, tid);
    // A pair item (HalfTile) fills two stages per k-block: weight tile wb's, then wb + 1's. One
    // flat loop (a nested one made the gathered producer spill at its 72 registers).
    const int pair = HalfTile<Cfg>::kOn ? s.pair : 0;
    // (kKBlocks: a stage per kKBlocks k-blocks, the last one with what is left)
    const int units = ((s.kb1 - s.kb0 + Cfg::kKBlocks - 1) / Cfg::kKBlocks) << pair;
    auto k_loop = [&](const auto& rows) {
      for (int u = 0; u < units; ++u) {
        const int kb = s.kb0 + (u >> pair) * Cfg::kKBlocks;
        const int blocks = Cfg::kKBlocks == 1 ? 1 : min(Cfg::kKBlocks, s.kb1 - kb);
        if constexpr (Cfg::kE2M1 && Cfg::kRows == GemmRows::gathered && Cfg::BLOCK_T <= 32) {
          // The 4-bit gate/up at decode sizes: the consumers set the rate, so the producer mostly
          // waits here. One warp polls; the other three sleep at named barrier 3 (no issue slots)
          // until it passes. ncu (session 49, deepseek-v3 T=128): the four warps' retry loop ran
          // 30 M times, ~9% of the GEMM's instructions, on the schedulers the decoding consumers
          // need. Measured on H200 (session 49, call 8, even loads): the gate/up 0.971-0.974 at
          // T=32 / 128 (qwen3-30b-a3b, qwen3.5-35b-a3b, deepseek-v3), the layer 0.982-0.985; at
          // BLOCK_T=128 (qwen3-30b-a3b T=2048) 1.009, so wider tiles keep four polling warps. No
          // thread can fall a phase behind: all 128 pass the barrier together, each stage.
          if (tid < 32) wait_barrier_long(&ss.empty[stage.idx], stage.phase ^ 1);
          asm volatile("bar.sync 3, 128;\n" ::: "memory");
        } else if constexpr (Cfg::kE2M1) {
          wait_barrier_long(&ss.empty[stage.idx], stage.phase ^ 1);
        } else {
          wait_barrier(&ss.empty[stage.idx], stage.phase ^ 1);
        }
        typename Cfg::Stage& st = ss.stages[stage.idx];
        uint64_t* full = &ss.full[stage.idx];
        if (tid == 0) {
          const uint32_t tx_bytes = Cfg::tma_bytes(blocks);  // by value: cuda::ptx takes a reference
          cptx::mbarrier_arrive_expect_tx(cptx::sem_release, cptx::scope_cta, cptx::space_shared,
                                          full, tx_bytes);
        }
        WeightLoader<Cfg>::issue(p, s, kb, st, full, tid, u & pair, blocks);
        rows.issue(p, s, kb, st, full, tid);
        if constexpr (Cfg::kKBlocks == 2)
          if (blocks == 2) rows.issue(p, s, kb + 1, st, full, tid, 1);
        // Every k-loop producer thread arrives: once its cp.async copies above have landed, or at
        // once where thread 0's TMA copies are the stage's only bytes (the bf16 / e2m1 down GEMMs).
        // Its arrival is what keeps a thread from falling a whole phase behind on the empty
        // barriers: a thread that waited on them without gating the next phase could miss a
        // release (the slot released twice between two of its polls reads the same parity as "not
        // yet"), then wait for one that needs thread 0 to fill the slot in the next tile, while
        // thread 0 waits for it at the next tile's bar.sync 1 (publish_columns): a deadlock.
        // Session 43 saw the bf16 BLOCK_T=64 layer stall so in its graph replays, session 44's
        // 600-forward test BLOCK_T=16 (LayerGpu.RepeatedForwardsFinishAtEveryTokenTileWidth;
        // docs/performance.md). (Lean: the other three warps never wait on the ring.)
        if constexpr (Cfg::kCpAsync) cptx::cp_async_mbarrier_arrive_noinc(full);
        else cptx::mbarrier_arrive(full);
        stage.advance();
      }
    };
    if constexpr (Cfg::kLeanCapable) {
      if (p.lean_producer) {  // the first warp alone; the others go on to the next tile's barrier
        const RowLoader<Cfg, Cfg::kRows, 32> rows(p, m, tid);
        cptx::mbarrier_arrive(&ss.meta_full[meta.idx]);  // releases this thread's meta writes
        meta.advance();
        if (tid < 32) k_loop(rows);
        continue;
      }
    }
    const RowLoader<Cfg> rows(p, m, tid);
    cptx::mbarrier_arrive(&ss.meta_full[meta.idx]);  // releases this thread's meta writes
    meta.advance();
    k_loop(rows);
  }
  if constexpr (Cfg::kCpAsync) asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- consumers: two warpgroups, 64 weight rows each ------------------------------------------
// Forced inline (as produce): the kernel's only caller. Left to the inliner, a larger epilogue
// (docs/wip/tokens_m_epilogue_no_bias.diff) turned the two-wave tokens-as-M down configs'
// consume into a called function (a `call` in the PTX): 1.7% more instructions and the down GEMM
// 1.12-1.17x slower on H200 (docs/performance.md, session 37).
template <class Cfg>
__device__ __forceinline__ void consume(const GroupedGemmParams& p, typename Cfg::SharedStorage& ss, int wgc,
                        int tid) {
  namespace cptx = cuda::ptx;
  RingPos<Cfg::kStages> stage;
  RingPos<Cfg::kMetaStages> meta;
  using Mma_t = std::conditional_t<Cfg::kTokensM, MmaTokensM<Cfg>,
                                   std::conditional_t<Cfg::kE2M1, MmaE2M1<Cfg>, Mma<Cfg>>>;
  Mma_t mma;
  if constexpr (std::is_same_v<Mma_t, MmaE2M1<Cfg>>) mma.scale_mul = p.e2m1_scale_mul;
  float acc[Cfg::kWaves][Cfg::kAccRegs];  // per wave (64 rows, BLOCK_T cols): the running sums
  for (;;) {
    wait_barrier(&ss.meta_full[meta.idx], meta.phase);
    const typename Cfg::TileMeta& m = ss.meta[meta.idx];
    if (m.seg.e < 0) break;
    // Only the k range stays in registers through the mainloop; the epilogue reads the rest of
    // the segment from the slot again (fewer live registers next to the two accumulators).
    const int kb0 = m.seg.kb0, kb1 = m.seg.kb1;
#pragma unroll
    for (int w = 0; w < Cfg::kWaves; ++w)
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) acc[w][i] = 0.0f;
    // Gathered activations are written by cp.async (generic proxy) and read by wgmma (async
    // proxy). TMA-loaded operands need no fence (the scales cp.async writes are read by plain
    // loads); the fence compiles to a CTA memory barrier, so it is left out where it is not needed.
    auto wait_full = [&] {
      wait_barrier(&ss.full[stage.idx], stage.phase);
      if constexpr (Cfg::kRows == GemmRows::gathered) cptx::fence_proxy_async(cptx::space_shared);
    };
    if constexpr (TileWidth<Cfg>::kNarrow) {
      // The tile's width (TileWidth: narrow tail tiles), one compiled k-loop per width.
      const int shift = TileWidth<Cfg>::shift(p, m.seg.nrows);
      if constexpr (Mma_t::kPipelined) {
        mma.begin(p, m.seg, wgc, tid);  // what finish() reads from global memory, early
        TileWidth<Cfg>::dispatch(shift, [&](auto sh) {
          constexpr int kShift = decltype(sh)::value;
          // As below, with the width.
          using I0 = std::integral_constant<int, 0>;
          using I1 = std::integral_constant<int, 1>;
          auto unit = [&](auto buf, auto wave, int kb) {
            constexpr int b = decltype(buf)::value, w = decltype(wave)::value;
            mma.template issue<b, w, kShift>(ss.stages[stage.idx], acc);
            uint64_t* empty = nullptr;
            if constexpr (w + 1 < Cfg::kWaves) {
              mma.template decode<1 - b>(ss.stages[stage.idx], w + 1, wgc, tid);
            } else if (Cfg::kKBlocks == 2 && b == 0 && kb + 1 < kb1) {
              mma.template decode<1 - b>(ss.stages[stage.idx], 1, wgc, tid);  // the stage's 2nd block
            } else {
              empty = &ss.empty[stage.idx];
              stage.advance();
              if (kb + 1 < kb1) {
                wait_full();
                mma.template decode<1 - b>(ss.stages[stage.idx], 0, wgc, tid);
              }
            }
            mma.template retire<b, w>(acc, empty);
          };
          if (kb0 < kb1) {
            wait_full();
            mma.template decode<0>(ss.stages[stage.idx], 0, wgc, tid);
            for (int kb = kb0;;) {
              if constexpr (Cfg::kWaves == 2) {
                unit(I0{}, I0{}, kb);
                unit(I1{}, I1{}, kb);
              } else {
                unit(I0{}, I0{}, kb);
                if (++kb == kb1) break;
                unit(I1{}, I0{}, kb);
              }
              if (++kb == kb1) break;
            }
          }
        });
      } else {
        TileWidth<Cfg>::dispatch(shift, [&](auto sh) {
          for (int kb = kb0; kb < kb1; ++kb) {
            wait_full();
            mma.template stage<decltype(sh)::value>(ss.stages[stage.idx], acc, wgc, tid,
                                                    &ss.empty[stage.idx]);
            stage.advance();
          }
        });
      }
    } else {
      // Full-width configs: the k-loop written out once more, without the width, so that their
      // code stays what it was before narrow tiles (measured; ptxas scheduled the single-width
      // lambda differently).
      if constexpr (Mma_t::kPipelined) {
        mma.begin(p, m.seg, wgc, tid);  // what finish() reads from global memory, early
        // Units (stage, wave) in order, the next one decoded while this one's wgmmas run (MmaE2M1);
        // unit u's fragments in buffer u % 2, so the loop is unrolled until the buffers come round.
        using I0 = std::integral_constant<int, 0>;
        using I1 = std::integral_constant<int, 1>;
        auto unit = [&](auto buf, auto wave, int kb) {
          constexpr int b = decltype(buf)::value, w = decltype(wave)::value;
          mma.template issue<b, w>(ss.stages[stage.idx], acc);
          uint64_t* empty = nullptr;
          if constexpr (w + 1 < Cfg::kWaves) {
            mma.template decode<1 - b>(ss.stages[stage.idx], w + 1, wgc, tid);
          } else if (Cfg::kKBlocks == 2 && b == 0 && kb + 1 < kb1) {
            // Two k-blocks a stage (one wave): unit u of a segment is k-block kb0 + u in buffer
            // u % 2, and a stage starts at an even u, so buffer b is the block's place in it.
            mma.template decode<1 - b>(ss.stages[stage.idx], 1, wgc, tid);
          } else {  // the stage's last unit: hand it back after its wgmmas, decode the next stage
            empty = &ss.empty[stage.idx];
            stage.advance();
            if (kb + 1 < kb1) {
              wait_full();
              mma.template decode<1 - b>(ss.stages[stage.idx], 0, wgc, tid);
            }
          }
          mma.template retire<b, w>(acc, empty);
        };
        if (kb0 < kb1) {
          wait_full();
          mma.template decode<0>(ss.stages[stage.idx], 0, wgc, tid);
          for (int kb = kb0;;) {
            if constexpr (Cfg::kWaves == 2) {
              unit(I0{}, I0{}, kb);
              unit(I1{}, I1{}, kb);
            } else {
              unit(I0{}, I0{}, kb);
              if (++kb == kb1) break;
              unit(I1{}, I0{}, kb);
            }
            if (++kb == kb1) break;
          }
        }
      } else {
        // The MMA hands the stage back (arrives on its empty barrier) as soon as every read of it
        // (wgmma, scales) is done, before its promotion. Each thread arrives for its own reads
        // (release): one arrival per warp after __syncwarp orders the other lanes' reads only
        // through cumulativity, which compute-sanitizer's racecheck does not follow (it reported
        // the producer's next cp.async into the scale slots as a WAR hazard).
        bool half = false;  // a half-height tile (HalfTile): a k-loop of its own, as the widths above
        if constexpr (HalfTile<Cfg>::kOn) half = HalfTile<Cfg>::of(p, m.seg.nrows);
        if (half) {
          if constexpr (HalfTile<Cfg>::kOn) {
            auto half_stage = [&](float (&a)[Cfg::kAccRegs]) {
              wait_full();
              mma.stage_half(ss.stages[stage.idx], a, wgc, tid, &ss.empty[stage.idx]);
              stage.advance();
            };
            if (__shfl_sync(0xffffffffu, m.seg.pair, 0)) {  // wave c of weight tiles wb, wb + 1
              for (int kb = kb0; kb < kb1; ++kb) {
                half_stage(acc[0]);
                half_stage(acc[1]);
              }
            } else {
              for (int kb = kb0; kb < kb1; ++kb) half_stage(acc[0]);
            }
          }
        } else {
          for (int kb = kb0; kb < kb1; ++kb) {
            wait_full();
            mma.stage(ss.stages[stage.idx], acc, wgc, tid, &ss.empty[stage.idx]);
            stage.advance();
          }
        }
      }
    }
    mma.finish(p, m.seg, acc, wgc, tid);  // per-row factors the k-stages left out (e2m1)
    bool stored = false;
    if constexpr (HalfTile<Cfg>::kOn) {
      // (decided again from the slot: one register fewer held through the mainloop)
      if (HalfTile<Cfg>::of(p, m.seg.nrows)) {  // consumer c holds wave c of the first 64 tokens
        Epilogue<Cfg>::store_half(p, m.seg, m, ss, acc[0], wgc, tid);
        if (m.seg.pair) {  // and of weight tile wb + 1's
          Segment s2 = m.seg;
          ++s2.wb;
          Epilogue<Cfg>::store_half(p, s2, m, ss, acc[1], wgc, tid);
        }
        stored = true;
      }
    }
    if constexpr (Epilogue<Cfg>::kStoresPairs) {
      // The intermediate with one scale per 128 columns: both waves' 64 values of a token at once.
      if (!stored && p.h_block == 128) {
        Epilogue<Cfg>::store_tokens_m_s128(p, m.seg, acc, wgc, tid);
        stored = true;
      }
    }
    if constexpr (Cfg::kStagedRows) {
      if (!stored && p.sorted_rows && m.seg.nrows == Cfg::BLOCK_T) {
        Epilogue<Cfg>::store_rows_staged(p, m.seg, m, ss, acc, wgc, tid);
        stored = true;
      }
    }
    if (!stored) {
      // Each wave is stored as the 128-row tile it is (weight tile kWaves * wb + w).
#pragma unroll
      for (int w = 0; w < Cfg::kWaves; ++w) {
        Segment sw = m.seg;
        sw.wb = m.seg.wb * Cfg::kWaves + w;
        Epilogue<Cfg>::store(p, sw, m, ss, acc[w], wgc, tid);
      }
    }
    if constexpr (Cfg::kStagedRows) {
      // Where each route's row went (slot order), for finalize: once per token tile.
      if (p.sorted_rows && wgc == 0 && m.seg.wb == 0 && m.seg.kb0 == 0 && tid < m.seg.nrows)
        p.route_row[m.col_out[tid]] = m.seg.row0 + tid;
    }
    cptx::mbarrier_arrive(&ss.meta_empty[meta.idx]);  // this thread is done with the slot
    meta.advance();
  }
  // The staged rows' last TMA stores are done (their shared memory is not left while read).
  if constexpr (Cfg::kStagedRows) {
    if (wgc == 0 && tid == 0) cptx::cp_async_bulk_wait_group(cptx::n32_t<0>{});
  }
}

// L2 prefetch of the weights this CTA will stream first, issued before the schedule exists: with
// static tile numbering the first tiles are known. Off unless FMOE_PREFETCH_UNITS is set: measured
// on H100 at T=128 it gave nothing end to end and slowed the GEMM alone (docs/performance.md).
template <class Cfg>
__device__ void prefetch_expected_weights(const GroupedGemmParams& p) {
  const int NB = TileScheduler<Cfg>::weight_tiles(p);
  const int64_t tiles = int64_t(p.E) * NB;
  const int64_t rr = TileScheduler<Cfg>::whole_tiles(p, tiles, gridDim.x);
  const int64_t tail_units = (tiles - rr) * p.KB;
  const bool whole = blockIdx.x < rr;
  int64_t unit = whole ? int64_t(blockIdx.x) * p.KB : rr * p.KB + tail_units * blockIdx.x / gridDim.x;
  const int num = whole ? min(p.prefetch_units, p.KB) : p.prefetch_units;
  for (int i = 0; i < num; ++i, ++unit) {
    const int64_t tile = unit / p.KB;
    if (tile >= tiles) break;
    const int kb = int(unit % p.KB);
    const int e = int(tile / NB), wb = int(tile % NB);
    const int32_t k_coord = kb * Cfg::BLOCK_K, row_coord = e * p.n_rows + wb * Cfg::BLOCK_W;
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n"
                 ::"l"(&p.w_desc), "r"(k_coord), "r"(row_coord) : "memory");
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kCtasPerSm)
grouped_gemm_kernel(const __grid_constant__ GroupedGemmParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace cptx = cuda::ptx;
  extern __shared__ uint8_t smem_raw[];
  // Aligned by pointer arithmetic on the __shared__ array (not through an integer), so the
  // compiler keeps the shared state space: LDS/STS instead of generic loads and stores, which
  // cost latency on every scale read of the mainloop (ncu: LD.E on the promotion's path).
  const uint32_t pad = (1024u - (ptx::smem_addr(smem_raw) & 1023u)) & 1023u;
  auto& ss = *reinterpret_cast<typename Cfg::SharedStorage*>(smem_raw + pad);
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      // thread 0's expect_tx + every k-loop producer thread's (lean: the first warp's)
      cptx::mbarrier_init(&ss.full[s], 1 + (Cfg::kLeanCapable && p.lean_producer ? 32 : 128));
      cptx::mbarrier_init(&ss.empty[s], 128 * Cfg::kConsumerWGs);
    }
    for (int s = 0; s < Cfg::kMetaStages; ++s) {
      cptx::mbarrier_init(&ss.meta_full[s], 128);
      cptx::mbarrier_init(&ss.meta_empty[s], 128 * Cfg::kConsumerWGs);
    }
    cptx::fence_mbarrier_init(cptx::sem_release, cptx::scope_cluster);  // visible to the TMA unit
    if (!Cfg::kE2M1) asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.w_desc) : "memory");
    if (Cfg::kTmaRows) asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.a_desc) : "memory");
    // Weights never depend on the previous kernels: start pulling them in while they finish.
    if (!Cfg::kE2M1 && p.prefetch_units > 0) prefetch_expected_weights<Cfg>(p);
  }
  __syncthreads();
  // Everything above overlapped the previous kernels; what they wrote is read below.
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  load_schedule<Cfg>(p, ss);
  __syncthreads();
  if (wg == 0) {
    ptx::setmaxnreg_dec<Cfg::kProducerRegs>();
    produce<Cfg>(p, ss, tid);
  } else {
    ptx::setmaxnreg_inc<Cfg::kConsumerRegs>();
    consume<Cfg>(p, ss, wg - 1, tid);
  }
#else
  __trap();  // built for sm_90a only
#endif
}

template <class Cfg>
void launch_grouped_gemm_cfg(const GroupedGemmParams& p, int num_sms, cudaStream_t stream) {
  FMOE_REQUIRE(!Cfg::kFp8 || p.sb_groups == (Cfg::kGroupScales ? 16 : 1),
               "grouped_gemm: this config reads %d fp8 weight scale(s) per tile and k-block, the "
               "parameters say %d", Cfg::kGroupScales ? 16 : 1, p.sb_groups);
  FMOE_REQUIRE(!Cfg::kE2M1 || p.e2m1_scale_mul == e2m1::kScaleMul,
               "grouped_gemm: e2m1_scale_mul must be %u (a parameter only so that the decode's "
               "multiply stays an IMAD), got %u", e2m1::kScaleMul, p.e2m1_scale_mul);
  FMOE_REQUIRE(p.NB % Cfg::kWaves == 0, "grouped_gemm: a config of %d x 128 weight rows per tile "
               "needs a multiple of %d 128-row weight tiles per expert, got %d", Cfg::kWaves,
               Cfg::kWaves, p.NB);
  FMOE_REQUIRE(p.h_block == 64 || (p.h_block == 128 && Epilogue<Cfg>::kStoresPairs),
               "grouped_gemm: an fp8 intermediate with one scale per %d columns; this config writes "
               "one per 64%s", p.h_block,
               Epilogue<Cfg>::kStoresPairs ? " or 128" : " (per 128: a two-wave tokens-as-M gate/up config)");
  FMOE_REQUIRE(Cfg::kEpi != GemmEpilogue::swiglu || !Cfg::kTokensM || p.thread_order,
               "grouped_gemm: a tokens-as-M swiglu config needs its gate/up pairs prepared in "
               "thread order (thread_order = 1, grouped_gemm.hpp), got thread_order = %d", p.thread_order);
  FMOE_REQUIRE(!p.sorted_rows || (Cfg::kStagedRows && p.out_type == GemmOut::bf16 && p.paired_rows && p.route_row),
               "grouped_gemm: bf16 rows in slot order (sorted_rows) need a staged-rows config "
               "(two-wave tokens-as-M down GEMM, scales per 128) with paired rows");
  FMOE_REQUIRE(p.split <= 1 || (Cfg::kWaves == 1 && !Cfg::kTokensM), "grouped_gemm: split K "
               "(%d parts) needs a one-wave config with weights as wgmma's M side", p.split);
  FMOE_REQUIRE(p.out_type == GemmOut::f32 ||
                   (Cfg::kEpi == GemmEpilogue::combine && p.deterministic && p.out_lowp &&
                    (p.out_type == GemmOut::bf16 || Cfg::kE2M1)),
               "grouped_gemm: low-precision output rows need a combine config in deterministic "
               "mode and an output pointer (f16: an e2m1 config)");
  auto kernel = grouped_gemm_kernel<Cfg>;
  FMOE_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(Cfg::kSmemBytes)));
  launch_pdl(kernel, dim3(num_sms * Cfg::kCtasPerSm), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
  FMOE_CHECK_LAUNCH("grouped_gemm_kernel", stream);
}

// The rows of gemm_configs.def with weights kW, each launched by its id. A template (not an
// explicit specialization), so the rows of the other weight format are discarded statements that
// are never instantiated: each sm90_grouped_gemm_<weights>.cu instantiates it for one format (one
// TU per weight format keeps each compile under a minute).
template <GemmWeights kW>
bool launch_grouped_gemm_of(GemmConfigId id, const GroupedGemmParams& p, int num_sms,
                            cudaStream_t stream) {
  switch (id) {
#define FMOE_GG(name, bt, waves, stages, weights, rows, epi, operands, ctas, kblocks)                   \
  case GemmConfigId::name:                                                                             \
    if constexpr (GemmWeights::weights == kW) {                                                        \
      launch_grouped_gemm_cfg<GemmConfig<bt, waves, stages, GemmWeights::weights, GemmRows::rows,      \
                                         GemmEpilogue::epi, GemmOperands::operands, ctas, kblocks>>(   \
          p, num_sms, stream);                                                                         \
      return true;                                                                            \
    }                                                                                         \
    return false;
#include "gemm/gemm_configs.def"
#undef FMOE_GG
    default: return false;
  }
}

}  // namespace fusedmoe::detail
