// Grouped FP8 GEMM with block scales and the weighted-scatter epilogue.
//
//   out[token(slot), n] (+)= w(slot) * sum_kb sb[e, n/128, kb] * sa[token, kb] *
//                                       sum_{k in kb} W[e, n, k] * xq[token, k]
// for every slot of every expert e (expert e's slots: sorted_route[e*T .. e*T + counts[e])).
// Weights are wgmma's M side (128 rows per tile: two consumer warpgroups x m64), the expert's
// tokens its N side (BLOCK_T columns), so a decode tile streams weights for useful columns only.
// W tiles arrive by TMA (128B swizzle); activation rows are gathered by cp.async straight from the
// per-token quantized x (no sorted copy of the activations exists). A persistent grid walks the
// tile table (per expert: weight blocks outer, token tiles inner, so an expert's token tiles run
// back to back and share its weights in L2). Fast mode splits the (tile, k-block) units evenly
// over the CTAs (stream-K) and adds partial sums with fp32 atomics into out [T, N]; deterministic
// mode gives whole tiles to CTAs and stores one fp32 row per route, out [T*k, N].
// Roles: warpgroup 0 produces (TMA + cp.async into a kStages ring), warpgroups 1-2 consume (wgmma
// per 128-K block into a scratch accumulator, then promote with the scales). Before waiting for the
// schedule (PDL), the producer prefetches into L2 the weights it will most likely stream first.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda/ptx>
#include <cuda_runtime.h>

#include "common/ptx/sm90_ptx.cuh"
#include "common/ptx/wgmma_fp8.cuh"
#include "moe/moe_fp8_plan.hpp"

namespace fusedmoe::detail {

template <int kBlockT, int kStages_, bool kDeterministic_>
struct GemmConfig {
  static constexpr int BLOCK_W = 128;   // weight rows per tile (= one W scale block)
  static constexpr int BLOCK_T = kBlockT;
  static constexpr int BLOCK_K = 128;   // one scale block: the promotion interval
  static constexpr int kStages = kStages_;
  static constexpr bool kDeterministic = kDeterministic_;
  static constexpr int kConsumerWGs = 2;
  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  static constexpr int kAccRegs = BLOCK_T / 2;          // m64 x BLOCK_T fp32 / 128 threads
  static constexpr int kColsPerThread = BLOCK_T / 4;    // accumulator columns each thread holds
  static constexpr int kChunks = BLOCK_T * BLOCK_K / 16;  // 16-byte cp.async per k-block
  static constexpr int kChunksPerThread = (kChunks + 127) / 128;
  static constexpr int kProducerRegs = 56, kConsumerRegs = 224;
  static constexpr int kMaxExperts = 512;  // the schedule copy in shared memory
  // Decode sizes (BLOCK_T <= 64) can build the schedule inside the kernel from up to this many
  // routes (their ids staged in shared memory): no separate schedule kernel, one launch fewer.
  static constexpr int kFusedRoutes = kBlockT <= 64 ? kMaxFusedRoutes : 0;
  static constexpr uint32_t kWBytes = BLOCK_W * BLOCK_K;

  struct alignas(1024) Stage {
    uint8_t w[BLOCK_W * BLOCK_K];   // (BLOCK_W, BLOCK_K) e4m3, TMA 128B swizzle
    uint8_t a[BLOCK_T * BLOCK_K];   // (BLOCK_T, BLOCK_K) e4m3, same swizzle, written by cp.async
    float sa[BLOCK_T];              // activation scale of each column for this k-block
    float sb;                       // weight scale of this (tile rows, k-block)
    // Written with a segment's last k-block only: the epilogue's column -> (route, routing
    // weight), so it does no dependent global loads (-1: absent column).
    int32_t col_route[BLOCK_T];
    float col_weight[BLOCK_T];
  };
  struct SharedStorage {
    Stage stages[kStages];
    int32_t tile_offsets[kMaxExperts + 1];  // the schedule, copied once per CTA: the tile walk's
    int32_t counts[kMaxExperts];            // binary search then runs on shared memory
    int32_t ids[kFusedRoutes > 0 ? kFusedRoutes : 1];  // fused schedule: every route's expert
    int32_t col_list[BLOCK_T];              // fused schedule: the producer's current columns
    int32_t warp_count[4];                  // fused schedule: matches per producer warp
    typename cub::BlockScan<int, kThreads>::TempStorage scan;
    uint64_t full[kStages];   // producer -> consumers: TMA bytes + 128 cp.async arrivals
    uint64_t empty[kStages];  // consumers -> producer: one arrival per consumer warp
  };
  static constexpr size_t kSmemBytes = sizeof(SharedStorage) + 1024;  // + alignment slack

  static_assert(BLOCK_T % 16 == 0 || BLOCK_T == 8, "wgmma N: 8 or a multiple of 16 here");
  static_assert((BLOCK_T * BLOCK_K) % 1024 == 0, "activation tile must keep stages 1024-aligned");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory budget of one SM exceeded");
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= 65536,
                "setmaxnreg split exceeds the register file");
};

// One contiguous piece of work: k-blocks [kb0, kb1) of one tile.
struct Segment {
  int e, wb, tb, kb0, kb1;
  int row0, nrows;  // first slot of the tile and how many of its BLOCK_T columns are real
};

// How many leading tiles are handed out whole, round robin; the rest is split into equal shares
// of (tile, k-block) units (stream-K). Deterministic mode: every tile whole (each output element
// is then computed by one CTA in a fixed order). Fast mode: all but the last full wave and the
// partial wave go round robin, so at any moment the CTAs work on neighbouring tiles, i.e. on a
// few experts whose weights and activation rows stay in L2 while their weight and token blocks
// are crossed; the tail is stream-K, so no CTA idles through a partial last wave.
template <class Cfg>
__device__ __forceinline__ int64_t round_robin_tiles(int64_t tiles, int ctas) {
  if (Cfg::kDeterministic) return tiles;
  const int64_t waves = tiles / ctas;
  return waves >= 2 ? (waves - 1) * ctas : 0;
}

// The tile table walk shared by producer and consumers (both must see identical segments).
template <class Cfg>
struct WorkIter {
  const GemmParams& p;
  const int32_t* tile_offsets;  // shared-memory copies
  const int32_t* counts;
  int64_t tile_rr, rr_tiles, stride;  // round-robin phase: next tile, its end, the stride
  int64_t unit, unit_end;             // stream-K phase: (tile * KB + kb) units

  __device__ WorkIter(const GemmParams& params, const typename Cfg::SharedStorage& ss, int cta,
                      int ctas)
      : p(params), tile_offsets(ss.tile_offsets), counts(ss.counts) {
    const int64_t tiles = static_tiles() + tile_offsets[p.E];
    rr_tiles = round_robin_tiles<Cfg>(tiles, ctas);
    tile_rr = cta;
    stride = ctas;
    const int64_t tail_units = (tiles - rr_tiles) * p.KB;
    unit = rr_tiles * p.KB + tail_units * cta / ctas;
    unit_end = rr_tiles * p.KB + tail_units * (cta + 1) / ctas;
  }

  // Static tile numbering (decode with nearly every expert hit): tiles [0, E * NWB) are (e, wb)
  // with the first token tile of every expert, empty or not, so the numbering is known before
  // the schedule exists (the L2 prefetch guesses right); empty ones are skipped when walked. The
  // schedule's table then lists only the further token tiles of experts with > BLOCK_T routes.
  __device__ int64_t static_tiles() const { return p.static_tiles ? int64_t(p.E) * p.NB : 0; }

  __device__ bool next(Segment& s) {
    while (next_any(s))
      if (s.nrows > 0) return true;  // skip the static tiles of empty experts
    return false;
  }

  __device__ bool next_any(Segment& s) {
    int64_t tile;
    if (tile_rr < rr_tiles) {
      tile = tile_rr;
      tile_rr += stride;
      s.kb0 = 0;
      s.kb1 = p.KB;
    } else {
      if (unit >= unit_end) return false;
      tile = unit / p.KB;
      s.kb0 = int(unit % p.KB);
      const int64_t left = unit_end - unit;
      s.kb1 = left < p.KB - s.kb0 ? s.kb0 + int(left) : p.KB;
      unit += s.kb1 - s.kb0;
    }
    const bool fused = Cfg::kFusedRoutes > 0 && p.fused_schedule;
    if (tile < static_tiles()) {
      s.e = int(tile / p.NB);
      s.wb = int(tile % p.NB);
      s.tb = 0;
      const int count = fused ? counts[s.e] : min(counts[s.e], p.T);
      s.row0 = s.e * p.T;
      s.nrows = min(Cfg::BLOCK_T, count);
      return true;
    }
    tile -= static_tiles();
    // Expert of the tile: the last e with tile_offsets[e] <= tile (empty experts repeat offsets).
    int lo = 0, hi = p.E;  // invariant: tile_offsets[lo] <= tile < tile_offsets[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (tile_offsets[mid] <= tile) lo = mid; else hi = mid;
    }
    s.e = lo;
    const int local = int(tile - tile_offsets[lo]);
    // Schedule kernel: > T only with repeated caller ids, whose routes past T it dropped.
    const int count = fused ? counts[lo] : min(counts[lo], p.T);
    const int first_tb = p.static_tiles ? 1 : 0;  // static: token tile 0 is in the static part
    const int token_tiles = (count + Cfg::BLOCK_T - 1) / Cfg::BLOCK_T - first_tb;
    s.wb = local / token_tiles;  // token tiles innermost: consecutive tiles share a weight block
    s.tb = first_tb + local % token_tiles;
    s.row0 = lo * p.T + s.tb * Cfg::BLOCK_T;
    s.nrows = min(Cfg::BLOCK_T, count - s.tb * Cfg::BLOCK_T);
    return true;
  }
};

// Fused schedule: the routes of tile s's columns are expert s.e's routes in ascending route order,
// ranks [tb * BLOCK_T, tb * BLOCK_T + nrows): every CTA derives the same order from the ids alone,
// so token tiles of one expert split its routes consistently without any slot table. The 128
// producer threads rank 128 ids per step (ballot + per-warp counts; named barrier 1).
template <class Cfg>
__device__ void build_columns(const GemmParams& p, typename Cfg::SharedStorage& ss, const Segment& s,
                              int tid) {
  const int warp = tid / 32, lane = tid % 32;
  const int first = s.tb * Cfg::BLOCK_T, last = first + s.nrows;
  int base = 0;
  for (int i0 = 0; i0 < p.R && base < last; i0 += 128) {
    const int i = i0 + tid;
    const bool match = i < p.R && ss.ids[i] == s.e;
    const uint32_t ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) ss.warp_count[warp] = __popc(ballot);
    asm volatile("bar.sync 1, 128;\n" ::: "memory");  // producer warpgroup only
    int before = base, total = base;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int c = ss.warp_count[w];
      before += w < warp ? c : 0;
      total += c;
    }
    const int rank = before + __popc(ballot & ((1u << lane) - 1u));
    if (match && rank >= first && rank < last) ss.col_list[rank - first] = i;
    base = total;
    asm volatile("bar.sync 1, 128;\n" ::: "memory");  // warp_count is rewritten next step
  }
}

// ---- producer: one warpgroup; thread 0 issues the TMA, all 128 gather activation rows -----------
template <class Cfg>
__device__ void produce(const GemmParams& p, typename Cfg::SharedStorage& ss, int tid) {
  namespace cptx = cuda::ptx;
  WorkIter<Cfg> it(p, ss, blockIdx.x, gridDim.x);
  Segment s;
  int stage = 0;
  uint32_t phase = 0;
  while (it.next(s)) {
    const bool fused = Cfg::kFusedRoutes > 0 && p.fused_schedule;  // compiled out for BLOCK_T 128
    if (fused) build_columns<Cfg>(p, ss, s, tid);
    // Column c of the tile: its route (fused: from the list just built; else the schedule's slot).
    auto route_of = [&](int c) { return fused ? ss.col_list[c] : p.sorted_route[s.row0 + c]; };
    // Column tid of the tile: its route, token and routing weight (-1: absent column).
    const bool col_valid = tid < Cfg::BLOCK_T && tid < s.nrows;
    const int col_route = col_valid ? route_of(tid) : -1;
    const int col_token = col_valid ? col_route / p.k : -1;
    const float* sa_src = p.sa + (col_valid ? int64_t(col_token) * p.KB : 0);
    const float col_weight = col_valid && !p.weight_on_input ? p.topk_weights[col_route] : 1.0f;
    // Activation rows by cp.async, 16 bytes a thread: this thread copies chunk (tid % 8) of rows
    // tid/8 + 16*j (16 rows per pass). NOTE: one TMA box per row (Hopper's TMA has no row gather)
    // was measured slower on H100 at BLOCK_T=128 (T=2048: 189 vs 146 us for the GEMM).
    const int chunk = tid % 8;
    int token[Cfg::kChunksPerThread];
#pragma unroll
    for (int j = 0; j < Cfg::kChunksPerThread; ++j) {
      const int row = tid / 8 + 16 * j;
      token[j] = (row < Cfg::BLOCK_T && row < s.nrows) ? route_of(row) / p.k : -1;
    }
    const int n0 = s.wb * Cfg::BLOCK_W;
    const float* sb_src = p.w_scale + (int64_t(s.e) * p.NB + n0 / 128) * p.KB;
    const int w_row = s.e * p.N + n0;

    for (int kb = s.kb0; kb < s.kb1; ++kb) {
      // Wait until the consumers released this slot (first lap: passes at once).
      while (!cptx::mbarrier_try_wait_parity(&ss.empty[stage], phase ^ 1)) {
      }
      auto& st = ss.stages[stage];
      if (tid == 0) {
        const uint32_t tx_bytes = Cfg::kWBytes;  // by value: cuda::ptx takes a reference
        cptx::mbarrier_arrive_expect_tx(cptx::sem_release, cptx::scope_cta, cptx::space_shared,
                                        &ss.full[stage], tx_bytes);
        const int32_t coords[2] = {kb * Cfg::BLOCK_K, w_row};
        cptx::cp_async_bulk_tensor(cptx::space_cluster, cptx::space_global, st.w, &p.w_desc, coords,
                                   &ss.full[stage]);
        ptx::cp_async_4(ptx::smem_addr(&st.sb), sb_src + kb, 4);
      }
      const int k_base = kb * Cfg::BLOCK_K;
      const uint32_t a_base = ptx::smem_addr(st.a);
      // Zero-fill padding columns (beyond K) and absent rows: no garbage (or NaN codes) ever
      // meets a weight.
      const bool in_k = k_base + chunk * 16 < p.K;
#pragma unroll
      for (int j = 0; j < Cfg::kChunksPerThread; ++j) {
        const int row = tid / 8 + 16 * j;
        if (row < Cfg::BLOCK_T) {
          const bool ok = token[j] >= 0 && in_k;
          const uint8_t* src = ok ? p.xq + int64_t(token[j]) * p.ldx + k_base + chunk * 16 : p.xq;
          ptx::cp_async_16(a_base + ptx::swizzle128_offset(row, chunk), src, ok ? 16 : 0);
        }
      }
      if (tid < Cfg::BLOCK_T) {
        ptx::cp_async_4(ptx::smem_addr(&st.sa[tid]), sa_src + kb, col_valid ? 4 : 0);
        if (kb + 1 == s.kb1) {  // ordered before the consumers' reads by the arrive below
          st.col_route[tid] = col_route;
          st.col_weight[tid] = col_weight;
        }
      }
      // Arrives on `full` once this thread's copies above have landed.
      cptx::cp_async_mbarrier_arrive_noinc(&ss.full[stage]);
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

// ---- consumers: two warpgroups, 64 weight rows each -----------------------------------------------
template <class Cfg>
__device__ void store_tile(const GemmParams& p, const Segment& s, const typename Cfg::Stage& st,
                           int wgc, int tid, const float (&acc)[Cfg::kAccRegs]) {
  const int warp = tid / 32, lane = tid % 32;
  const int n_a = s.wb * Cfg::BLOCK_W + 64 * wgc + 16 * warp + lane / 4;  // rows n_a and n_a + 8
  const int n_b = n_a + 8;
#pragma unroll
  for (int b = 0; b < Cfg::BLOCK_T / 8; ++b) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int col = 8 * b + 2 * (lane % 4) + h;
      const int route = st.col_route[col];
      if (route < 0) continue;  // absent column
      const float w = st.col_weight[col];
      const float va = acc[4 * b + h] * w, vb = acc[4 * b + 2 + h] * w;
      if constexpr (Cfg::kDeterministic) {
        float* row = p.out + int64_t(route) * p.N;
        if (n_a < p.N) row[n_a] = va;
        if (n_b < p.N) row[n_b] = vb;
      } else {
        float* row = p.out + int64_t(route / p.k) * p.N;
        if (n_a < p.N) atomicAdd(row + n_a, va);  // result unused: compiles to RED
        if (n_b < p.N) atomicAdd(row + n_b, vb);
      }
    }
  }
}

template <class Cfg>
__device__ void consume(const GemmParams& p, typename Cfg::SharedStorage& ss, int wgc, int tid) {
  namespace cptx = cuda::ptx;
  using Mma = ptx::WgmmaFp8<Cfg::BLOCK_T>;
  WorkIter<Cfg> it(p, ss, blockIdx.x, gridDim.x);
  Segment s;
  int stage = 0;
  uint32_t phase = 0;
  const int lane = tid % 32;
  float acc[Cfg::kAccRegs];   // (64 rows, BLOCK_T cols) of this warpgroup: the running sum
  float part[Cfg::kAccRegs];  // the same fragment for one 128-K block, before scaling
  while (it.next(s)) {
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) acc[i] = 0.0f;
    for (int kb = s.kb0; kb < s.kb1; ++kb) {
      while (!cptx::mbarrier_try_wait_parity(&ss.full[stage], phase)) {
      }
      // The activation tile was written by cp.async (generic proxy); wgmma reads through the
      // async proxy.
      cptx::fence_proxy_async(cptx::space_shared);
      auto& st = ss.stages[stage];
      const uint64_t desc_w = ptx::smem_desc_k128b(st.w + wgc * 64 * Cfg::BLOCK_K);
      const uint64_t desc_a = ptx::smem_desc_k128b(st.a);
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(part[i]);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < Cfg::BLOCK_K / 32; ++kk)  // 32 bytes of K = 2 in descriptor units
        Mma::mma(desc_w + 2 * kk, desc_a + 2 * kk, part, kk > 0);
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs; ++i) ptx::fence_operand(part[i]);
      // Promote: acc += part * (sb * sa[col]). The scales are read from the stage, so the slot is
      // handed back only afterwards (the ring is deep enough that this costs nothing).
      const float sb = st.sb;
#pragma unroll
      for (int b = 0; b < Cfg::BLOCK_T / 8; ++b)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float scale = sb * st.sa[8 * b + 2 * (lane % 4) + h];
#pragma unroll
          for (int r = 0; r < 2; ++r)
            acc[4 * b + 2 * r + h] = fmaf(part[4 * b + 2 * r + h], scale, acc[4 * b + 2 * r + h]);
        }
      // The segment's last stage is kept until the epilogue has read its column metadata (the
      // other stages of the ring keep the producer busy meanwhile).
      const bool last = kb + 1 == s.kb1;
      if (last) store_tile<Cfg>(p, s, st, wgc, tid, acc);
      __syncwarp();
      if (lane == 0) cptx::mbarrier_arrive(&ss.empty[stage]);
      if (++stage == Cfg::kStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

// L2 prefetch of the weights this CTA will stream first, issued before the schedule exists: with
// static tile numbering the first tiles are known. Off unless FMOE_PREFETCH_UNITS is set: measured
// on H100 at T=128 it gave nothing end to end and slowed the GEMM alone (docs/performance.md).
template <class Cfg>
__device__ void prefetch_expected_weights(const GemmParams& p) {
  const int64_t tiles = int64_t(p.E) * p.NB;
  // The same walk as WorkIter on the guessed table: a first whole tile, or a stream-K share.
  const int64_t rr = round_robin_tiles<Cfg>(tiles, gridDim.x);
  const int64_t tail_units = (tiles - rr) * p.KB;
  const bool whole = blockIdx.x < rr;
  int64_t unit = whole ? int64_t(blockIdx.x) * p.KB : rr * p.KB + tail_units * blockIdx.x / gridDim.x;
  const int num = whole ? min(p.prefetch_units, p.KB) : p.prefetch_units;
  for (int i = 0; i < num; ++i, ++unit) {
    const int64_t tile = unit / p.KB;
    if (tile >= tiles) break;
    const int kb = int(unit % p.KB);
    const int e = int(tile / p.NB), wb = int(tile % p.NB);
    const int32_t k_coord = kb * Cfg::BLOCK_K, row_coord = e * p.N + wb * Cfg::BLOCK_W;
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];\n"
                 ::"l"(&p.w_desc), "r"(k_coord), "r"(row_coord) : "memory");
  }
}

// Fused schedule, all threads of the CTA: stage the ids, count routes per expert (an id outside
// [0, E) is dropped and counted once, by CTA 0), and scan the tile counts. Same tile table as the
// schedule kernel's, from the same ids, in every CTA.
template <class Cfg>
__device__ void build_schedule(const GemmParams& p, typename Cfg::SharedStorage& ss) {
  for (int e = threadIdx.x; e < p.E; e += Cfg::kThreads) ss.counts[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < p.R; i += Cfg::kThreads) {
    const int e = p.topk_ids[i];
    ss.ids[i] = e;
    if (e >= 0 && e < p.E) atomicAdd(&ss.counts[e], 1);
    else if (blockIdx.x == 0) atomicAdd(p.status + kStatusDropped, 1);
  }
  __syncthreads();
  constexpr int kPer = (Cfg::kMaxExperts + Cfg::kThreads - 1) / Cfg::kThreads;
  int tiles[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = threadIdx.x * kPer + i;
    const int token_tiles = (ss.counts[e < p.E ? e : 0] + Cfg::BLOCK_T - 1) / Cfg::BLOCK_T;
    tiles[i] = e < p.E ? max(token_tiles - (p.static_tiles ? 1 : 0), 0) * p.NB : 0;
  }
  int total = 0;
  cub::BlockScan<int, Cfg::kThreads>(ss.scan).ExclusiveSum(tiles, tiles, total);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = threadIdx.x * kPer + i;
    if (e < p.E) ss.tile_offsets[e] = tiles[i];
  }
  if (threadIdx.x == 0) ss.tile_offsets[p.E] = total;
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) grouped_gemm_fp8_kernel(const __grid_constant__ GemmParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace cptx = cuda::ptx;
  extern __shared__ uint8_t smem_raw[];
  auto& ss = *reinterpret_cast<typename Cfg::SharedStorage*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      cptx::mbarrier_init(&ss.full[s], 1 + 128);  // expect_tx arrive + one noinc per producer thread
      cptx::mbarrier_init(&ss.empty[s], 4 * Cfg::kConsumerWGs);
    }
    cptx::fence_mbarrier_init(cptx::sem_release, cptx::scope_cluster);  // visible to the TMA unit
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(&p.w_desc) : "memory");
    // Weights never depend on the previous kernels: start pulling them in while they finish.
    if (p.prefetch_units > 0) prefetch_expected_weights<Cfg>(p);
  }
  __syncthreads();
  // Everything above overlapped the previous kernels; the schedule they wrote is read below.
  cudaGridDependencySynchronize();
  cudaTriggerProgrammaticLaunchCompletion();
  if (Cfg::kFusedRoutes > 0 && p.fused_schedule) {
    build_schedule<Cfg>(p, ss);
  } else {
    for (int e = threadIdx.x; e <= p.E; e += Cfg::kThreads) {
      ss.tile_offsets[e] = p.tile_offsets[e];
      if (e < p.E) ss.counts[e] = p.counts[e];
    }
  }
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
void launch_grouped_gemm_fp8_cfg(const GemmParams& p, int num_sms, cudaStream_t stream) {
  auto kernel = grouped_gemm_fp8_kernel<Cfg>;
  FMOE_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(Cfg::kSmemBytes)));
  launch_pdl(kernel, dim3(num_sms), dim3(Cfg::kThreads), Cfg::kSmemBytes, stream, p);
  FMOE_CHECK_LAUNCH("grouped_gemm_fp8_kernel", stream);
}

}  // namespace fusedmoe::detail
