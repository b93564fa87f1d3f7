// NVFP4 block-scaled GEMV on sm_90: E2M1 decoded on the CUDA cores, multiplied on the tensor cores.
//
//   batched: c[l, m] = ga[l] * gb[l] * sum_k A_l[m, k] * b_l[k]      (bf16 b: gb = 1)
//   grouped: y[t, n] = sum_u coef[u, t] * sum_k W_u[n, k] * x_t[k],  coef = ga[e_u] * sum of t's
//            route weights on expert e_u, over the distinct experts u its token group selected.
// A rows: K/2 bytes, 16-byte aligned, K % 32 == 0; scales row-major [rows, K/16] e4m3 (checkpoint
// layout). Outputs: any strides, every element written once, by one thread, rounded once.
// Design: a warp streams m16 tiles; lane (g, t) loads 16 bytes (32 values) of rows g and g + 8 per
// 64-byte warp step and turns each 4-byte word into fp16 pairs with bit operations (value * 2^-14,
// exact), scales them with one HMUL2 per pair and feeds mma.m16n8k16 (fp32 accumulation, promoted
// to a register sum after every step). B columns: b (batched, all 8 alike) or up to 8 tokens
// (grouped), decoded once per CTA into shared memory. kStages steps of loads in flight per lane;
// the k-split warps of a CTA add their partials in shared memory in a fixed order.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "common/cuda_check.hpp"
#include "common/launch.hpp"
#include "gemv/gemv_launch.hpp"

namespace fusedmoe::detail {

template <GemvMode kMode_, int kMT, int kWM, int kWK, int kStages_>
struct GemvConfig {
  static constexpr bool kGrouped = kMode_ == GemvMode::grouped;
  // batched: m16 tiles per warp (MT * 16 rows); grouped: experts per job (the same 16 rows of MT
  // experts, so the per-step costs are shared by MT experts without taller CTAs).
  static constexpr int MT = kMT;
  static constexpr int WM = kWM, WK = kWK;  // warps along M, along K (k-split)
  static constexpr int kStages = kStages_;  // warp steps of loads in flight per lane
  static constexpr int kWarps = WM * WK;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpRows = kGrouped ? 16 : 16 * MT;
  static constexpr int BLOCK_M = kWarpRows * WM;
  static constexpr int kStepValues = 128;   // values of one row per warp step: 4 lanes x 32
  static constexpr int kStepBytes = 64;     // their packed bytes
  static constexpr int kStepScales = 8;     // their block scales
  static constexpr int kCols = kGrouped ? 8 : 1;  // output columns of the reduction
  // Two CTAs per SM (<= 128 registers a thread) keep ~64 KB of loads in flight per SM.
  static constexpr int kMinBlocks = kThreads <= 256 ? 2 : 1;
  static_assert(MT >= 1 && MT <= 4, "MT: 1..4 m16 tiles (experts) per warp");
  static_assert(kThreads >= 64 && kThreads <= 512, "a CTA has 2..16 warps");
  static_assert(kStages >= 1 && kStages <= 8, "kStages: 1..8 steps in flight");
};

namespace gemv {

// ---- memory ---------------------------------------------------------------------------------------
// 16 bytes of A, used once: no L1 allocation, and a 256-byte L2 fetch (whole rows are read, so the
// neighbouring sectors are needed next). Callers guard it with `if`: volatile asm is never hoisted
// out of the guard, so a masked-off load reads nothing.
__device__ __forceinline__ uint4 ld_stream_v4(const uint8_t* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

// The two e4m3 block scales of a lane's 32 values. Through L1: the 32-byte sector holds the
// scales of four consecutive steps, which the CTA's k-split warps read at about the same time.
__device__ __forceinline__ uint32_t ld_scales_u16(const uint8_t* ptr) {
  unsigned short v;
  asm volatile("ld.global.nc.u16 %0, [%1];\n" : "=h"(v) : "l"(ptr));
  return v;
}

__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// ---- decode -------------------------------------------------------------------------------------
// Eight E2M1 values (a 4-byte word, element 2i in the low nibble of byte i) as four fp16 pairs.
// Each value becomes the fp16 whose high byte is s000mmm0: mmm = (e1 e0 m) lands in fp16's low
// exponent bits and top mantissa bit, so its value is e2m1 * 2^-14 exactly (code 1, the E2M1
// subnormal 0.5, becomes the fp16 subnormal 2^-15). The pairs are (0,4), (2,6), (1,5), (3,7):
// whatever order makes the decode cheapest, as long as B is stored in the same order.
// Cost for 8 values (SASS): 6 LOP3 + 2 PRMT on the ALU pipe, 3 IMAD on the FMA pipe; the sign and
// the magnitude need different shifts, so no single-op form exists. Per 2 KB warp step the
// batched MT = 2 loop issues ~400 instructions, ~190 of them ALU (45% of the ALU pipe at 2.5 TB/s).
struct E2m1x8 {
  uint32_t h04, h26, h15, h37;
};
__device__ __forceinline__ E2m1x8 decode_e2m1x8(uint32_t w) {
  // Low nibbles: mag << 1 and sign << 4 = 2 * nibble + 14 * (sign bit): two IMADs (FMA pipe).
  const uint32_t even = 2u * (w & 0x0F0F0F0Fu) + 14u * (w & 0x08080808u);
  // High nibbles: sign stays, mag >> 3; the shift as a high multiply (FMA pipe, not ALU).
  const uint32_t odd = __umulhi(w & 0x70707070u, 1u << 29) | (w & 0x80808080u);
  E2m1x8 r;
  r.h04 = __byte_perm(even, 0u, 0x2404);  // bytes 0, 2 of `even` into the high bytes of the halves
  r.h26 = even & 0xFF00FF00u;             // bytes 1, 3 already are
  r.h15 = __byte_perm(odd, 0u, 0x2404);
  r.h37 = odd & 0xFF00FF00u;
  return r;
}

__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;\n" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Two e4m3 codes (low byte: the first block) as fp16 pairs (s0, s0) and (s1, s1), exact.
__device__ __forceinline__ void block_scale_pairs(uint32_t codes, uint32_t& s00, uint32_t& s11) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(codes), __NV_E4M3);
  const uint32_t both = uint32_t(h.x) | (uint32_t(h.y) << 16);
  s00 = __byte_perm(both, 0u, 0x1010);
  s11 = __byte_perm(both, 0u, 0x3232);
}

// D += A * B, m16n8k16, fp16 inputs, fp32 accumulators.
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---- B operand in shared memory (layout: GemvSmem in gemv_launch.hpp) ------------------------------
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// 8 consecutive fp32 values (already scaled into fp16 range) as one B group.
__device__ __forceinline__ uint4 b_group_from_floats(const float (&v)[8]) {
  return make_uint4(pack_half2(v[0], v[4]), pack_half2(v[2], v[6]), pack_half2(v[1], v[5]),
                    pack_half2(v[3], v[7]));
}

// Power-of-two exponent s that brings |amax| into [2^14, 2^15) (0 for zero or non-finite amax),
// clamped so 2^s and 2^-s stay normal fp32.
__device__ __forceinline__ int fp16_shift_for(uint32_t amax_bits) {
  if (amax_bits == 0 || amax_bits >= 0x7F800000u) return 0;
  const int e = int(amax_bits >> 23) - 127;  // fp32 subnormal amax: e = -127, clamped below
  return max(-100, min(100, 14 - e));
}

__device__ __forceinline__ float bf16_bits_to_float(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// 2^e, exact, for |e| <= 126.
__device__ __forceinline__ float pow2(int e) { return __uint_as_float(uint32_t(e + 127) << 23); }

__device__ __forceinline__ float e4m3_to_float(uint32_t code) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3);
  return __half2float(__half(h));
}

__device__ __forceinline__ float e2m1_to_float(uint32_t nib) {
  const uint32_t m = nib & 7u;
  const float mag = m < 2 ? 0.5f * float(m) : __uint_as_float((((m >> 1) + 126u) << 23) | ((m & 1u) << 22));
  return (nib & 8u) ? -mag : mag;
}

__device__ __forceinline__ void store_out(const GemvParams& p, int64_t idx, float v) {
  switch (p.c_dtype) {
    case GemvOut::f16: static_cast<__half*>(p.c)[idx] = __float2half_rn(v); break;
    case GemvOut::bf16: static_cast<__nv_bfloat16*>(p.c)[idx] = __float2bfloat16_rn(v); break;
    case GemvOut::f32: static_cast<float*>(p.c)[idx] = v; break;
  }
}

// ---- the per-step work of one lane ----------------------------------------------------------------
template <class Cfg>
struct Stage {
  uint4 v[Cfg::MT][2];      // (m16 tile, rows g / g + 8): 32 packed e2m1 values each
  uint32_t sf[Cfg::MT][2];  // their two e4m3 block scales
};

// A lane's rows in the current job: 64-bit bases (batched: one, the warp's first row; grouped:
// one per expert tile) and 32-bit byte offsets (batched: per tile and half; grouped: per half, the
// tiles share rows), the lane's 16-byte column included. Rows past M read row M - 1 (never
// stored), so only the step needs a predicate. Offsets instead of 2 * MT pointers per array save
// the registers that kept the MT = 2 loops from spilling.
template <class Cfg>
struct LaneRows {
  static constexpr int kBases = Cfg::kGrouped ? Cfg::MT : 1;
  static constexpr int kOffs = Cfg::kGrouped ? 2 : 2 * Cfg::MT;
  const uint8_t* a_base[kBases];
  const uint8_t* sf_base[kBases];
  uint32_t a_off[kOffs], sf_off[kOffs];
  int n_live;  // grouped: tiles [0, n_live) have an expert (the last job may be short)
  __device__ const uint8_t* a(int mt, int h, uint32_t k_off) const {
    return a_base[Cfg::kGrouped ? mt : 0] + (a_off[Cfg::kGrouped ? h : 2 * mt + h] + k_off);
  }
  __device__ const uint8_t* sf(int mt, int h, uint32_t k_off) const {
    return sf_base[Cfg::kGrouped ? mt : 0] + (sf_off[Cfg::kGrouped ? h : 2 * mt + h] + k_off);
  }
};

// Tile mt reads matrix mat[mt]: batched rows row0 + 16 mt (+ h * 8 + g), grouped the same 16 rows
// of MT experts.
template <class Cfg>
__device__ __forceinline__ void lane_rows(LaneRows<Cfg>& rows, const GemvParams& p,
                                          const int64_t (&mat)[Cfg::MT], int n_live, int row0, int g,
                                          int t) {
  rows.n_live = n_live;
  const int base_row = min(row0, p.M - 1);  // a warp wholly past M reads row M - 1
#pragma unroll
  for (int b = 0; b < LaneRows<Cfg>::kBases; ++b) {
    rows.a_base[b] = p.a + mat[b] * p.a_mat_stride + int64_t(base_row) * p.a_row_stride;
    rows.sf_base[b] = p.sfa + mat[b] * p.sfa_mat_stride + int64_t(base_row) * p.sfa_row_stride;
  }
#pragma unroll
  for (int o = 0; o < LaneRows<Cfg>::kOffs; ++o) {  // o = 2 mt + h (batched) or h (grouped)
    const int row = min(row0 + (o >> 1) * 16 + (o & 1) * 8 + g, p.M - 1) - base_row;  // >= 0
    rows.a_off[o] = uint32_t(row) * uint32_t(p.a_row_stride) + uint32_t(t) * 16u;
    rows.sf_off[o] = uint32_t(row) * uint32_t(p.sfa_row_stride) + uint32_t(t) * 2u;
  }
}

// One warp step of loads: 16 bytes and 2 scales from each of the lane's rows. `full`: every lane's
// chunk is inside K (all steps but a partial last one): no predicates, no zero fill on the hot
// path. Otherwise lanes past K get zeros (their B values are zero too).
template <class Cfg>
__device__ __forceinline__ void load_stage(Stage<Cfg>& st, const LaneRows<Cfg>& rows, int step,
                                           bool full, bool chunk_ok) {
  const uint32_t a_off = uint32_t(step) * Cfg::kStepBytes, sf_off = uint32_t(step) * Cfg::kStepScales;
#pragma unroll
  for (int mt = 0; mt < Cfg::MT; ++mt) {
    const bool tile = !Cfg::kGrouped || mt < rows.n_live;  // warp-uniform
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (tile && (full || chunk_ok)) {
        st.v[mt][h] = ld_stream_v4(rows.a(mt, h, a_off));
        st.sf[mt][h] = ld_scales_u16(rows.sf(mt, h, sf_off));
      } else {
        st.v[mt][h] = make_uint4(0, 0, 0, 0);
        st.sf[mt][h] = 0;
      }
    }
  }
}

// B fragments of one step: groups q0 + j (q0 = 16 step + 4t) = this lane's 32 k positions, four
// consecutive units (q0 % 8 is 0 or 4, so the 16-byte gaps fall outside). Zero when !ok.
__device__ __forceinline__ void load_b(uint4 (&bq)[4], const uint8_t* b_row, int step, int t, bool ok) {
  const uint4* src = reinterpret_cast<const uint4*>(b_row + gemv_b_unit(uint32_t(step) * 16u + uint32_t(t) * 4u) * 16u);
  const uint4 v[4] = {src[0], src[1], src[2], src[3]};
#pragma unroll
  for (int j = 0; j < 4; ++j) bq[j] = ok ? v[j] : make_uint4(0, 0, 0, 0);
}

// 8 mmas per m16 tile (two chains of 4), then the step's sum is promoted into acc (fp32 adds):
// the tensor cores' accumulation never runs longer than 128 values. Columns 2t, 2t+1 of the
// accumulator take coef0 / coef1 (grouped: that token's weight on this expert, or skipped when
// the token did not pick it; batched: 1).
// Grouped: the weights of columns 2t, 2t+1 (tokens) for the job's tiles, read from shared memory
// when a step is promoted (not held in registers: the MT = 2 loop is at the 128 limit), and which
// of them picked the tile's expert. Batched: weight 1, always added.
template <class Cfg>
struct JobCoefs {
  const float* coef;  // shared: (MT tiles, 8 columns) of the job, at column 2t
  uint32_t use;       // bit 2 mt + c: add column 2t + c of tile mt
  __device__ float2 c(int mt) const {
    return Cfg::kGrouped ? *reinterpret_cast<const float2*>(coef + mt * 8) : make_float2(1.f, 1.f);
  }
  __device__ bool use0(int mt) const { return !Cfg::kGrouped || ((use >> (2 * mt)) & 1u); }
  __device__ bool use1(int mt) const { return !Cfg::kGrouped || ((use >> (2 * mt + 1)) & 1u); }
};

template <class Cfg>
__device__ __forceinline__ void mma_stage(const Stage<Cfg>& st, const uint4 (&bq)[4],
                                          float (&acc)[Cfg::MT][4], const JobCoefs<Cfg>& jc) {
#pragma unroll
  for (int mt = 0; mt < Cfg::MT; ++mt) {
    uint32_t s_lo[2], s_hi[2];  // rows g / g + 8: (s, s) of block 0 and of block 1
    block_scale_pairs(st.sf[mt][0], s_lo[0], s_hi[0]);
    block_scale_pairs(st.sf[mt][1], s_lo[1], s_hi[1]);
    float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t w0 = j == 0 ? st.v[mt][0].x : j == 1 ? st.v[mt][0].y : j == 2 ? st.v[mt][0].z : st.v[mt][0].w;
      const uint32_t w1 = j == 0 ? st.v[mt][1].x : j == 1 ? st.v[mt][1].y : j == 2 ? st.v[mt][1].z : st.v[mt][1].w;
      const E2m1x8 r0 = decode_e2m1x8(w0), r1 = decode_e2m1x8(w1);
      const uint32_t sc0 = j < 2 ? s_lo[0] : s_hi[0], sc1 = j < 2 ? s_lo[1] : s_hi[1];
      // A fragment: {row g k0..1, row g+8 k0..1, row g k8..9, row g+8 k8..9}; B: {k0..1, k8..9}.
      mma_16816(d0, hmul2(r0.h04, sc0), hmul2(r1.h04, sc1), hmul2(r0.h26, sc0), hmul2(r1.h26, sc1),
                bq[j].x, bq[j].y);
      mma_16816(d1, hmul2(r0.h15, sc0), hmul2(r1.h15, sc1), hmul2(r0.h37, sc0), hmul2(r1.h37, sc1),
                bq[j].z, bq[j].w);
    }
    const float2 w = jc.c(mt);
    if (jc.use0(mt)) {
      acc[mt][0] = fmaf(w.x, d0[0] + d1[0], acc[mt][0]);
      acc[mt][2] = fmaf(w.x, d0[2] + d1[2], acc[mt][2]);
    }
    if (jc.use1(mt)) {
      acc[mt][1] = fmaf(w.y, d0[1] + d1[1], acc[mt][1]);
      acc[mt][3] = fmaf(w.y, d0[3] + d1[3], acc[mt][3]);
    }
  }
}

// ---- prologues: B into shared memory ---------------------------------------------------------------
// The raw rows arrive by cp.async (no registers: the kStages A stages in flight already use most
// of the 128), all at once, then are converted from shared memory. A loop of plain loads cost one
// L2 round trip per group batch while the A stream waited behind the barrier.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))), "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(uint32_t(__cvta_generic_to_shared(dst))), "l"(src)
               : "memory");
}
// Waits for this thread's copies; a barrier must follow before other threads read them.
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
}

// NVFP4 b: packed values into raw[0, K/2), block scales into raw[K/2, K/2 + K/16). Packed rows
// are 4-byte aligned (fast-path condition); the scales take 4-byte copies when aligned.
template <int kThreads>
__device__ __forceinline__ void copy_b_nvfp4(uint8_t* raw, const uint8_t* b, const uint8_t* sfb, int K, int tid) {
  for (int i = tid; i < K / 8; i += kThreads) cp_async_4(raw + i * 4, b + i * 4);
  uint8_t* raw_sf = raw + K / 2;
  if ((reinterpret_cast<uintptr_t>(sfb) & 3) == 0 && (K / 16) % 4 == 0) {
    for (int i = tid; i < K / 64; i += kThreads) cp_async_4(raw_sf + i * 4, sfb + i * 4);
  } else {
    for (int i = tid; i < K / 16; i += kThreads) raw_sf[i] = sfb[i];
  }
}

// b' = e2m1 * sfb, exact in fp16 (<= 2688), group q from 4 packed bytes and its block scale.
template <int kThreads>
__device__ __forceinline__ void convert_b_nvfp4(uint8_t* b_row, const uint8_t* raw, int K, int groups, int tid) {
  for (int q = tid; q < groups; q += kThreads) {
    uint4 out = make_uint4(0, 0, 0, 0);
    if (q * 8 < K) {
      const uint32_t code = raw[K / 2 + q / 2];
      uint32_t ss, unused;
      block_scale_pairs(code | (code << 8), ss, unused);
      const uint32_t two14 = 0x74007400u;  // (2^14, 2^14): undoes the decode's 2^-14, exact
      const E2m1x8 r = decode_e2m1x8(*reinterpret_cast<const uint32_t*>(raw + q * 4));
      out = make_uint4(hmul2(hmul2(r.h04, ss), two14), hmul2(hmul2(r.h26, ss), two14),
                       hmul2(hmul2(r.h15, ss), two14), hmul2(hmul2(r.h37, ss), two14));
    }
    *reinterpret_cast<uint4*>(b_row + gemv_b_unit(uint32_t(q)) * 16u) = out;
  }
}

// `rows` bf16 rows (16-byte aligned) straight into their B units; groups past K are zeroed.
template <int kThreads>
__device__ __forceinline__ void copy_b_bf16(uint8_t* s_b, uint32_t b_row_bytes, const uint16_t* x,
                                            int64_t x_stride, int K, int groups, int rows, int tid) {
  for (int f = tid; f < rows * groups; f += kThreads) {
    const int r = f / groups, q = f - r * groups;
    uint8_t* dst = s_b + r * b_row_bytes + gemv_b_unit(uint32_t(q)) * 16u;
    if (q * 8 < K) cp_async_16(dst, x + int64_t(r) * x_stride + q * 8);
    else *reinterpret_cast<uint4*>(dst) = make_uint4(0, 0, 0, 0);
  }
}

// max |x| of each staged bf16 row as fp32 bits (NaN sorts above Inf) into s_amax[row] (zeroed
// before): a running max per thread, one warp reduction and one shared atomic per warp and row.
template <int kThreads>
__device__ void bf16_rows_amax(uint32_t* s_amax, const uint8_t* s_b, uint32_t b_row_bytes, int K,
                               int groups, int rows, int tid) {
  for (int r = 0; r < rows; ++r) {
    uint32_t m = 0;
    for (int q = tid; q * 8 < K; q += kThreads) {
      const uint4 raw = *reinterpret_cast<const uint4*>(s_b + r * b_row_bytes + gemv_b_unit(uint32_t(q)) * 16u);
      const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) m = max(m, max((u[j] & 0x7FFFu) << 16, (u[j] >> 16 & 0x7FFFu) << 16));
    }
    m = __reduce_max_sync(0xFFFFFFFFu, m);
    if ((tid & 31) == 0) atomicMax(&s_amax[r], m);
  }
}

// In place: each bf16 group -> fp16 * 2^shift(row), in the mma pair order (same thread, same unit).
template <int kThreads>
__device__ void convert_b_bf16(uint8_t* s_b, uint32_t b_row_bytes, int K, int groups, int rows,
                               const uint32_t* s_amax, int tid) {
  for (int f = tid; f < rows * groups; f += kThreads) {
    const int r = f / groups, q = f - r * groups;
    if (q * 8 >= K) continue;  // zeroed by copy_b_bf16
    uint4* unit = reinterpret_cast<uint4*>(s_b + r * b_row_bytes + gemv_b_unit(uint32_t(q)) * 16u);
    const float scale = pow2(fp16_shift_for(s_amax[r]));
    const uint4 raw = *unit;
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
    float v[8];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = bf16_bits_to_float(u[j] & 0xFFFFu) * scale;
      v[2 * j + 1] = bf16_bits_to_float(u[j] >> 16) * scale;
    }
    *unit = b_group_from_floats(v);
  }
}

// ---- grouped prologue: the CTA's jobs --------------------------------------------------------------
// Shared-memory views of the grouped prologue's tables (offsets from GemvSmem).
struct GroupTables {
  int32_t* ent_id;   // (n_ent) expert id of route (token, choice), -1 when out of range
  float* ent_w;      // (n_ent) its routing weight
  uint32_t* flag;    // (n_ent) first use of its expert; later: selection bits per job
  int32_t* list;     // (n_ent) distinct experts in first-use order = the jobs
  float* coef;       // (n_ent, 8) per job: weight of each token of the group
  __device__ GroupTables(uint8_t* smem, const GemvSmem& lay, int n_ent)
      : ent_id(reinterpret_cast<int32_t*>(smem + lay.ent_off)),
        ent_w(reinterpret_cast<float*>(smem + lay.ent_off) + n_ent),
        flag(reinterpret_cast<uint32_t*>(smem + lay.ent_off) + 2 * n_ent),
        list(reinterpret_cast<int32_t*>(smem + lay.list_off)),
        coef(reinterpret_cast<float*>(smem + lay.coef_off)) {}
};

// Distinct valid experts of the token group, in first-use order; returns their number. Ends with
// a barrier. Out-of-range ids are dropped here (counted once per route, by the grid's first column).
template <int kThreads>
__device__ int plan_jobs(const GemvParams& p, GroupTables& tb, int t_first, int tokens, int tid,
                         uint32_t* s_count) {
  const int n_ent = tokens * p.top_k;
  for (int i = tid; i < n_ent; i += kThreads) {
    const int tl = i / p.top_k, j = i - tl * p.top_k;
    const int id = p.ids[int64_t(t_first + tl) * p.ids_stride + j];
    const bool valid = id >= 0 && id < p.L;
    tb.ent_id[i] = valid ? id : -1;
    tb.ent_w[i] = p.route_w[int64_t(t_first + tl) * p.route_w_stride + j];
    if (!valid && blockIdx.x == 0 && p.bad_id_count) atomicAdd(p.bad_id_count, 1);
  }
  __syncthreads();  // entries visible to every thread
  for (int i = tid; i < n_ent; i += kThreads) {
    const int id = tb.ent_id[i];
    bool first = id >= 0;
    for (int i2 = 0; i2 < i && first; ++i2) first = tb.ent_id[i2] != id;
    tb.flag[i] = first;
  }
  __syncthreads();  // first-use flags complete before warp 0 numbers them
  if (tid < 32) {
    int base = 0;
    for (int c0 = 0; c0 < n_ent; c0 += 32) {
      const int i = c0 + tid;
      const bool first = i < n_ent && tb.flag[i];
      const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, first);
      if (first) tb.list[base + __popc(ballot & ((1u << tid) - 1u))] = tb.ent_id[i];
      base += __popc(ballot);
    }
    if (tid == 0) *s_count = uint32_t(base);
  }
  __syncthreads();  // job list complete; flags free for reuse
  return int(*s_count);
}

// coef[u, tl] = ga[e_u] * (token tl's weights on e_u, summed in choice order) and the bit mask of
// the tokens that picked e_u (a token that did not pick it must not see even NaN from it).
template <int kThreads>
__device__ void job_coefs(const GemvParams& p, GroupTables& tb, int num_u, int tokens, int tid) {
  const int lane = tid & 31;
  for (int i = tid; i < (num_u * 8 + 31) / 32 * 32; i += kThreads) {  // whole warps: the ballot
    const int u = i >> 3, tl = i & 7;
    const int e = u < num_u ? tb.list[u] : 0;
    float w = 0.f;
    bool picked = false;
    if (u < num_u && tl < tokens)
      for (int j = 0; j < p.top_k; ++j)
        if (tb.ent_id[tl * p.top_k + j] == e) {
          w += tb.ent_w[tl * p.top_k + j];
          picked = true;
        }
    if (u < num_u) tb.coef[i] = picked ? w * p.a_global[int64_t(e) * p.a_global_stride] : 0.f;
    const uint32_t bits = __ballot_sync(0xFFFFFFFFu, picked);  // 4 jobs x 8 tokens per warp
    if ((lane & 7) == 0 && u < num_u) tb.flag[u] = (bits >> (lane & ~7)) & 0xFFu;
  }
}

// B rows of the CTA (batched: b_l; grouped: its tokens) into shared memory, and the output factor
// of each column into factor[0..7]. Ends with a barrier.
template <class Cfg>
__device__ void stage_b(const GemvParams& p, uint8_t* s_b, uint32_t b_row_bytes, uint8_t* s_raw,
                        uint32_t* s_amax, float* factor, int col0, int cols, int tid) {
  const int groups = int(gemv_k_padded(p.K) / 8);
  if (!Cfg::kGrouped && p.b_nvfp4) {
    copy_b_nvfp4<Cfg::kThreads>(s_raw, static_cast<const uint8_t*>(p.b) + int64_t(col0) * p.b_stride,
                                p.sfb + int64_t(col0) * p.sfb_stride, p.K, tid);
    if (tid == 0)
      factor[0] = 16384.f * p.a_global[int64_t(col0) * p.a_global_stride] *
                  p.b_global[int64_t(col0) * p.b_global_stride];
    cp_async_wait_all();
    __syncthreads();  // raw b complete
    convert_b_nvfp4<Cfg::kThreads>(s_b, s_raw, p.K, groups, tid);
    __syncthreads();  // B visible to every warp
    return;
  }
  // bf16 rows: one power-of-two shift per row from its amax, then fp16 in place.
  const uint16_t* x = static_cast<const uint16_t*>(p.b) + int64_t(col0) * p.b_stride;
  copy_b_bf16<Cfg::kThreads>(s_b, b_row_bytes, x, p.b_stride, p.K, groups, cols, tid);
  if (tid < 8) s_amax[tid] = 0;
  cp_async_wait_all();
  __syncthreads();  // raw rows complete, amax zeroed
  bf16_rows_amax<Cfg::kThreads>(s_amax, s_b, b_row_bytes, p.K, groups, cols, tid);
  __syncthreads();  // every row's amax complete
  convert_b_bf16<Cfg::kThreads>(s_b, b_row_bytes, p.K, groups, cols, s_amax, tid);
  if (tid < cols) {
    const float unscale = pow2(14 - fp16_shift_for(s_amax[tid]));
    factor[tid] = Cfg::kGrouped ? unscale : unscale * p.a_global[int64_t(col0) * p.a_global_stride];
  }
  __syncthreads();  // B rows and factors visible to every warp
}

}  // namespace gemv

// ================================================================================================
// The fast kernel.
// ================================================================================================
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    gemv_nvfp4_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace gemv;
  extern __shared__ __align__(16) uint8_t smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;  // mma group (A row / B column) and lane in the group
  const int wm = warp / Cfg::WK, wk = warp % Cfg::WK;
  const int m0 = blockIdx.x * Cfg::BLOCK_M;
  const int row0 = m0 + wm * Cfg::kWarpRows;  // this warp's first row
  // Grouped: grid row y is a group of up to 8 tokens; batched: matrix l = y.
  const int col0 = Cfg::kGrouped ? int(blockIdx.y) * p.tokens_per_cta : int(blockIdx.y);
  const int cols = Cfg::kGrouped ? min(p.tokens_per_cta, p.T - col0) : 1;
  const GemvSmem lay = gemv_smem_layout(Cfg::kGrouped, Cfg::BLOCK_M, Cfg::WK, p.K, cols,
                                        Cfg::kGrouped ? p.top_k : 0);
  float* s_red = reinterpret_cast<float*>(smem + lay.red_off);  // (WK, BLOCK_M, kCols)
  uint32_t* s_misc = reinterpret_cast<uint32_t*>(smem + lay.misc_off);
  float* s_factor = reinterpret_cast<float*>(s_misc + 16);      // (8) output factor per column
  GroupTables tb(smem, lay, cols * (Cfg::kGrouped ? p.top_k : 0));

  // Under PDL the next kernel may start now: its CTAs take the SMs' free slots, prefetch their
  // A and wait (griddepcontrol.wait) for this grid before they touch b or c.
  if (p.pdl) griddep_launch_dependents();

  // Jobs: batched one (matrix l); grouped the distinct experts of the token group, MT per job.
  // The routing may come from the previous kernel: under PDL, wait for it before reading ids.
  int num_u = 1;
  if constexpr (Cfg::kGrouped) {
    if (p.pdl) griddep_wait();
    num_u = plan_jobs<Cfg::kThreads>(p, tb, col0, cols, tid, s_misc);
  }
  const int num_jobs = Cfg::kGrouped ? (num_u + Cfg::MT - 1) / Cfg::MT : 1;
  auto job_rows = [&](LaneRows<Cfg>& rows, int job) {
    int64_t mat[Cfg::MT];
#pragma unroll
    for (int mt = 0; mt < Cfg::MT; ++mt)
      mat[mt] = Cfg::kGrouped ? int64_t(tb.list[min(job * Cfg::MT + mt, num_u - 1)]) : int64_t(blockIdx.y);
    lane_rows<Cfg>(rows, p, mat, Cfg::kGrouped ? min(Cfg::MT, num_u - job * Cfg::MT) : Cfg::MT, row0, g, t);
  };

  // This warp's steps of each job: wk, wk + WK, ... (the CTA's warps read each row in order).
  const int n_steps = (p.K + Cfg::kStepValues - 1) / Cfg::kStepValues;
  const int n_my = wk < n_steps ? (n_steps - wk + Cfg::WK - 1) / Cfg::WK : 0;
  const int n_iter = num_jobs * n_my;

  // Load cursor: (job j_ld, step s_ld); kStages steps of loads in flight.
  LaneRows<Cfg> rows;
  int j_ld = 0, s_ld = wk;
  if (n_iter > 0) job_rows(rows, 0);
  const int n_full = p.K / Cfg::kStepValues;  // steps whose 4 lane chunks are all inside K
  auto issue = [&](Stage<Cfg>& st, int it) {
    const bool live = it < n_iter;  // warp-uniform: past the end, nothing is loaded or consumed
    if (live) load_stage<Cfg>(st, rows, s_ld, s_ld < n_full, s_ld * Cfg::kStepValues + t * 32 < p.K);
    if (live) {
      s_ld += Cfg::WK;
      if (s_ld >= n_steps) {  // next job (rare): new row pointers
        s_ld = wk;
        if (++j_ld < num_jobs) job_rows(rows, j_ld);
      }
    }
  };
  // kStages + 1 buffers rotate through an unrolled loop: the load into the buffer computed last
  // is issued before the oldest is computed, and no registers are copied.
  constexpr int kRing = Cfg::kStages + 1;
  Stage<Cfg> ring[kRing];
#pragma unroll
  for (int s = 0; s < Cfg::kStages; ++s) issue(ring[s], s);  // A streams while B is prepared

  if constexpr (Cfg::kGrouped) {
    job_coefs<Cfg::kThreads>(p, tb, num_u, cols, tid);
  } else {
    if (p.pdl) griddep_wait();  // b is the previous kernel's output; A was not
  }
  uint8_t* s_b = smem + lay.b_off;
  stage_b<Cfg>(p, s_b, lay.b_row_bytes, smem + lay.raw_off, s_misc + 8, s_factor, col0, cols, tid);

  // ---- main loop: compute the oldest step while kStages younger ones are in flight -------------
  float acc[Cfg::MT][4];  // (m16 tile, {row g col 2t, row g col 2t+1, row g+8 ..., ...})
#pragma unroll
  for (int mt = 0; mt < Cfg::MT; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[mt][i] = 0.f;
  const bool b_ok = !Cfg::kGrouped || g < cols;  // B columns past the token group: zeros
  const uint8_t* b_row = s_b + (Cfg::kGrouped && b_ok ? g * lay.b_row_bytes : 0);
  int j_cp = 0, s_cp = wk;
  JobCoefs<Cfg> jc;
  jc.coef = tb.coef + 2 * t;
  jc.use = ~0u;
  auto load_coefs = [&](int job) {
    if constexpr (Cfg::kGrouped) {
      // Tiles past num_u (odd expert count) read job 0's row of coef and are never added.
      jc.coef = tb.coef + (job * Cfg::MT < num_u ? job * Cfg::MT * 8 : 0) + 2 * t;
      jc.use = 0;
#pragma unroll
      for (int mt = 0; mt < Cfg::MT; ++mt) {
        const int u = job * Cfg::MT + mt;
        if (u < num_u) jc.use |= ((tb.flag[u] >> (2 * t)) & 3u) << (2 * mt);
      }
    }
  };
  if (n_iter > 0) load_coefs(0);
  for (int it0 = 0; it0 < n_iter; it0 += kRing) {
#pragma unroll
    for (int s = 0; s < kRing; ++s) {
      if (it0 + s < n_iter) {  // warp-uniform
        issue(ring[(s + Cfg::kStages) % kRing], it0 + s + Cfg::kStages);
        uint4 bq[4];
        load_b(bq, b_row, s_cp, t, b_ok);
        mma_stage<Cfg>(ring[s], bq, acc, jc);
        s_cp += Cfg::WK;
        if (s_cp >= n_steps) {
          s_cp = wk;
          if (++j_cp < num_jobs) load_coefs(j_cp);
        }
      }
    }
  }

  // ---- epilogue: the k-split partials meet in shared memory, summed in warp order -------------
  float* red = s_red + wk * Cfg::BLOCK_M * Cfg::kCols;
  if constexpr (Cfg::kGrouped) {  // the MT tiles are the same rows of different experts: add them
    float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int mt = 0; mt < Cfg::MT; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) sum[i] += acc[mt][i];
    const int r = wm * 16 + g;
    red[r * 8 + 2 * t] = sum[0];
    red[r * 8 + 2 * t + 1] = sum[1];
    red[(r + 8) * 8 + 2 * t] = sum[2];
    red[(r + 8) * 8 + 2 * t + 1] = sum[3];
  } else if (t == 0) {  // the 8 columns hold the same sums
#pragma unroll
    for (int mt = 0; mt < Cfg::MT; ++mt) {
      const int r = wm * 16 * Cfg::MT + mt * 16 + g;
      red[r] = acc[mt][0];
      red[r + 8] = acc[mt][2];
    }
  }
  __syncthreads();  // every warp's partials written
  for (int i = tid; i < Cfg::BLOCK_M * cols; i += Cfg::kThreads) {
    const int c = i / Cfg::BLOCK_M, r = i - c * Cfg::BLOCK_M;  // consecutive threads: rows
    if (m0 + r >= p.M) continue;
    float sum = 0.f;
#pragma unroll
    for (int w = 0; w < Cfg::WK; ++w) sum += s_red[(w * Cfg::BLOCK_M + r) * Cfg::kCols + c];
    store_out(p, int64_t(col0 + c) * p.c_stride_l + int64_t(m0 + r) * p.c_stride_m, sum * s_factor[c]);
  }
#else
  __trap();  // built for sm_90a only
#endif
}

// ================================================================================================
// The generic kernel: any K % 16 == 0, any strides and alignments. One warp per output; lanes take
// 16-value blocks; exact block sums of E2M1 x (E2M1 or bf16) products in fp32.
// ================================================================================================
namespace gemv {

// sum over one 16-value block of e2m1(A) * b (b as fp32), times the A block scale.
__device__ __forceinline__ float generic_block(const uint8_t* a, uint32_t sfa_code, const float (&b)[16]) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t byte = a[i];
    s = fmaf(e2m1_to_float(byte & 15u), b[2 * i], s);
    s = fmaf(e2m1_to_float(byte >> 4), b[2 * i + 1], s);
  }
  return s * e4m3_to_float(sfa_code);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// dot(A row, b) for a row at `a`/`sf` and b given by `load_b16(kb, out[16])`.
template <class LoadB>
__device__ __forceinline__ float generic_dot(const uint8_t* a, const uint8_t* sf, int K, int lane, LoadB load_b16) {
  float acc = 0.f;
  for (int kb = lane; kb < K / 16; kb += 32) {
    float b[16];
    load_b16(kb, b);
    acc += generic_block(a + int64_t(kb) * 8, sf[kb], b);
  }
  return warp_sum(acc);
}

}  // namespace gemv

template <GemvMode kMode>
__global__ void __launch_bounds__(GemvConfigInfo::kGenericThreads)
    gemv_generic_kernel(const __grid_constant__ GemvParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace gemv;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (GemvConfigInfo::kGenericThreads / 32) + (threadIdx.x >> 5);
  const int col = blockIdx.y;  // batched: l; grouped: token t
  if (p.pdl) griddep_wait();
  if (row >= p.M) return;
  float out = 0.f;
  if constexpr (kMode == GemvMode::batched) {
    const uint8_t* a = p.a + int64_t(col) * p.a_mat_stride + int64_t(row) * p.a_row_stride;
    const uint8_t* sf = p.sfa + int64_t(col) * p.sfa_mat_stride + int64_t(row) * p.sfa_row_stride;
    float dot;
    if (p.b_nvfp4) {
      const uint8_t* b = static_cast<const uint8_t*>(p.b) + int64_t(col) * p.b_stride;
      const uint8_t* sfb = p.sfb + int64_t(col) * p.sfb_stride;
      dot = generic_dot(a, sf, p.K, lane, [&](int kb, float (&v)[16]) {
        const float s = e4m3_to_float(sfb[kb]);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const uint32_t byte = b[int64_t(kb) * 8 + i];
          v[2 * i] = e2m1_to_float(byte & 15u) * s;
          v[2 * i + 1] = e2m1_to_float(byte >> 4) * s;
        }
      });
      out = dot * p.a_global[int64_t(col) * p.a_global_stride] * p.b_global[int64_t(col) * p.b_global_stride];
    } else {
      const uint16_t* x = static_cast<const uint16_t*>(p.b) + int64_t(col) * p.b_stride;
      dot = generic_dot(a, sf, p.K, lane, [&](int kb, float (&v)[16]) {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = bf16_bits_to_float(x[int64_t(kb) * 16 + i]);
      });
      out = dot * p.a_global[int64_t(col) * p.a_global_stride];
    }
    if (p.K == 0) out = 0.f;  // an empty sum, whatever the scales
  } else {
    const uint16_t* x = static_cast<const uint16_t*>(p.b) + int64_t(col) * p.b_stride;
    for (int j = 0; j < p.top_k; ++j) {
      const int e = p.ids[int64_t(col) * p.ids_stride + j];
      if (e < 0 || e >= p.L) {  // never dereferenced; counted once per route (by row 0)
        if (row == 0 && lane == 0 && p.bad_id_count) atomicAdd(p.bad_id_count, 1);
        continue;
      }
      const uint8_t* a = p.a + int64_t(e) * p.a_mat_stride + int64_t(row) * p.a_row_stride;
      const uint8_t* sf = p.sfa + int64_t(e) * p.sfa_mat_stride + int64_t(row) * p.sfa_row_stride;
      const float dot = generic_dot(a, sf, p.K, lane, [&](int kb, float (&v)[16]) {
#pragma unroll
        for (int i = 0; i < 16; ++i) v[i] = bf16_bits_to_float(x[int64_t(kb) * 16 + i]);
      });
      const float w = p.route_w[int64_t(col) * p.route_w_stride + j];
      out = fmaf(w, p.K == 0 ? 0.f : dot * p.a_global[int64_t(e) * p.a_global_stride], out);
    }
  }
  if (lane == 0) store_out(p, int64_t(col) * p.c_stride_l + int64_t(row) * p.c_stride_m, out);
#else
  __trap();  // built for sm_90a only
#endif
}

// ================================================================================================
// Launchers: the caller's stream, PDL when asked, launch checked.
// ================================================================================================

template <class Cfg>
void launch_gemv_nvfp4(const GemvParams& p, size_t smem_bytes, cudaStream_t stream) {
  auto kernel = gemv_nvfp4_kernel<Cfg>;
  // Above 48 KB a kernel needs an opt-in; raise it to the request (idempotent, cheap).
  FMOE_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem_bytes)));
  const int rows_y = Cfg::kGrouped ? (p.T + p.tokens_per_cta - 1) / p.tokens_per_cta : p.L;
  const dim3 grid(unsigned((p.M + Cfg::BLOCK_M - 1) / Cfg::BLOCK_M), unsigned(rows_y));
  launch_kernel(kernel, grid, dim3(unsigned(Cfg::kThreads)), smem_bytes, stream, p.pdl != 0, p);
  FMOE_CHECK_LAUNCH("gemv_nvfp4_kernel", stream);
}

template <GemvMode kMode>
void launch_gemv_generic(const GemvParams& p, cudaStream_t stream) {
  constexpr int kRowsPerCta = GemvConfigInfo::kGenericThreads / 32;
  const dim3 grid(unsigned((p.M + kRowsPerCta - 1) / kRowsPerCta),
                  unsigned(kMode == GemvMode::grouped ? p.T : p.L));
  launch_kernel(gemv_generic_kernel<kMode>, grid, dim3(unsigned(GemvConfigInfo::kGenericThreads)), 0, stream, p.pdl != 0, p);
  FMOE_CHECK_LAUNCH("gemv_generic_kernel", stream);
}

}  // namespace fusedmoe::detail
