// NVFP4 weights for the grouped GEMM engine (issue 11; W4A16: bf16 activations, bf16 wgmma with
// the weights decoded in registers as wgmma's A operand). Host and device code, no CUDA headers:
// the prepare step (which re-lays ModelOpt's layout into the one below), the kernels' decode, and
// the CPU tests that check the two agree bit for bit all use these functions.
//
// Why this layout. With weights as wgmma's M side, an m64nNk16 bf16 wgmma with A from registers
// takes, per thread, four bf16x2 registers: rows r0 = 16 warp + lane / 4 and r1 = r0 + 8 of the
// warpgroup's 64, columns k = 2q, 2q + 1 and 2q + 8, 2q + 9 of the k16 step (q = lane % 4):
//   a0 = (r0; 2q, 2q+1)  a1 = (r1; 2q, 2q+1)  a2 = (r0; 2q+8, 2q+9)  a3 = (r1; 2q+8, 2q+9)
// Those 8 E2M1 values are one 32-bit word of the prepared layout, nibbles ordered so that each
// register falls out of the word by one shift and one masked merge (decode below): a_p comes from
// the word shifted left by 4p, its low element at bits 12-15 and its high element at bits 28-31.
// A k-block is 64 K values (one bf16 activation row of 128 bytes, one 128-byte swizzle row): four
// k16 steps, so each thread's words of a 128-row weight tile and k-block are 16 contiguous bytes
// (one 16-byte shared-memory load, consecutive lanes consecutive: no bank conflicts).
//
// The block scales stay E4M3 (1 byte per 16 values, as ModelOpt stores them): per thread and k16
// step one byte for r0 and one for r1, 8 bytes per k-block, shared by the 4 lanes of a quad.
//
// Exactness. The decode places an E2M1 code's exponent and mantissa bits into a bf16's lowest
// exponent bits and top mantissa bit, which reads as value * 2^-126 (code 1, 0.5, becomes a bf16
// subnormal); a scale converted by cvt.rn.f16x2.e4m3x2 (exact) becomes the bf16 scale * 2^100 by
// moving its bits; their bf16 product is value * scale * 2^-26, exact (at most 5 significant bits,
// exponents from 2^-36 to 2^11.4). The fp32 accumulators are multiplied by the global scale
// (weight_scale_2) * 2^26 once per tile.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FMOE_E2M1_HD __host__ __device__ __forceinline__
#else
#define FMOE_E2M1_HD inline
#endif

namespace fusedmoe::detail::e2m1 {

constexpr int kTileRows = 128;    // rows of a weight wave (two consumer warpgroups x m64)
constexpr int kBlockK = 64;       // K values per k-block (one bf16 activation stage)
constexpr int kSteps = kBlockK / 16;  // k16 steps per k-block
/// Bytes of one (128-row tile, k-block): the codes, then the scales.
constexpr int kValueBytes = kTileRows * kBlockK / 2;        // 4096
constexpr int kScaleBytes = (2 * 128 / 4) * 8;               // 64 lane quads x 8 bytes = 512
constexpr int kBlockBytes = kValueBytes + kScaleBytes;      // 4608
/// The bf16 product of a decoded value and a decoded scale is value * scale * 2^-kProductShift.
constexpr int kProductShift = 26;

static_assert(kScaleBytes == 512, "64 row quads x 8 scale bytes per k-block");

// ---- where each code and scale goes ----------------------------------------------------------

/// Row (0..127 of the tile) and K column (0..63 of the k-block) of nibble `n` (0..7) of word
/// `step` (0..3) of thread `t` (0..255: consumer warpgroup t / 128, warp (t / 32) % 4, lane t % 32).
struct Src {
  int row, col;
};
FMOE_E2M1_HD Src value_source(int t, int step, int n) {
  const int wgc = t / 128, warp = (t / 32) % 4, lane = t % 32, q = lane % 4;
  const int r0 = 64 * wgc + 16 * warp + lane / 4;
  // nibble -> (row r0 / r1, column offset): p = 3 - (n % 4) is the register, n / 4 the element.
  const int p = 3 - (n % 4), elem = n / 4;
  const int row = r0 + (p % 2 == 1 ? 8 : 0);
  const int col = 16 * step + 2 * q + (p >= 2 ? 8 : 0) + elem;
  return {row, col};
}

/// Byte offset, within a k-block's values, of word `step` of thread `t`.
FMOE_E2M1_HD int value_word_offset(int t, int step) { return (t * kSteps + step) * 4; }

/// Row and k16 step of scale byte `b` (0..7) of lane quad `quad` (0..63, thread_quad): the quad's
/// rows are r0 and r0 + 8, its bytes (step 0: r0, r1), (step 1: r0, r1), ... Byte offset within a
/// k-block's scales: 8 * quad + b.
FMOE_E2M1_HD Src scale_source(int quad, int b) {
  const int r0 = 16 * (quad / 8) + quad % 8;  // 64 wgc + 16 warp + lane / 4 of the quad's threads
  return {r0 + (b % 2 == 1 ? 8 : 0), b / 2};
}
/// The lane quad of thread t (its 4 lanes share their rows, hence their scales).
FMOE_E2M1_HD int thread_quad(int t) { return (t / 32) * 8 + (t % 32) / 4; }

// ---- decode ----------------------------------------------------------------------------------

/// Register p (0..3) of a word: bf16x2 bits whose values are the two E2M1 codes * 2^-126.
FMOE_E2M1_HD uint32_t decode_pair(uint32_t word, int p) {
  const uint32_t q = word << (4 * p);
  return (q & 0x80008000u) | ((q >> 6) & 0x01C001C0u);
}

/// Two E4M3 scales, as the f16x2 that cvt.rn.f16x2.e4m3x2 gives (exact), to the bf16x2 of the
/// scales * 2^100. The scales must be finite and non-negative (prepare checks); a zero scale
/// becomes 2^85, harmless because prepare zeroes the codes of a block whose scale is zero.
FMOE_E2M1_HD uint32_t scale_f16x2_to_bf16x2(uint32_t h) {
  return ((h >> 3) & 0x0FFF0FFFu) + 0x6A006A00u;
}

// ---- MXFP4 (gpt-oss): UE8M0 scales per 32 in the E4M3 slots ----------------------------------
// The decode above takes E4M3 block scales per 16. An MXFP4 scale 2^(c - 127) (UE8M0 code c,
// one per 32 values) goes into both of its 16-slots as the E4M3 power of two 2^(c - c_max + 8),
// c_max the row's largest code, and the row's fp32 factor (the accumulator multiplier that
// carries NVFP4's global scale) becomes 2^(c_max - 127 - 8). E4M3 holds the powers of two 2^-9 ..
// 2^8 exactly, so every block within 17 binades of its row's largest is exact; a block further
// below is stored as zero (it is below 2^-17 of the row's largest block scale, so its values are
// below 6 * 2^-17 of that block's largest possible one). The CPU reference applies the same rule.
constexpr int kMxTopExponent = 8;   // the row's largest scale becomes E4M3's 2^8
constexpr int kMxMinExponent = -9;  // E4M3's smallest power of two (a subnormal)

/// E4M3 code of the power of two 2^p, or 0 (zero) for p below 2^-9. p <= 8.
FMOE_E2M1_HD uint8_t e4m3_power_of_two(int p) {
  if (p >= -6) return uint8_t((p + 7) << 3);             // normal: exponent field p + 7
  if (p >= kMxMinExponent) return uint8_t(1 << (p + 9));  // subnormal: mantissa * 2^-9
  return 0;
}
/// The E4M3 slot value of MXFP4 scale code `code` in a row whose largest code is `row_max`.
FMOE_E2M1_HD uint8_t mx_scale_slot(int code, int row_max) {
  return e4m3_power_of_two(code - row_max + kMxTopExponent);
}
/// log2 of the row factor (the accumulator multiplier before the 2^26 of kProductShift).
FMOE_E2M1_HD int mx_row_factor_log2(int row_max) { return row_max - 127 - kMxTopExponent; }

#if defined(__CUDACC__)
// ---- device: one thread's fragments of one (128-row tile, k-block) ---------------------------

__device__ __forceinline__ uint32_t cvt_f16x2_e4m3x2(uint16_t two_codes) {
  uint32_t h;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(two_codes));
  return h;
}
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

/// The A fragments of the block's four k16 steps for thread t of the two consumer warpgroups,
/// from its words (`block` + value_word_offset(t, 0), 16 bytes) and its quad's scales
/// (`block` + kValueBytes + 8 * thread_quad(t), 8 bytes): a[step][p] = the wgmma register p,
/// values * scales * 2^-26 in bf16 (exact).
__device__ __forceinline__ void decode_fragments(const uint8_t* block, int t, uint32_t (&a)[kSteps][4]) {
  const uint4 words = *reinterpret_cast<const uint4*>(block + value_word_offset(t, 0));
  const uint2 scales = *reinterpret_cast<const uint2*>(block + kValueBytes + 8 * thread_quad(t));
  const uint32_t w4[kSteps] = {words.x, words.y, words.z, words.w};
#pragma unroll
  for (int step = 0; step < kSteps; ++step) {
    const uint32_t sw = step < 2 ? scales.x : scales.y;
    const uint32_t s01 = scale_f16x2_to_bf16x2(cvt_f16x2_e4m3x2(uint16_t(sw >> (16 * (step % 2)))));
    const uint32_t s0 = __byte_perm(s01, 0, 0x1010), s1 = __byte_perm(s01, 0, 0x3232);  // (r0, r0), (r1, r1)
#pragma unroll
    for (int p = 0; p < 4; ++p) a[step][p] = mul_bf16x2(decode_pair(w4[step], p), p % 2 ? s1 : s0);
  }
}
#endif

}  // namespace fusedmoe::detail::e2m1
