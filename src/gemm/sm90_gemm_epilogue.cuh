// The grouped GEMM's epilogues. They read the accumulators and the tile's meta slot (segment and
// columns), never a k-stage. They store one 128-row wave at a time, as the 128-row weight tile
// s.wb it is (the consumers pass each wave's segment). Fragment layout (sm90_gemm_mainloop.cuh):
// acc[4b + 2r + h] is weight row 64 wgc + 16 warp + lane/4 + 8r of the wave, column
// 8b + 2(lane%4) + h; with tokens_m the transpose (token 64 wgc + 16 warp + lane/4 + 8r, weight
// row 8b + 2(lane%4) + h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cuda/atomic>
#include <cuda/ptx>

#include <type_traits>

#include "common/ptx/sm90_ptx.cuh"
#include "gemm/sm90_gemm_scheduler.cuh"

namespace fusedmoe::detail {

template <class Cfg, GemmEpilogue kEpi = Cfg::kEpi>
struct Epilogue;

// silu(g) * u, or gpt-oss's clamped (u + 1) * g * sigmoid(alpha * g) with g <= limit and
// |u| <= limit (the swiglu epilogue's, and the decode GEMV's, src/layer).
// The sigmoid is g / (1 + 2^(-g log2 e)) with the exponential and the reciprocal each one MUFU
// instruction (ptx::ex2_approx_ftz / rcp_approx_ftz), not the IEEE division (a subroutine with a
// branch per call) nor __expf (five instructions without -use_fast_math). ncu of the gate/up
// GEMM (session 36) put the swiglu epilogue at about a fifth of its consumers' time at K = 2048,
// ~22 instructions per value; this saves ~5 of them, and the layer ran 0.3-0.9% faster (H200):
// the epilogue waits (shuffles, barriers, stores) more than it issues. The difference is a few
// fp32 ulps, far below the intermediate's fp8 / bf16 rounding. For g -> -inf the divisor
// overflows to inf and the quotient is -0, silu's limit.
template <bool kClamped>
__device__ __forceinline__ float swiglu_activation(float g, float u, float alpha, float limit) {
  constexpr float kMinusLog2e = -1.4426950408889634f;
  if constexpr (kClamped) {
    // Comparisons, not fminf: a NaN must stay NaN (as in the reference).
    g = g > limit ? limit : g;
    u = u > limit ? limit : (u < -limit ? -limit : u);
    return (u + 1.0f) * (g * ptx::rcp_approx_ftz(1.0f + ptx::ex2_approx_ftz(kMinusLog2e * alpha * g)));
  }
  return g * ptx::rcp_approx_ftz(1.0f + ptx::ex2_approx_ftz(kMinusLog2e * g)) * u;
}

// combine: out[token, n] += w * (acc + bias[e, n]) by fp32 atomics (the bias once per tile: by
// the segment that starts at k-block 0), or in deterministic mode out[route, n] = ... (whole
// tiles, every element written once by one CTA in a fixed order). The column loop is compiled
// once per (row pairing, mode), chosen outside it: ncu showed the per-element mode branches
// costing as many instructions as the tile's whole mainloop.
template <class Cfg>
struct Epilogue<Cfg, GemmEpilogue::combine> {
  static constexpr bool kStoresPairs = false;  // (swiglu only)
  // kPaired: this thread's two rows are adjacent outputs n_a, n_a + 1 (N % 16 == 0, in range or
  // out together); else rows n_a and n_a + 8.
  // kOut (deterministic only): the element type of the rows; f32 into p.out, bf16 / f16 into
  // p.out_lowp (each value rounded once, a paired thread's two as one 4-byte store).
  template <bool kPaired, bool kDet, GemmOut kOut = GemmOut::f32>
  __device__ static void columns(const GroupedGemmParams& p, const typename Cfg::TileMeta& m,
                                 const float (&acc)[Cfg::kAccRegs], int n_a, int n_b, float bias_a,
                                 float bias_b, int lane) {
    static_assert(kOut == GemmOut::f32 || kDet, "bf16 / f16 rows: deterministic combine only");
    const bool ok_a = n_a < p.N, ok_b = n_b < p.N;
    if (!ok_a && !ok_b) return;
    using OutT = std::conditional_t<kOut == GemmOut::bf16, __nv_bfloat16,
                                    std::conditional_t<kOut == GemmOut::f16, __half, float>>;
    OutT* const out = kOut == GemmOut::f32 ? reinterpret_cast<OutT*>(p.out) : static_cast<OutT*>(p.out_lowp);
    const int64_t ld = p.N;
#pragma unroll
    for (int b = 0; b < Cfg::BLOCK_T / 8; ++b) {
      const int col = 8 * b + 2 * (lane % 4);  // this thread's columns col, col + 1
      const int2 rows = *reinterpret_cast<const int2*>(&m.col_out[col]);
      const float2 ws = *reinterpret_cast<const float2*>(&m.col_weight[col]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = h == 0 ? rows.x : rows.y;
        if (r < 0) continue;  // absent column
        const float w = h == 0 ? ws.x : ws.y;
        const float va = (acc[4 * b + h] + bias_a) * w, vb = (acc[4 * b + 2 + h] + bias_b) * w;
        OutT* row = out + int64_t(r) * ld;
        if constexpr (kOut == GemmOut::bf16) {
          if constexpr (kPaired) *reinterpret_cast<__nv_bfloat162*>(row + n_a) = __floats2bfloat162_rn(va, vb);
          else {
            if (ok_a) row[n_a] = __float2bfloat16_rn(va);
            if (ok_b) row[n_b] = __float2bfloat16_rn(vb);
          }
        } else if constexpr (kOut == GemmOut::f16) {
          if constexpr (kPaired) *reinterpret_cast<__half2*>(row + n_a) = __floats2half2_rn(va, vb);
          else {
            if (ok_a) row[n_a] = __float2half_rn(va);
            if (ok_b) row[n_b] = __float2half_rn(vb);
          }
        } else if constexpr (kPaired) {
          if constexpr (kDet) *reinterpret_cast<float2*>(row + n_a) = make_float2(va, vb);
          else ptx::red_add_v2(row + n_a, va, vb);
        } else if constexpr (kDet) {
          if (ok_a) row[n_a] = va;
          if (ok_b) row[n_b] = vb;
        } else {
          if (ok_a) atomicAdd(row + n_a, va);  // result unused: compiles to RED
          if (ok_b) atomicAdd(row + n_b, vb);
        }
      }
    }
  }

  // tokens_m: this thread holds tokens c0 = 64 wgc + 16 warp + lane/4 and c0 + 8, and rows
  // 8b + 2(lane%4) + h of the wave. Each reduction adds 4 adjacent outputs of one token (16
  // bytes; a quad then covers 64 contiguous bytes of the token's row: 8-byte reductions left
  // every other 8 bytes of each sector to a second instruction, measured 1.3-1.45x slower):
  //  - kPaired rows (in each 16, rows j < 8 are outputs 2j and rows j >= 8 outputs 2(j-8)+1):
  //    b = 2g, 2g + 1 and h = 0, 1 are the four outputs 16g + 4(lane%4) + 0..3;
  //  - plain rows with N % 4 == 0 (kQuad): outputs 8b + 2(lane%4) + h, so lanes q and q^1 swap
  //    one pair (even q sends b = 2g + 1's, odd q b = 2g's): even q adds 16g + 2q + 0..3, odd q
  //    16g + 8 + 2(q-1) + 0..3;
  //  - other plain rows: one output at a time.
  // kOut (deterministic only): f32 rows into p.out, or bf16 rows into p.out_lowp (4 outputs as
  // one 8-byte store: a quad still covers whole 32-byte sectors).
  enum class Rows { plain, paired, quad };
  template <Rows kRows, bool kDet, GemmOut kOut = GemmOut::f32>
  __device__ static void tokens_m_rows(const GroupedGemmParams& p, const Segment& s,
                                       const typename Cfg::TileMeta& m,
                                       const float (&acc)[Cfg::kAccRegs], int c0, int q) {
    static_assert(kOut == GemmOut::f32 || (kOut == GemmOut::bf16 && kDet), "bf16 rows: deterministic only");
    const int n0 = s.wb * Cfg::WAVE_W;
    const float* bias = p.bias && s.kb0 == 0 ? p.bias + int64_t(s.e) * p.N : nullptr;
    // Four adjacent outputs of one row: fp32 (16 bytes) or bf16 (8 bytes).
    auto store4 = [&](int64_t off, const float (&v)[4]) {
      if constexpr (kOut == GemmOut::bf16) {
        __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
        uint2 bits;
        bits.x = *reinterpret_cast<uint32_t*>(&lo);
        bits.y = *reinterpret_cast<uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.out_lowp) + off) = bits;
      } else if constexpr (kDet) {
        *reinterpret_cast<float4*>(p.out + off) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        ptx::red_add_v4(p.out + off, v[0], v[1], v[2], v[3]);
      }
    };
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // lanes q and q^1 share it (same token); slot order: the tile's row row0 + c (sorted_rows)
      const int c = c0 + 8 * r;
      const int out_row = Cfg::kStagedRows && p.sorted_rows ? (c < s.nrows ? s.row0 + c : -1) : m.col_out[c];
      const float w = m.col_weight[c0 + 8 * r];
      const int64_t row = int64_t(out_row) * p.N;
      if constexpr (kRows == Rows::paired) {
        if (out_row < 0) continue;  // absent column
#pragma unroll
        for (int g = 0; g < Cfg::kAccRegs / 8; ++g) {
          const int n = n0 + 16 * g + 4 * q;  // N % 16 == 0: n .. n + 3 in range together
          if (n >= p.N) continue;
          float v[4];
#pragma unroll
          for (int j = 0; j < 4; ++j)  // output n + j: h = j / 2, b = 2g + j % 2
            v[j] = (acc[4 * (2 * g + j % 2) + 2 * r + j / 2] + (bias ? bias[n + j] : 0.0f)) * w;
          store4(row + n, v);
        }
      } else if constexpr (kRows == Rows::quad) {
        const bool odd = q & 1;
#pragma unroll
        for (int g = 0; g < Cfg::kAccRegs / 8; ++g) {
          // The swap runs on every lane (before any lane skips), so the shuffles converge. The
          // accumulator indices stay compile-time constants (selects on values, never a
          // runtime index: that would move the whole fragment to local memory).
          const int e = 4 * (2 * g) + 2 * r, o = 4 * (2 * g + 1) + 2 * r;  // b = 2g, 2g + 1
          const float k0 = odd ? acc[o] : acc[e], k1 = odd ? acc[o + 1] : acc[e + 1];
          const float got0 = __shfl_xor_sync(0xffffffffu, odd ? acc[e] : acc[o], 1);
          const float got1 = __shfl_xor_sync(0xffffffffu, odd ? acc[e + 1] : acc[o + 1], 1);
          const int n = n0 + 16 * g + (odd ? 8 + 2 * (q - 1) : 2 * q);  // N % 4 == 0: n .. n + 3
          if (out_row < 0 || n >= p.N) continue;
          float v[4] = {odd ? got0 : k0, odd ? got1 : k1, odd ? k0 : got0, odd ? k1 : got1};
#pragma unroll
          for (int j = 0; j < 4; ++j) v[j] = (v[j] + (bias ? bias[n + j] : 0.0f)) * w;
          store4(row + n, v);
        }
      } else {
        if (out_row < 0) continue;  // absent column
#pragma unroll
        for (int b = 0; b < Cfg::kAccRegs / 4; ++b)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int n = n0 + 8 * b + 2 * q + h;
            if (n >= p.N) continue;
            const float v = (acc[4 * b + 2 * r + h] + (bias ? bias[n] : 0.0f)) * w;
            if constexpr (kOut == GemmOut::bf16) static_cast<__nv_bfloat16*>(p.out_lowp)[row + n] = __float2bfloat16_rn(v);
            else if constexpr (kDet) p.out[row + n] = v;
            else atomicAdd(p.out + row + n, v);  // result unused: compiles to RED
          }
      }
    }
  }

  // tokens_m: the wave of s.wb for tokens c0, c0 + 8 of the tile, the variant chosen by the
  // parameters.
  __device__ static void store_tokens_m(const GroupedGemmParams& p, const Segment& s,
                                        const typename Cfg::TileMeta& m,
                                        const float (&acc)[Cfg::kAccRegs], int c0, int q) {
    if (p.out_type == GemmOut::bf16) {  // the launch checked: deterministic
      if (p.paired_rows) tokens_m_rows<Rows::paired, true, GemmOut::bf16>(p, s, m, acc, c0, q);
      else if (p.N % 4 == 0) tokens_m_rows<Rows::quad, true, GemmOut::bf16>(p, s, m, acc, c0, q);
      else tokens_m_rows<Rows::plain, true, GemmOut::bf16>(p, s, m, acc, c0, q);
      return;
    }
    if (p.paired_rows) {
      if (p.deterministic) tokens_m_rows<Rows::paired, true>(p, s, m, acc, c0, q);
      else tokens_m_rows<Rows::paired, false>(p, s, m, acc, c0, q);
    } else if (p.N % 4 == 0) {
      if (p.deterministic) tokens_m_rows<Rows::quad, true>(p, s, m, acc, c0, q);
      else tokens_m_rows<Rows::quad, false>(p, s, m, acc, c0, q);
    } else {
      if (p.deterministic) tokens_m_rows<Rows::plain, true>(p, s, m, acc, c0, q);
      else tokens_m_rows<Rows::plain, false>(p, s, m, acc, c0, q);
    }
  }

  // Fast mode's bf16 rows of a full tile in slot order (Cfg::kStagedRows, p.sorted_rows): the
  // outputs go to the staging boxes (the 8 bytes of outputs 16g + 4q + 0..3 of wave w as
  // tokens_m_rows<paired> forms them: box 2w + g / 4, bytes 32 (g % 4) + 8q of the row, at the
  // swizzled chunk), then thread 0 stores the 4 boxes (128 rows x 64 outputs each, those past N
  // clipped by the TMA unit) at rows row0 .. row0 + 127 and does not wait: the stores run during
  // the next tile's mainloop. Before the boxes are written again, thread 0 waits for its stores'
  // reads and the consumers meet at a barrier; the writes reach the TMA unit's async proxy through
  // fence.proxy.async and the barrier. Session 38 measured this epilogue at 15-18% of the down
  // GEMM's time at T=8192 with plain stores (the epilogue run twice), and one bulk copy per token
  // and wave 5-7% slower still (docs/tried/staged_route_rows.diff).
  __device__ static void sync_consumers() { asm volatile("bar.sync 2, 256;\n" ::: "memory"); }
  __device__ static void store_rows_staged(const GroupedGemmParams& p, const Segment& s,
                                           const typename Cfg::TileMeta& m,
                                           typename Cfg::SharedStorage& ss,
                                           const float (&acc)[Cfg::kWaves][Cfg::kAccRegs], int wgc, int tid) {
    namespace cptx = cuda::ptx;
    static_assert(Cfg::kStagedRows && Cfg::kWaves == 2, "the staged rows' configs");
    auto& st = ss.staging;
    const int warp = tid / 32, lane = tid % 32, q = lane % 4;
    const bool leader = wgc == 0 && tid == 0;
    const int c0 = 64 * wgc + 16 * warp + lane / 4;
    const int n_tile = s.wb * Cfg::BLOCK_W;
    const float* bias = p.bias && s.kb0 == 0 ? p.bias + int64_t(s.e) * p.N : nullptr;
    if (leader) cptx::cp_async_bulk_wait_group_read(cptx::n32_t<0>{});
    sync_consumers();
#pragma unroll
    for (int w = 0; w < Cfg::kWaves; ++w) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int c = c0 + 8 * r;
        const float wt = m.col_weight[c];
#pragma unroll
        for (int g = 0; g < Cfg::kAccRegs / 8; ++g) {
          const int n = n_tile + Cfg::WAVE_W * w + 16 * g + 4 * q;  // N % 16 == 0: n .. n + 3 together
          float v[4];
#pragma unroll
          for (int j = 0; j < 4; ++j)  // output n + j: h = j / 2, b = 2g + j % 2
            v[j] = (acc[w][4 * (2 * g + j % 2) + 2 * r + j / 2] + (bias && n < p.N ? bias[n + j] : 0.0f)) * wt;
          __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]), hi = __floats2bfloat162_rn(v[2], v[3]);
          uint2 bits;
          bits.x = *reinterpret_cast<uint32_t*>(&lo);
          bits.y = *reinterpret_cast<uint32_t*>(&hi);
          const int byte = 32 * (g % 4) + 8 * q;              // in the box's 128-byte row
          const int chunk = (byte / 16) ^ (c % 8);            // the 128-byte swizzle
          *reinterpret_cast<uint2*>(&st.box[2 * w + g / 4][c][16 * chunk + byte % 16]) = bits;
        }
      }
    }
    cptx::fence_proxy_async(cptx::space_shared);
    sync_consumers();
    if (leader) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int n0 = n_tile + 64 * b;
        if (n0 >= p.N) break;
        const int32_t coords[2] = {n0, s.row0};
        cptx::cp_async_bulk_tensor(cptx::space_global, cptx::space_shared, &p.out_desc, coords, &st.box[b][0][0]);
      }
      cptx::cp_async_bulk_commit_group();
    }
  }

  // A half-height tile (HalfTile, sm90_gemm_scheduler.cuh): consumer c holds wave c (weight tile
  // 2 wb + c) of the tile's first 64 tokens.
  __device__ static void store_half(const GroupedGemmParams& p, const Segment& s,
                                    const typename Cfg::TileMeta& m, typename Cfg::SharedStorage&,
                                    const float (&acc)[Cfg::kAccRegs], int wgc, int tid) {
    static_assert(Cfg::kTokensM && Cfg::kWaves == 2, "two-wave tokens-as-M tiles");
    const int warp = tid / 32, lane = tid % 32;
    Segment sw = s;
    sw.wb = 2 * s.wb + wgc;
    store_tokens_m(p, sw, m, acc, 16 * warp + lane / 4, lane % 4);
  }

  __device__ static void store(const GroupedGemmParams& p, const Segment& s,
                               const typename Cfg::TileMeta& m, typename Cfg::SharedStorage&,
                               const float (&acc)[Cfg::kAccRegs], int wgc, int tid) {
    const int warp = tid / 32, lane = tid % 32;
    if constexpr (Cfg::kTokensM) {
      store_tokens_m(p, s, m, acc, 64 * wgc + 16 * warp + lane / 4, lane % 4);
      return;
    }
    const int group = s.wb * Cfg::WAVE_W + 64 * wgc + 16 * warp;  // this warp's 16 weight rows
    // The outputs of this thread's two rows (lane/4 and lane/4 + 8 of the group).
    const bool paired = p.paired_rows;
    const int n_a = group + (paired ? 2 * (lane / 4) : lane / 4);
    const int n_b = paired ? n_a + 1 : n_a + 8;
    float bias_a = 0.0f, bias_b = 0.0f;
    if (p.bias && s.kb0 == 0) {
      const float* b = p.bias + int64_t(s.e) * p.N;
      bias_a = n_a < p.N ? b[n_a] : 0.0f;
      bias_b = n_b < p.N ? b[n_b] : 0.0f;
    }
    // Low-precision rows (the launch checks: deterministic): bf16 for the layer's fast mode at
    // prefill and the NVFP4 grouped GEMM; f16 only for the latter.
    if (p.out_type == GemmOut::bf16) {
      if (paired) columns<true, true, GemmOut::bf16>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
      else columns<false, true, GemmOut::bf16>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
      return;
    }
    if constexpr (Cfg::kE2M1) {
      if (p.out_type == GemmOut::f16) {
        if (paired) columns<true, true, GemmOut::f16>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
        else columns<false, true, GemmOut::f16>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
        return;
      }
    }
    if (paired) {
      if (p.deterministic) columns<true, true>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
      else columns<true, false>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
    } else {
      if (p.deterministic) columns<false, true>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
      else columns<false, false>(p, m, acc, n_a, n_b, bias_a, bias_b, lane);
    }
  }
};

// swiglu: the tile's weight rows are 8-row gate/up pairs (row 16g + j is gate, 16g + 8 + j up, of
// intermediate index swiglu_intermediate(g, j, p.thread_order) of the tile's 64, grouped_gemm.hpp),
// so each thread holds matching gate and up values:
//   v = silu(gate + bg) * (up + bu), or gpt-oss's clamped (up + 1) * gate * sigmoid(alpha * gate)
// with gate <= limit and |up| <= limit. Then, per column (route) and the tile's 64 intermediate
// values: fp8: amax over the 64 (warp shuffles, then 8 warps through shared memory), scale =
// amax / 448, codes e4m3(v * 448 / amax) (the host quantizer's operations, block 64); bf16: RNE.
// Weights as M: the codes go through a staging tile in shared memory so each row leaves as 16-byte
// stores. Tokens as M (thread order): each thread stores its tokens' 16 codes directly.
// Named barrier 2 spans the two consumer warpgroups.
template <class Cfg>
struct Epilogue<Cfg, GemmEpilogue::swiglu> {
  // Two-wave fp8 tokens-as-M tiles hold 128 intermediate values of each token (waves 2 wb and
  // 2 wb + 1): they can quantize them with one scale (GroupedGemmParams::h_block = 128).
  static constexpr bool kStoresPairs = Cfg::kTokensM && Cfg::kFp8 && Cfg::kWaves == 2;
  __device__ static void sync_consumers() { asm volatile("bar.sync 2, 256;\n" ::: "memory"); }

  template <bool kClamped>
  __device__ static float activation(const GroupedGemmParams& p, float g, float u) {
    return swiglu_activation<kClamped>(g, u, p.act_alpha, p.act_limit);
  }

  // Split K: stores this part's partial sums, and returns whether this part arrived last; then
  // `acc` holds the tile's whole sums, the parts added in part order (whichever arrived last), so
  // the result does not depend on timing. Ordering: the consumers' barrier gathers every
  // thread's stores, one thread counts with an acq_rel atomic at GPU scope (cumulative over what
  // the barrier ordered before it); the last part's threads read the others' partials from L2
  // after that thread's acquire and a second barrier.
  __device__ static bool gather_split(const GroupedGemmParams& p, const Segment& s,
                                      typename Cfg::SharedStorage& ss, float (&acc)[Cfg::kAccRegs],
                                      int ctid) {
    static_assert(Cfg::kAccRegs % 4 == 0, "partials move as float4");
    constexpr int64_t kTileFloats = 256 * Cfg::kAccRegs;
    auto slot = [&](int part) {
      return reinterpret_cast<float4*>(p.split_partials + (int64_t(part) * kSplitMaxTiles + s.tile) * kTileFloats +
                                       int64_t(ctid) * Cfg::kAccRegs);
    };
    float4* mine = slot(s.part);
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs / 4; ++i)
      __stcg(mine + i, make_float4(acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]));
    sync_consumers();
    if (ctid == 0) {
      cuda::atomic_ref<int32_t, cuda::thread_scope_device> count(p.split_counters[s.tile]);
      ss.staging.last = count.fetch_add(1, cuda::std::memory_order_acq_rel) == p.split - 1;
    }
    sync_consumers();
    if (!ss.staging.last) return false;
    float mine_acc[Cfg::kAccRegs];
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) {
      mine_acc[i] = acc[i];
      acc[i] = 0.0f;
    }
    for (int part = 0; part < p.split; ++part) {
      const float4* src = slot(part);
#pragma unroll
      for (int i = 0; i < Cfg::kAccRegs / 4; ++i) {
        const float4 v = part == s.part ? make_float4(mine_acc[4 * i], mine_acc[4 * i + 1],
                                                      mine_acc[4 * i + 2], mine_acc[4 * i + 3])
                                        : __ldcg(src + i);
        acc[4 * i] += v.x;
        acc[4 * i + 1] += v.y;
        acc[4 * i + 2] += v.z;
        acc[4 * i + 3] += v.w;
      }
    }
    return true;
  }

  // One halving step of the column amax across lanes `mask` apart: the lane with the mask bit
  // set keeps the upper half of its values, its partner the lower half, each maxed with the
  // other's copy of the half it keeps (one shuffle per kept value).
  template <int kN>
  __device__ static void halve(const float (&in)[kN], float (&out)[kN / 2], int lane, int mask) {
    const bool upper = lane & mask;
#pragma unroll
    for (int j = 0; j < kN / 2; ++j) {
      const float send = upper ? in[j] : in[j + kN / 2];
      const float keep = upper ? in[j + kN / 2] : in[j];
      out[j] = ptx::abs_max_nan(keep, __shfl_xor_sync(0xffffffffu, send, mask));
    }
  }

  // amax[col] = max |v| over this warp's 8 intermediate rows (the lanes with the same lane % 4)
  // for each of the tile's columns. Halving butterflies over lane bits 4, 3, 2: 7n/8 shuffles for
  // n values per lane instead of 3n; lane l ends with the values of indices
  // j + (n/8)(l/4) (j < n/8), or, when n = 4, index (l/8) for the lanes with bit 2 clear.
  __device__ static void column_amax(const float (&v)[Cfg::BLOCK_T / 4], float* amax, int lane) {
    constexpr int n = Cfg::BLOCK_T / 4;
    static_assert(n >= 4, "BLOCK_T >= 16");
    auto col = [&](int i) { return 8 * (i / 2) + 2 * (lane % 4) + i % 2; };
    float a1[n / 2], a2[n / 4];
    halve<n>(v, a1, lane, 16);
    halve<n / 2>(a1, a2, lane, 8);
    if constexpr (n >= 8) {
      float a3[n / 8];
      halve<n / 4>(a2, a3, lane, 4);
#pragma unroll
      for (int j = 0; j < n / 8; ++j) amax[col(j + (n / 8) * (lane / 4))] = a3[j];
    } else {
      const float a = ptx::abs_max_nan(a2[0], __shfl_xor_sync(0xffffffffu, a2[0], 4));
      if ((lane & 4) == 0) amax[col(lane / 8)] = a;
    }
  }

  // tokens_m (fp8 only, thread order): this thread holds tokens c0 = 64 wgc + 16 warp + lane/4 and
  // c0 + 8, and of the wave's 128 rows (16 g + j: gate of pair j of group g for j < 8, up for
  // j >= 8) rows 8b + 2q + h (q = lane % 4): gate (b = 2g) and up (b = 2g + 1) of pair 2q + h of
  // group g, which in thread order is intermediate 16q + 2g + h: the thread's 16 values of a token
  // are intermediates 16q .. 16q + 15. A token's 64 values are spread over the 4 lanes of a quad:
  // its amax takes two shuffles. Each token's codes leave as one 16-byte store.
  __device__ static void store_tokens_m(const GroupedGemmParams& p, const Segment& s,
                                        const float (&acc)[Cfg::kAccRegs], int wgc, int tid) {
    static_assert(Cfg::kFp8 && Cfg::BLOCK_T == 128, "tokens_m: fp8 intermediate, 128 tokens");
    const int warp = tid / 32, lane = tid % 32, q = lane % 4;
    const int c0 = 64 * wgc + 16 * warp + lane / 4;
    float v[2][16];  // [token r][intermediate 16q + i of the wave]
    tokens_m_values(p, s.e, s.wb, acc, q, v);
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float a = tokens_m_amax(v[r]);
      // Same operations as the host quantizer (fmt::quantize_fp8_block).
      const float scale = a == 0.0f ? 0.0f : a / 448.0f;
      inv[r] = a == 0.0f ? 0.0f : 448.0f / a;
      const int c = c0 + 8 * r;
      if (q == 0 && c < s.nrows) p.h_scale[int64_t(s.row0 + c) * p.h_scale_ld + s.wb] = scale;
    }
    tokens_m_codes_out(p, s, v, inv, s.wb, c0, q);
  }

  // tokens_m: this thread's activations v[r][2g + h] of the wave (128 weight rows from prepared
  // row 128 wave of expert e): intermediate 16q + 2g + h (thread order) of tokens c0 + 8r, with
  // the biases (in prepared-row order).
  __device__ static void tokens_m_values(const GroupedGemmParams& p, int e, int wave,
                                         const float (&acc)[Cfg::kAccRegs], int q, float (&v)[2][16]) {
    const float* bias = p.bias ? p.bias + int64_t(e) * p.n_rows + wave * Cfg::WAVE_W : nullptr;
    // kBias: without a bias no addition at all (x + 0.0f is not x for x = -0, so the compiler
    // kept an FADD of zero per value).
    auto fill = [&](auto act, auto has_bias) {
      constexpr bool kBias = decltype(has_bias)::value;
#pragma unroll
      for (int g = 0; g < 8; ++g)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            float gate = acc[4 * (2 * g) + 2 * r + h], up = acc[4 * (2 * g + 1) + 2 * r + h];
            if constexpr (kBias) {
              gate += bias[16 * g + 2 * q + h];
              up += bias[16 * g + 8 + 2 * q + h];
            }
            v[r][2 * g + h] = act(gate, up);
          }
        }
    };
    // The variant is chosen once per tile, outside the loop.
    auto with_bias = [&](auto act) {
      if (bias) fill(act, std::true_type{});
      else fill(act, std::false_type{});
    };
    if (p.act_clamped) with_bias([&](float g, float u) { return activation<true>(p, g, u); });
    else with_bias([&](float g, float u) { return activation<false>(p, g, u); });
  }

  // max |v| over a token's 64 values of a wave: this thread's 16, then its quad (two shuffles).
  __device__ static float tokens_m_amax(const float (&v)[16]) {
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) a = ptx::abs_max_nan(a, v[i]);
    a = ptx::abs_max_nan(a, __shfl_xor_sync(0xffffffffu, a, 1));
    return ptx::abs_max_nan(a, __shfl_xor_sync(0xffffffffu, a, 2));
  }

  // The codes v * inv of this thread's two tokens c0 + 8r (those of the segment's rows): each
  // token's 16 (intermediates 16q .. 16q + 15 of the wave) as one 16-byte store to
  // h[row0 + c, 64 wave + 16q ...]. A quad writes 64 adjacent bytes of a row: whole sectors.
  __device__ static void tokens_m_codes_out(const GroupedGemmParams& p, const Segment& s,
                                            const float (&v)[2][16], const float (&inv)[2],
                                            int wave, int c0, int q) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int c = c0 + 8 * r;
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {  // element 4i + j in byte j of word i (little endian)
        const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v[r][4 * i] * inv[r], v[r][4 * i + 1] * inv[r]),
                                                     __NV_SATFINITE, __NV_E4M3);
        const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v[r][4 * i + 2] * inv[r], v[r][4 * i + 3] * inv[r]),
                                                     __NV_SATFINITE, __NV_E4M3);
        w[i] = lo | (hi << 16);
      }
      if (c < s.nrows)
        *reinterpret_cast<uint4*>(p.h + int64_t(s.row0 + c) * p.ldh + int64_t(wave) * 64 + 16 * q) =
            make_uint4(w[0], w[1], w[2], w[3]);
    }
  }

  // h_block = 128 (kStoresPairs): the tile's two waves are intermediate [128 wb, 128 wb + 128) of
  // each token, quantized with one scale (the amax of both waves' 64 values; the host
  // quantizer's operations, block 128), h_scale[row, wb]. Then each wave's codes as
  // store_tokens_m's.
  __device__ static void store_tokens_m_s128(const GroupedGemmParams& p, const Segment& s,
                                             const float (&acc)[Cfg::kWaves][Cfg::kAccRegs],
                                             int wgc, int tid) {
    static_assert(kStoresPairs, "two-wave fp8 tokens-as-M tiles");
    const int warp = tid / 32, lane = tid % 32, q = lane % 4;
    const int c0 = 64 * wgc + 16 * warp + lane / 4;
    float v[2][2][16];  // [wave][token r][intermediate 16q + i of the wave]
#pragma unroll
    for (int w = 0; w < 2; ++w) tokens_m_values(p, s.e, 2 * s.wb + w, acc[w], q, v[w]);
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float a = ptx::abs_max_nan(tokens_m_amax(v[0][r]), tokens_m_amax(v[1][r]));
      const float scale = a == 0.0f ? 0.0f : a / 448.0f;
      inv[r] = a == 0.0f ? 0.0f : 448.0f / a;
      const int c = c0 + 8 * r;
      if (q == 0 && c < s.nrows) p.h_scale[int64_t(s.row0 + c) * p.h_scale_ld + s.wb] = scale;
    }
#pragma unroll
    for (int w = 0; w < 2; ++w) tokens_m_codes_out(p, s, v[w], inv, 2 * s.wb + w, c0, q);
  }

  // A half-height tile (HalfTile, sm90_gemm_scheduler.cuh): consumer c holds wave c (64
  // intermediate values, 2 wb + c) of the tile's first 64 tokens. Per 64 each consumer quantizes
  // its own wave; per 128 a token's scale needs both waves' amax, exchanged through shared memory.
  // The same operations in the same order as the full tile's stores, so the same bits. Each
  // consumer stores its wave's codes as store_tokens_m does.
  __device__ static void store_half(const GroupedGemmParams& p, const Segment& s,
                                    const typename Cfg::TileMeta&, typename Cfg::SharedStorage& ss,
                                    const float (&acc)[Cfg::kAccRegs], int wgc, int tid) {
    static_assert(kStoresPairs, "two-wave fp8 tokens-as-M tiles");
    auto& sg = ss.staging;
    const int warp = tid / 32, lane = tid % 32, q = lane % 4;
    const int c0 = 16 * warp + lane / 4;  // tokens c0, c0 + 8 of the tile's 64
    const int wave = 2 * s.wb + wgc;
    float v[2][16];
    tokens_m_values(p, s.e, wave, acc, q, v);
    float a[2] = {tokens_m_amax(v[0]), tokens_m_amax(v[1])};
    const bool s128 = p.h_block == 128;
    if (s128) {
      // Every consumer's reads of the amax exchange (the previous half tile's) are done.
      sync_consumers();
      if (q == 0) {
        sg.amax[wgc][c0] = a[0];
        sg.amax[wgc][c0 + 8] = a[1];
      }
      sync_consumers();
#pragma unroll
      for (int r = 0; r < 2; ++r) a[r] = ptx::abs_max_nan(sg.amax[0][c0 + 8 * r], sg.amax[1][c0 + 8 * r]);
    }
    float inv[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      // Same operations as the host quantizer (fmt::quantize_fp8_block).
      const float scale = a[r] == 0.0f ? 0.0f : a[r] / 448.0f;
      inv[r] = a[r] == 0.0f ? 0.0f : 448.0f / a[r];
      const int c = c0 + 8 * r;
      if (q == 0 && c < s.nrows && (!s128 || wgc == 0))
        p.h_scale[int64_t(s.row0 + c) * p.h_scale_ld + (s128 ? s.wb : wave)] = scale;
    }
    tokens_m_codes_out(p, s, v, inv, wave, c0, q);
  }

  __device__ static void store(const GroupedGemmParams& p, const Segment& s,
                               const typename Cfg::TileMeta& m, typename Cfg::SharedStorage& ss,
                               const float (&acc_in)[Cfg::kAccRegs], int wgc, int tid) {
    if constexpr (Cfg::kTokensM) {
      store_tokens_m(p, s, acc_in, wgc, tid);
      return;
    }
    auto& sg = ss.staging;
    // A second wave's store follows the first's with no mainloop (whose barriers order the
    // staging tile's reuse across tiles) in between: the bf16 path writes the tile before its first
    // barrier, so wait for every consumer's reads of the previous wave (racecheck: WAR on the tile).
    if constexpr (!Cfg::kFp8 && Cfg::kWaves > 1) {
      if (s.wb % Cfg::kWaves != 0) sync_consumers();
    }
    float acc[Cfg::kAccRegs];
#pragma unroll
    for (int i = 0; i < Cfg::kAccRegs; ++i) acc[i] = acc_in[i];
    if (p.split > 1 && !gather_split(p, s, ss, acc, wgc * 128 + tid)) return;
    const int warp = tid / 32, lane = tid % 32;
    const int ctid = wgc * 128 + tid;                   // 0..255 over both consumer warpgroups
    const int group = 4 * wgc + warp;                   // 8-row gate/up group of the tile
    const int i_loc = swiglu_intermediate(group, lane / 4, p.thread_order);  // of the tile's 64
    float bg = 0.0f, bu = 0.0f;
    if (p.bias) {
      const float* b = p.bias + int64_t(s.e) * p.n_rows + s.wb * Cfg::WAVE_W + 16 * group + lane / 4;
      bg = b[0];
      bu = b[8];
    }
    float v[Cfg::BLOCK_T / 4];  // this thread's columns 8b + 2(lane%4) + h, index 2b + h
    // The variant is chosen once per tile, outside the loop (a per-element branch on a parameter
    // stayed in the loop).
    if (p.act_clamped) {
#pragma unroll
      for (int b = 0; b < Cfg::BLOCK_T / 8; ++b)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          v[2 * b + h] = activation<true>(p, acc[4 * b + h] + bg, acc[4 * b + 2 + h] + bu);
    } else {
#pragma unroll
      for (int b = 0; b < Cfg::BLOCK_T / 8; ++b)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          v[2 * b + h] = activation<false>(p, acc[4 * b + h] + bg, acc[4 * b + 2 + h] + bu);
    }

    if constexpr (Cfg::kFp8) {
      column_amax(v, sg.amax[group], lane);
      sync_consumers();
      if (ctid < Cfg::BLOCK_T) {
        float a = 0.0f;
#pragma unroll
        for (int g = 0; g < 8; ++g) a = ptx::abs_max_nan(a, sg.amax[g][ctid]);
        // Same operations as the host quantizer (fmt::quantize_fp8_block).
        sg.scale[ctid] = a == 0.0f ? 0.0f : a / 448.0f;
        sg.inv[ctid] = a == 0.0f ? 0.0f : 448.0f / a;
      }
      sync_consumers();
#pragma unroll
      for (int i = 0; i < Cfg::BLOCK_T / 4; ++i) {
        const int col = 8 * (i / 2) + 2 * (lane % 4) + i % 2;
        const __nv_fp8_storage_t code = __nv_cvt_float_to_fp8(v[i] * sg.inv[col], __NV_SATFINITE, __NV_E4M3);
        sg.tile[col][i_loc] = code;
      }
    } else {
#pragma unroll
      for (int i = 0; i < Cfg::BLOCK_T / 4; ++i) {
        const int col = 8 * (i / 2) + 2 * (lane % 4) + i % 2;
        reinterpret_cast<__nv_bfloat16*>(sg.tile[col])[i_loc] = __float2bfloat16_rn(v[i]);
      }
    }
    sync_consumers();
    // Row c of the tile -> h[row0 + c, 64 wb ...]: 64 values, 16 bytes per thread per step.
    constexpr int kRowBytes = 64 * Cfg::kElemBytes, kChunks = kRowBytes / 16;
    for (int i = ctid; i < s.nrows * kChunks; i += 256) {
      const int c = i / kChunks, chunk = i % kChunks;
      const uint4 val = *reinterpret_cast<const uint4*>(&sg.tile[c][16 * chunk]);
      uint8_t* dst = p.h + int64_t(s.row0 + c) * p.ldh + int64_t(s.wb) * kRowBytes + 16 * chunk;
      *reinterpret_cast<uint4*>(dst) = val;
    }
    if constexpr (Cfg::kFp8) {
      if (ctid < s.nrows) p.h_scale[int64_t(s.row0 + ctid) * p.h_scale_ld + s.wb] = sg.scale[ctid];
    }
  }
};

}  // namespace fusedmoe::detail
