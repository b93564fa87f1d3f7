// Contract of the grouped GEMM engine (src/gemm/sm90_grouped_gemm.cuh): one persistent kernel
// skeleton with swappable parts (tile scheduler, weight loader x row loader x MMA policy,
// epilogue) that runs every GEMM of the MoE layer and of the FP8 projection.
//
// For every tile (expert e, weight tile wb, token tile tb) of the schedule:
//   acc[n, c] = sum_k W[e, n, k] * A[row(c), k]          n in the tile's 128 weight rows,
//                                                         c in its BLOCK_T route columns
// with, for fp8_block weights, the per-128-K promotion acc += sb(e, n, kb) * sa(row(c), kb) * part.
// Columns are routes of expert e: slots sorted_route[e*T + tb*BLOCK_T + c] (or, with the fused
// schedule, expert e's routes in ascending route order). Rows:
//   gathered  A = a[row(route)], row(route) = route / k (+ shared_row_offset for shared routes):
//             one row per token, read by cp.async (projection, layer GEMM 1)
//   tma       A = a[route_offsets[e] + tb*BLOCK_T + c]: compact rows in slot order, read by TMA
//             (layer GEMM 2 reads GEMM 1's output); fp8 scales per 64 columns (tma) or per 128
//             (tma_s128)
// Epilogues:
//   combine   out[token(c), n] += w(c) * (acc + bias[e, n]) (fp32 atomics), or in deterministic
//             mode out[route(c), n] = ... (one row per route, whole tiles, no split K; e2m1
//             configs may store those rows as bf16 / f16: out_type)
//   swiglu    weight rows come in 8-row gate/up pairs (the layer's prepared layout, see
//             src/layer; swiglu_intermediate says which pair is intermediate i):
//             h[row(c), 64*wb + i] = act(gate_i + bg, up_i + bu), stored as e4m3
//             with one fp32 scale per h_block (64, or 128 for two-wave tokens-as-M configs)
//             columns (h_scale) or as bf16; whole tiles only
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "gemm/e2m1_layout.hpp"
#include "gemm/gemm_config.hpp"

namespace fusedmoe::detail {

/// Experts one GEMM launch can address (routed + shared chunks): the tile table lives in shared
/// memory. The layer and the projection refuse more (see their validation).
constexpr int kGemmMaxExperts = 520;
/// Routes up to which a BLOCK_T <= 64 config can fuse the schedule into the GEMM (ids staged in
/// shared memory), and up to which the hosts choose to (moe_fp8.cpp says why).
constexpr int kMaxFusedRoutes = 4096;
constexpr int kFusedScheduleRoutes = 512;

struct GroupedGemmParams {
  // ---- weights: [E * n_rows, K] row-major, TMA box 128 rows x 128 bytes, 128B swizzle
  CUtensorMap w_desc;
  const float* w_scale;       // fp8: [E, NB, KB, sb_groups]
  int sb_groups;              // 1: one scale per (128-row tile, k-block) (DeepSeek's layout; the
                              // combine configs); 16: one per 8-row group (the swiglu configs:
                              // the layer's gate/up layout)
  int n_rows;                 // weight rows per expert in w_desc (NB * 128 for prepared layouts)
  // e2m1 (NVFP4) weights instead of w_desc: prepared blocks [E, NB, KB] of e2m1::kBlockBytes
  // (src/gemm/e2m1_layout.hpp), and each prepared row's global scale * 2^26, [E, NB * 128]
  const uint8_t* w_blocks;
  const float* row_scale;
  uint32_t e2m1_scale_mul = e2m1::kScaleMul;  // always 16; a parameter on purpose (scale_pair)
  // ---- activations
  const uint8_t* a;           // gathered: rows of K elements, row stride lda bytes
  int64_t lda;
  CUtensorMap a_desc;         // tma: [R, K] rows, box BLOCK_T x 128 bytes, 128B swizzle
  const float* sa;            // fp8: activation scales, row r's at sa + r * sa_ld
  int64_t sa_ld;
  int shared_row_offset;      // gathered: routes j >= k_routed read row token + this
  // ---- routing and the schedule (src/schedule)
  const int32_t* counts;        // [E]
  const int32_t* tile_offsets;  // [E + 1] token tiles
  const int32_t* route_offsets; // [E + 1]
  const int32_t* sorted_route;  // [E * T]; nullptr: the routes of expert e are its compact rows
                                // route_offsets[e] + i (k = 1: the NVFP4 grouped GEMM, src/grouped)
  const float* topk_weights;    // [T * k]
  const int32_t* topk_ids;      // [T * k] (fused schedule)
  int32_t* status;              // fused schedule: dropped routes are counted here (nullptr: not
                                // counted, e.g. by the second GEMM of a layer, which sees the same ids)
  int T, E, k;                  // k: routes per token (routed + shared)
  int k_routed;                 // routes j < k_routed are routed, the rest shared
  int weight_on_input;          // routed routes have weight 1 in the combine (it is on the input)
  int fused_schedule, R;        // R = T * k
  int static_tiles;             // tiles [0, E*NB): (e, wb, tb 0) for every expert
  // ---- the problem
  int N, K, KB, NB;             // N: real output rows per expert (combine), NB: weight tiles
  // ---- epilogue
  int deterministic;            // combine: one row per route, whole tiles
  int paired_rows;              // combine: weight rows come as 16-row groups whose rows r < 8 are
                                // outputs 2r and rows r >= 8 outputs 2(r-8)+1 (the layer's prepared
                                // down weights), so each thread holds two adjacent outputs and adds
                                // them with one 8-byte reduction
  float* out;                   // combine: fast [T, N]; deterministic [R, N]
  // Deterministic combine into rows of bf16 / f16 instead of `out`: out_lowp [R, N], each element
  // rounded once (RNE). bf16: any combine config (the layer's fast mode at prefill, summed by
  // finalize); f16: e2m1 configs only (the NVFP4 grouped GEMM op, src/grouped).
  GemmOut out_type = GemmOut::f32;
  void* out_lowp = nullptr;
  // bf16 rows in slot order instead of by route (GemmConfig::kStagedRows configs only): route
  // (slot) c of a tile goes to row row0 + c of out_lowp, the A rows' order; full tiles by TMA
  // tensor stores through out_desc ([R, N] bf16, box 128 rows x 64 columns, 128-byte swizzle),
  // partial tiles by plain stores. route_row [R]: the kernel writes each route's row there
  // (route_row[route] = row0 + c, once per token tile), where finalize reads it.
  int sorted_rows = 0;
  CUtensorMap out_desc;
  int32_t* route_row = nullptr;
  const float* bias;            // combine: [E, N], added once; swiglu: [E, NB * 128] prepared rows
  uint8_t* h;                   // swiglu: [R, ldh bytes] intermediate rows
  int64_t ldh;
  float* h_scale;               // swiglu fp8: [R, h_scale_ld] one scale per h_block columns
  int64_t h_scale_ld;
  int h_block = 64;             // swiglu fp8: columns per scale of h: 64, or 128 where the config
                                // holds 128 intermediate values of a token (Epilogue::kStoresPairs)
  int thread_order = 0;         // swiglu: the prepared gate/up pairs in thread order
                                // (swiglu_intermediate); tokens-as-M configs need it
  int act_clamped;              // swiglu: gpt-oss's clamped variant
  float act_alpha, act_limit;
  // swiglu split K (decode): each tile's K in `split` parts (1, 2 or 4) run as separate
  // work items, so a few hundred tiles still fill every SM. Each part stores its fp32 partial to
  // split_partials[part][tile] (tile < kSplitMaxTiles, in the table's numbering: no static tiles),
  // counts in split_counters[tile] (zeroed by route_quant), and the last part to arrive sums the
  // parts in part order (deterministic) and runs the epilogue.
  int split;
  float* split_partials;        // [kMaxSplit, kSplitMaxTiles, 256 threads x BLOCK_T / 2]
  int32_t* split_counters;      // [kSplitMaxTiles]
  int prefetch_units;           // L2 prefetch of the weights expected first (0: off)
  int narrow_tails = 1;         // token tiles whose routes fit a half / a quarter of BLOCK_T run
                                // narrower wgmmas (fp8 and e2m1 weights as M: TileWidth,
                                // sm90_gemm_mainloop.cuh), two-wave tokens-as-M combine tiles of
                                // <= 64 routes at half height (HalfTile); 0: every tile at full size
  // Whole tiles after each CTA's first taken in order from a counter instead of round robin: CTAs
  // that share a weight tile then run its items together whatever their speed. Two words: [0] the
  // next tile, [1] the CTAs done fetching; zero at launch, the kernel's last CTA zeroes them again
  // (the layer's status words kStatusUpItems / kStatusDownItems). nullptr: round robin.
  int32_t* fetch_counters = nullptr;
  int lean_producer = 0;  // 1: one producer warp runs the k-loop where it can (GemmConfig::kLeanCapable)
};

/// The output row that prepared row r of a paired_rows weight tile holds: in each 16, rows r < 8
/// are outputs 2r and rows r >= 8 outputs 2(r-8)+1 (so one thread holds two adjacent outputs).
constexpr int paired_output(int r) {
  return r / 16 * 16 + (r % 16 < 8 ? 2 * (r % 16) : 2 * (r % 16 - 8) + 1);
}

/// The intermediate index (of a swiglu weight tile's 64) whose gate and up rows are prepared rows
/// 16 g + j and 16 g + 8 + j (g, j in [0, 8)). Blocked order: 8 g + j. Thread order:
/// 16 (j / 2) + 2 g + j % 2, so that the thread of a tokens-as-M wave that holds pairs j = 2 q,
/// 2 q + 1 of every group (q = lane % 4) holds intermediates 16 q .. 16 q + 15 of its tokens, side
/// by side: it stores each token's 16 fp8 codes as one 16-byte store, with no staging tile in
/// shared memory and no barrier. Either order is the same 64 intermediates per tile, so the
/// per-tile scales do not change; the per-8-row-group fp8 scales do, which is why the layer takes
/// thread order only where all of a tile's gate groups share one scale (and its up groups another).
constexpr int swiglu_intermediate(int g, int j, bool thread_order) {
  return thread_order ? 16 * (j / 2) + 2 * g + j % 2 : 8 * g + j;
}

/// Split K of the swiglu GEMM: at most this many parts, and only when the tiles fit the buffers.
constexpr int kMaxSplit = 4;
constexpr int kSplitMaxTiles = 384;
constexpr int kSplitBlockT = 16;  // decode only: the partials are sized for this token-tile width

/// Persistent launch, one CTA per SM, chained with PDL.
void launch_grouped_gemm(GemmConfigId id, const GroupedGemmParams& p, int num_sms,
                         cudaStream_t stream);

}  // namespace fusedmoe::detail
