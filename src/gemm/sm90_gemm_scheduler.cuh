// The grouped GEMM's tile scheduler: which (expert, weight tile, token tile, k range) a CTA does
// next, and the route columns of that tile.
//
// Tiles are numbered from the schedule's table (src/schedule): with NB weight tiles per expert
// (p.NB 128-row tiles / Cfg::kWaves),
// expert e owns tiles [NB * tile_offsets[e], NB * tile_offsets[e + 1]) with token tiles innermost
// (consecutive tiles share a weight tile, so its bytes are read from L2 after the first). With
// static_tiles, tiles [0, E * NB) are (e, wb, token tile 0) of every expert, empty or not, so the
// numbering is known before the routing exists; empty ones are skipped. A persistent grid walks
// the tiles: whole tiles (round robin, or in order from a counter: fetch_issue / fetch_take), then (fast
// combine only) stream-K over equal shares of (tile, k-block) units, so no CTA idles through a
// partial last wave. Deterministic combine and the swiglu epilogue need whole tiles (one CTA
// computes each output in a fixed order; the activation needs the full sum).
//
// Only the producer walks; it publishes each tile's segment and columns through the meta ring
// (one slot per tile, its own full/empty barriers), so a k-stage never carries tile metadata.
#pragma once

#include <cub/block/block_scan.cuh>

#include "common/status.hpp"
#include "gemm/grouped_gemm.hpp"
#include "gemm/half_tile_walk.hpp"
#include "schedule/sm90_route_drop.cuh"

namespace fusedmoe::detail {

// One contiguous piece of work: k-blocks [kb0, kb1) of tile (e, wb, tb).
struct Segment {
  int e;       // expert; < 0: no more work (the consumers' stop signal)
  int wb, tb;  // weight tile, token tile
  int kb0, kb1;
  int tile;    // the tile's index in the walk (split K: its partials' slot)
  int part;    // split K: which of the tile's p.split parts this is
  int slot0;   // first slot of the tile in sorted_route (e * T + tb * BLOCK_T)
  int nrows;   // real columns of the tile (<= BLOCK_T)
  int row0;    // compact row of the first column: route_offsets[e] + tb * BLOCK_T
  int pair;    // HalfTile: 1 = the half tails of weight tiles wb and wb + 1, k-blocks interleaved
};

// Half-height tail tiles (tokens as M, two waves). An expert's routes are padded
// to whole 128-token tiles, and with tokens as M the padding is wgmma work: a tail of <= 64 routes
// leaves consumer 1's 64 tokens all absent. Such a tile runs as 64 tokens x both waves instead,
// consumer c taking wave c (MmaTokensM::stage_half, Epilogue::store_half): the same tensor work
// on the real tokens in half the wgmmas, with the same operations (bit for bit the same output).
// A numpy model of the presets' routing puts the real rows at 0.80-0.89 of the padded ones at
// T = 8192 and 0.50-0.68 at T = 2048.
// A half tile takes about half a full tile's time, and the walk hands them out in pairs: a CTA
// that ran one alone drifted ahead of its neighbours for good, and with them out of step the
// token tiles of one weight tile no longer met its k-blocks in L2 (measured on the H200 with
// unpaired half tiles: deepseek-v3's T = 8192 down GEMM 1.05x slower; session 27's idle-consumer
// skip lost 1.28x the same way). So an expert with a half tail has, per two weight tiles wb = 2j,
// 2j + 1: the full tiles of 2j, one pair item, the full tiles of 2j + 1 (an odd last weight tile
// keeps its tail alone). The pair item runs both tails with their k-blocks interleaved (stage 2i:
// tile 2j's k-block i, stage 2i + 1: tile 2j + 1's), consumer c taking wave c of each into its
// two accumulators: the work of a full tile, and each weight tile read at its full tiles' pace.
// Session 30 first ran the two tails one after the other: the down GEMM gained (deepseek-v3
// T = 8192 0.95x) but the gate/up, whose weight tile is 1.8 MB at K = 7168, read 16.6 GB from
// DRAM against 8.0 GB (ncu) and ran 1.10x slower (docs/tried/half_tiles_with_gate_up.diff).
// Chosen per expert and tile (FMOE_NARROW_TAILS=0: never); `of` broadcasts from lane 0 as
// TileWidth's shift does.
template <class Cfg>
struct HalfTile {
  static constexpr bool kOn = Cfg::kTokensM && Cfg::kWaves == 2;
  __device__ static bool of(const GroupedGemmParams& p, int nrows) {
    static_assert(kOn, "two-wave tokens-as-M configs");
    return __shfl_sync(0xffffffffu, p.narrow_tails && nrows <= 64 ? 1 : 0, 0) != 0;
  }
  // Whether an expert of `count` routes, with `tiles` token tiles in the walk's dynamic part (all
  // of them, or all but tile 0 with static tiles), has its half tail among them; the walk's order
  // of its items is half_tile_walk.hpp's.
  __device__ static bool expert_has(const GroupedGemmParams& p, int count, int tiles) {
    return half_walk::has_half_tail(count, tiles, Cfg::BLOCK_T, kOn && p.narrow_tails);
  }
};

template <class Cfg>
struct TileScheduler {
  const GroupedGemmParams& p;
  const typename Cfg::SharedStorage& ss;
  int64_t tile_rr, rr_end, stride;  // whole-tile phase: next tile, where it ends, the stride
  int64_t unit, unit_end;           // stream-K phase: (tile * KB + kb) units
  // Dynamic fetching (p.fetch_counters): the two counters, and a shared word through which
  // producer thread 0 hands its fetch to the other 127. nullptr: round robin.
  int32_t* fetched;
  int32_t ahead = 0;  // thread 0: the counter's value taken for the tile after the current one
  bool owed = false;  // that value is still to be read (fetch_take)
  static constexpr int64_t kFetchDone = INT64_MAX;  // tile_rr once this CTA counted itself done

  // Whole tiles handed out (round robin or from the counter) before the stream-K tail (all of them when the epilogue
  // needs whole tiles). Fast combine: all but the last full wave and the partial wave, so at any
  // moment the CTAs work on neighbouring tiles (few experts, their weights and rows in L2).
  __device__ static int64_t whole_tiles(const GroupedGemmParams& p, int64_t tiles, int ctas) {
    if (Cfg::kEpi == GemmEpilogue::swiglu || p.deterministic) return tiles;  // (swiglu: items)
    const int64_t waves = tiles / ctas;
    return waves >= 2 ? (waves - 1) * ctas : 0;
  }

  // Weight tiles per expert: p.NB counts 128-row tiles, a tile here has kWaves of them.
  __device__ static int weight_tiles(const GroupedGemmParams& p) { return p.NB / Cfg::kWaves; }

  __device__ static int64_t static_tiles(const GroupedGemmParams& p) {
    return p.static_tiles ? int64_t(p.E) * weight_tiles(p) : 0;
  }

  __device__ TileScheduler(const GroupedGemmParams& params, const typename Cfg::SharedStorage& s,
                           int cta, int ctas, int32_t* fetch_word = nullptr)
      : p(params), ss(s) {
    // Swiglu split K: work items are (tile, part); everything else walks tiles (HalfTile: items,
    // one of them a pair of half tiles).
    const int64_t dynamic = HalfTile<Cfg>::kOn ? int64_t(ss.item_offsets[p.E])
                                               : int64_t(weight_tiles(p)) * ss.tile_offsets[p.E];
    const int64_t tiles = (static_tiles(p) + dynamic) * split();
    rr_end = whole_tiles(p, tiles, ctas);
    tile_rr = cta;
    stride = ctas;
    // A fetch returns at least ctas: with no more whole tiles than CTAs (decode sizes) there is
    // nothing to fetch, and no atomic round trip before the first tile's loads.
    fetched = p.fetch_counters && rr_end > ctas ? fetch_word : nullptr;
    const int64_t tail_units = (tiles - rr_end) * p.KB;
    unit = rr_end * p.KB + tail_units * cta / ctas;
    unit_end = rr_end * p.KB + tail_units * (cta + 1) / ctas;
  }

  __device__ int split() const { return Cfg::kEpi == GemmEpilogue::swiglu ? p.split : 1; }

  // Routes of expert e the GEMM may use (the schedule kernel dropped those past T slots).
  __device__ int count_of(int e) const {
    return Cfg::kFusedRoutes > 0 && p.fused_schedule ? ss.counts[e] : min(ss.counts[e], p.T);
  }

  // The next segment into s (tid: the producer thread; dynamic fetching: all 128 call this
  // together).
  __device__ bool next(Segment& s, int tid = 0) {
    while (next_any(s, tid))
      if (s.nrows > 0) return true;  // skip the static tiles of empty experts
    return false;
  }

  // Dynamic fetching: the whole tile after this one. Each CTA's first is its index (no fetch);
  // later ones come from the counter, in order. Thread 0 takes the counter when the current tile
  // is handed out and the result is read only at the next call, so the atomic's round trip
  // overlaps the current tile's loads instead of sitting between two tiles (the CTA's claims
  // come in the same order). All 128 producer threads call these together.
  __device__ void fetch_issue(int tid) {
    if (tid == 0) ahead = atomicAdd(p.fetch_counters, 1);
    owed = true;
  }
  __device__ int64_t fetch_take(int tid) {
    if (tid == 0) {
      const int64_t t = stride + ahead;
      *fetched = int32_t(t < rr_end ? t : rr_end);
    }
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
    const int64_t t = *fetched;
    asm volatile("bar.sync 1, 128;\n" ::: "memory");  // *fetched is rewritten next time
    owed = false;
    return t;
  }

  __device__ bool next_any(Segment& s, int tid = 0) {
    int64_t tile;
    if (owed) tile_rr = fetch_take(tid);
    if (tile_rr < rr_end) {
      const int parts = split();
      tile = tile_rr / parts;
      s.part = int(tile_rr % parts);
      if (fetched) fetch_issue(tid); else tile_rr += stride;
      s.kb0 = p.KB * s.part / parts;
      s.kb1 = p.KB * (s.part + 1) / parts;
    } else {
      if (fetched && tile_rr != kFetchDone) {
        // This CTA fetches no more: counted once; the last CTA to count zeroes both counters for
        // the next launch (every CTA has made its last fetch by then).
        if (tid == 0 && atomicAdd(p.fetch_counters + 1, 1) == int(stride) - 1) {
          atomicExch(p.fetch_counters, 0);
          atomicExch(p.fetch_counters + 1, 0);
        }
        tile_rr = kFetchDone;
      }
      s.part = 0;
      if (unit >= unit_end) return false;
      tile = unit / p.KB;
      s.kb0 = int(unit % p.KB);
      const int64_t left = unit_end - unit;
      s.kb1 = left < p.KB - s.kb0 ? s.kb0 + int(left) : p.KB;
      unit += s.kb1 - s.kb0;
    }
    s.tile = int(tile);
    s.pair = 0;
    const int NB = weight_tiles(p);
    if (tile < static_tiles(p)) {
      s.e = int(tile / NB);
      s.wb = int(tile % NB);
      s.tb = 0;
    } else {
      tile -= static_tiles(p);
      // Expert of the tile: the last e with first(e) <= tile (empty experts repeat), first(e) =
      // NB * tile_offsets[e] (or item_offsets[e], HalfTile).
      auto first = [&](int e) {
        if constexpr (HalfTile<Cfg>::kOn) return int64_t(ss.item_offsets[e]);
        return int64_t(NB) * ss.tile_offsets[e];
      };
      int lo = 0, hi = p.E;  // invariant: first(lo) <= tile < first(hi)
      while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (first(mid) <= tile) lo = mid; else hi = mid;
      }
      s.e = lo;
      const int local = int(tile - first(lo));
      const int token_tiles = ss.tile_offsets[lo + 1] - ss.tile_offsets[lo];
      const int tb0 = p.static_tiles ? 1 : 0;
      const half_walk::Item it = half_walk::item(
          local, token_tiles, NB, HalfTile<Cfg>::kOn && HalfTile<Cfg>::expert_has(p, count_of(lo), token_tiles));
      s.wb = it.wb;
      s.tb = tb0 + it.tb;
      s.pair = it.pair;
    }
    s.slot0 = s.e * p.T + s.tb * Cfg::BLOCK_T;
    s.row0 = ss.route_offsets[s.e] + s.tb * Cfg::BLOCK_T;
    s.nrows = min(Cfg::BLOCK_T, count_of(s.e) - s.tb * Cfg::BLOCK_T);
    return true;
  }
};

// The schedule, in every CTA's shared memory: copied from the schedule kernel's output, or built
// from the ids (fused schedule, decode): stage the ids (a dropped route is -1: an id outside
// [0, E) or one its token already chose, counted once by CTA 0), count routes per expert, and scan
// the token tiles and the route offsets. The same table the schedule kernel builds from the same
// ids. All threads of the CTA.
template <class Cfg>
__device__ void build_schedule(const GroupedGemmParams& p, typename Cfg::SharedStorage& ss);

template <class Cfg>
__device__ void load_schedule(const GroupedGemmParams& p, typename Cfg::SharedStorage& ss) {
  if (!(Cfg::kFusedRoutes > 0 && p.fused_schedule)) {
    for (int e = threadIdx.x; e <= p.E; e += Cfg::kThreads) {
      ss.tile_offsets[e] = p.tile_offsets[e];
      ss.route_offsets[e] = p.route_offsets[e];
      if (e < p.E) ss.counts[e] = p.counts[e];
    }
    if constexpr (HalfTile<Cfg>::kOn) {
      // The walk's items per expert (HalfTile::items), scanned.
      __syncthreads();
      constexpr int kPer = (Cfg::kMaxExperts + Cfg::kThreads - 1) / Cfg::kThreads;
      const int nb = p.NB / Cfg::kWaves;
      int items[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int e = threadIdx.x * kPer + i;
        if (e < p.E) {
          const int tiles = ss.tile_offsets[e + 1] - ss.tile_offsets[e];
          items[i] = half_walk::items(tiles, nb, HalfTile<Cfg>::expert_has(p, min(ss.counts[e], p.T), tiles));
        } else {
          items[i] = 0;
        }
      }
      int total = 0;
      cub::BlockScan<int, Cfg::kThreads>(ss.scan).ExclusiveSum(items, items, total);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int e = threadIdx.x * kPer + i;
        if (e < p.E) ss.item_offsets[e] = items[i];
      }
      if (threadIdx.x == 0) ss.item_offsets[p.E] = total;
    }
    return;
  }
  if constexpr (Cfg::kFusedRoutes > 0) build_schedule<Cfg>(p, ss);
}

// The fused schedule's table, built from the ids (see load_schedule).
template <class Cfg>
__device__ void build_schedule(const GroupedGemmParams& p, typename Cfg::SharedStorage& ss) {
  for (int e = threadIdx.x; e < p.E; e += Cfg::kThreads) ss.counts[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < p.R; i += Cfg::kThreads) {
    const bool dropped = route_dropped(p.topk_ids, i, p.k, p.E);
    const int e = dropped ? -1 : p.topk_ids[i];
    ss.ids[i] = e;
    if (!dropped) atomicAdd(&ss.counts[e], 1);
    else if (blockIdx.x == 0 && p.status) atomicAdd(p.status + kStatusDropped, 1);
  }
  __syncthreads();
  constexpr int kPer = (Cfg::kMaxExperts + Cfg::kThreads - 1) / Cfg::kThreads;
  int tiles[kPer], routes[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = threadIdx.x * kPer + i;
    const int count = e < p.E ? ss.counts[e] : 0;
    const int token_tiles = (count + Cfg::BLOCK_T - 1) / Cfg::BLOCK_T;
    tiles[i] = max(token_tiles - (p.static_tiles ? 1 : 0), 0);
    routes[i] = count;
  }
  int total_tiles = 0, total_routes = 0;
  cub::BlockScan<int, Cfg::kThreads>(ss.scan).ExclusiveSum(tiles, tiles, total_tiles);
  __syncthreads();  // the scan storage is reused
  cub::BlockScan<int, Cfg::kThreads>(ss.scan).ExclusiveSum(routes, routes, total_routes);
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = threadIdx.x * kPer + i;
    if (e < p.E) {
      ss.tile_offsets[e] = tiles[i];
      ss.route_offsets[e] = routes[i];
    }
  }
  if (threadIdx.x == 0) {
    ss.tile_offsets[p.E] = total_tiles;
    ss.route_offsets[p.E] = total_routes;
  }
}

// Fused schedule: the routes of tile s's columns are expert s.e's routes in ascending route order,
// ranks [tb * BLOCK_T, tb * BLOCK_T + nrows): every CTA (and both GEMMs of a layer) derive the same
// order from the ids alone. The 128 producer threads rank 128 ids per step (ballot + per-warp
// counts; named barrier 1: the producer warpgroup only).
template <class Cfg>
__device__ void build_columns(const GroupedGemmParams& p, typename Cfg::SharedStorage& ss,
                              const Segment& s, int32_t* col_route, int tid) {
  const int warp = tid / 32, lane = tid % 32;
  const int first = s.tb * Cfg::BLOCK_T, last = first + s.nrows;
  int base = 0;
  for (int i0 = 0; i0 < p.R && base < last; i0 += 128) {
    const int i = i0 + tid;
    const bool match = i < p.R && ss.ids[i] == s.e;
    const uint32_t ballot = __ballot_sync(0xffffffffu, match);
    if (lane == 0) ss.warp_count[warp] = __popc(ballot);
    asm volatile("bar.sync 1, 128;\n" ::: "memory");
    int before = base, total = base;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const int c = ss.warp_count[w];
      before += w < warp ? c : 0;
      total += c;
    }
    const int rank = before + __popc(ballot & ((1u << lane) - 1u));
    if (match && rank >= first && rank < last) col_route[rank - first] = i;
    base = total;
    asm volatile("bar.sync 1, 128;\n" ::: "memory");  // warp_count is rewritten next step
  }
}

// Writes tile s's columns into its meta slot: the route of each column (-1: absent) and, for the
// combine, its routing weight (1 for a routed route whose weight went on the input). Producer
// warpgroup; on return every producer thread sees the slot's routes (named barrier 1).
template <class Cfg>
__device__ void publish_columns(const GroupedGemmParams& p, typename Cfg::SharedStorage& ss,
                                const Segment& s, typename Cfg::TileMeta& m, int tid) {
  const bool fused = Cfg::kFusedRoutes > 0 && p.fused_schedule;
  // No sorted_route table: the routes are the compact rows themselves (the NVFP4 grouped GEMM).
  if (tid < Cfg::BLOCK_T)
    m.col_route[tid] = fused || tid >= s.nrows ? -1 : p.sorted_route ? p.sorted_route[s.slot0 + tid] : s.row0 + tid;
  if (fused) {
    asm volatile("bar.sync 1, 128;\n" ::: "memory");  // the -1 fill lands before the ranks
    build_columns<Cfg>(p, ss, s, m.col_route, tid);
  }
  asm volatile("bar.sync 1, 128;\n" ::: "memory");
  if (Cfg::kEpi == GemmEpilogue::combine && tid < Cfg::BLOCK_T) {
    const int route = m.col_route[tid];
    float w = 0.0f;
    if (route >= 0)
      w = p.weight_on_input && route % p.k < p.k_routed ? 1.0f : p.topk_weights[route];
    m.col_weight[tid] = w;
    // The division by k happens here once per column, not per accumulator in the epilogue.
    m.col_out[tid] = route < 0 ? -1 : p.deterministic ? route : route / p.k;
  }
  if (tid == 0) m.seg = s;
}

}  // namespace fusedmoe::detail
