// NVFP4 weights for the grouped GEMM engine (issue 11; W4A16: bf16 activations, bf16 wgmma with
// the weights decoded in registers as wgmma's A operand). Host and device code, no CUDA headers:
// the prepare step (which re-lays ModelOpt's layout into the one below), the kernels' decode, and
// the CPU tests that check the two agree bit for bit all use these functions.
//
// Why this layout. With weights as wgmma's M side, an m64nNk16 bf16 wgmma with A from registers
// takes, per thread, four bf16x2 registers: rows r0 = 16 warp + lane / 4 and r1 = r0 + 8 of the
// warpgroup's 64, columns k = 2q, 2q + 1 and 2q + 8, 2q + 9 of the k16 step (q = lane % 4):
//   a0 = (r0; 2q, 2q+1)  a1 = (r1; 2q, 2q+1)  a2 = (r0; 2q+8, 2q+9)  a3 = (r1; 2q+8, 2q+9)
// Those 8 E2M1 values are one 32-bit word of the prepared layout. A bf16 reads an E2M1 code (sign,
// e1 e0 m) placed at its bits 15 and 8..6 as the code's value * 2^-126, so register p needs the
// code bits at 15, 8, 7, 6 (low element) and 31, 24, 23, 22 (high). The word's bits are spread
// (code_bit) so that two registers come out by one shift and one mask each (a1: << 3; a2: << 6)
// and two by two masks, each from a left-shifted sign and a magnitude (a0: sign << 4, magnitude in
// place; a3: sign << 5, magnitude >> 7). Left shifts run on the FMA pipe (IMAD.SHL), right shifts
// and masks on the integer ALU, which the decode saturates (ncu, docs/performance.md): 6 masks +
// 1 shift there per word. No layout does with fewer: a bf16's bits 8..6 can come by left shifts
// only from bits 0..8, 9 bits for 4 registers' 12, so one right shift is needed; and a register
// whose sign and magnitude move by different amounts needs two masks (an exhaustive search of
// shift-and-mask decodes, session 51). Contiguous nibbles took 10 ALU instructions, the previous
// layout 8 (a3 from three shifts, two of them right); this one takes 7 and made the NVFP4 layers
// 1-2% faster at T=32-128.
// A k-block is 64 K values (one bf16 activation row of 128 bytes, one 128-byte swizzle row): four
// k16 steps, so each thread's words of a 128-row weight tile and k-block are 16 contiguous bytes
// (one 16-byte shared-memory load, consecutive lanes consecutive: no bank conflicts).
//
// The block scales: 1 byte per 16 values as in the checkpoint, but re-encoded (scale_code) so that
// a bf16 pair of scales falls out of one byte permute and one integer multiply-add: E4M3's
// values (2^-9 .. 448) with their subnormals normalized, a 5-bit exponent from 2^-9 and E4M3's 3
// mantissa bits. Per thread and k16 step one byte for r0 and one for r1, 8 bytes per k-block,
// shared by the 4 lanes of a quad; a step's two bytes become one bf16 pair (r0's, r1's), and each
// multiply reads the half of its row through an operand selector. (Decoding E4M3 itself took
// cvt.rn.f16x2.e4m3x2 and four integer operations per pair: a quarter of the decode's
// integer-pipe instructions.)
//
// Exactness. The decode places an E2M1 code's exponent and mantissa bits into a bf16's lowest
// exponent bits and top mantissa bit, which reads as value * 2^-126 (code 1, 0.5, becomes a bf16
// subnormal); a scale byte placed into a bf16's exponent and mantissa reads as the scale * 2^100;
// their bf16 product is value * scale * 2^-26, exact (at most 5 significant bits, exponents from
// 2^-36 to 2^11.4). The fp32 accumulators are multiplied by the global scale (weight_scale_2) *
// 2^26 once per tile.
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
  // code n -> (row r0 / r1, column offset): p = n % 4 is the register, n / 4 the element.
  const int p = n % 4, elem = n / 4;
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

/// Word bit of bit b (0: m, 1: e0, 2: e1, 3: sign) of code n (0..7: register n % 4, element
/// n / 4; the high element's bits are the low one's + 16).
FMOE_E2M1_HD int code_bit(int n, int b) {
  constexpr int kLow[4][4] = {
      {6, 7, 8, 11},     // a0: magnitude where the bf16 reads it, sign << 4
      {3, 4, 5, 12},     // a1: << 3
      {0, 1, 2, 9},      // a2: << 6
      {13, 14, 15, 10},  // a3: magnitude >> 7, sign << 5
  };
  return kLow[n % 4][b] + 16 * (n / 4);
}
/// The word bits of E2M1 code `code` (0..15) as code n.
FMOE_E2M1_HD uint32_t place_code(int n, uint32_t code) {
  uint32_t w = 0;
  for (int b = 0; b < 4; ++b) w |= ((code >> b) & 1u) << code_bit(n, b);
  return w;
}
/// Code n of a word (the inverse of place_code).
FMOE_E2M1_HD uint32_t take_code(uint32_t word, int n) {
  uint32_t c = 0;
  for (int b = 0; b < 4; ++b) c |= ((word >> code_bit(n, b)) & 1u) << b;
  return c;
}

/// Register p (0..3) of a word: bf16x2 bits whose values are codes p and p + 4 * 2^-126.
FMOE_E2M1_HD uint32_t decode_pair(uint32_t word, int p) {
  constexpr uint32_t kBf16Bits = 0x81C081C0u;  // sign, e1, e0, m of both elements
  switch (p) {
    case 0: return ((word << 4) & 0x80008000u) | (word & 0x01C001C0u);
    case 1: return (word << 3) & kBf16Bits;
    case 2: return (word << 6) & kBf16Bits;
    default: return ((word << 5) & 0x80008000u) | ((word >> 7) & 0x01C001C0u);
  }
}

/// The prepared byte of a finite non-negative E4M3 scale: (e + 9) << 3 | m for the value
/// 2^e * 1.m (e from -9 to 8; an E4M3 subnormal is normalized here). A zero scale gives 0 (the
/// value 2^-9), harmless because prepare zeroes the codes of a block whose scale is zero.
FMOE_E2M1_HD uint8_t scale_code(uint8_t e4m3) {
  if (e4m3 >= 8) return uint8_t(e4m3 + 16);  // normal: exponent field e + 7 -> e + 9
  int e = -9, m = e4m3;                        // subnormal: m * 2^-9, m in 1..7
  if (m == 0) return 0;
  while (m < 8) m <<= 1, --e;                  // normalize to 1.mmm (m in 8..15)
  e += 3;
  return uint8_t((e + 9) << 3 | (m & 7));
}

/// The bf16 pair (s_a, s_b) of two scales * 2^100 from 0x00bb00aa (a, b prepared scale bytes,
/// placed by one byte permute; the same byte twice gives (s, s)): bits c << 4 are the low 5
/// exponent bits and 3 mantissa bits, and the constant adds the exponent's bias
/// (218 = 127 + 100 - 9). c << 4 + 0x6D00 <= 0x7CF0: no carry into the high half.
constexpr uint32_t kScalePairBias = 0x6D006D00u;
/// `mul` is always kScaleMul (16). The engine's decode passes it from a kernel parameter
/// (GroupedGemmParams::e2m1_scale_mul) so that the multiply-add stays an IMAD on the FMA pipe:
/// with the literal, ptxas makes it a LEA on the integer ALU, which the decode keeps ~62% busy
/// (ncu, session 50). Session 51: NVFP4 / MXFP4 layers 2-4% faster at T=32-128 for it.
constexpr uint32_t kScaleMul = 16u;
FMOE_E2M1_HD uint32_t scale_pair(uint32_t spread, uint32_t mul = kScaleMul) {
  return spread * mul + kScalePairBias;
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

/// a * (b's low half, twice) and a * (b's high half, twice): the broadcast is an operand selector
/// of the SASS multiply (HMUL2.BF16_V2 ... R.H0_H0 / R.H1_H1), not an instruction.
__device__ __forceinline__ uint32_t mul_bf16x2_lo(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("{.reg .b16 l, h; .reg .b32 t; mov.b32 {l, h}, %2; mov.b32 t, {l, l};"
      " mul.rn.bf16x2 %0, %1, t;}"
      : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t mul_bf16x2_hi(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("{.reg .b16 l, h; .reg .b32 t; mov.b32 {l, h}, %2; mov.b32 t, {h, h};"
      " mul.rn.bf16x2 %0, %1, t;}"
      : "=r"(d) : "r"(a), "r"(b));
  return d;
}

/// The A fragments of the block's four k16 steps for thread t of the two consumer warpgroups,
/// from its words (`block` + value_word_offset(t, 0), 16 bytes) and its quad's scales
/// (`block` + kValueBytes + 8 * thread_quad(t), 8 bytes): a[step][p] = the wgmma register p,
/// values * scales * 2^-26 in bf16 (exact).
/// The same from the two loads already in registers (the decode GEMV loads blocks ahead of use).
/// `scale_mul` is kScaleMul; the engine passes it from a kernel parameter (see scale_pair).
__device__ __forceinline__ void decode_words(uint4 words, uint2 scales, uint32_t (&a)[kSteps][4],
                                             uint32_t scale_mul = kScaleMul);
__device__ __forceinline__ void decode_fragments(const uint8_t* block, int t,
                                                 uint32_t (&a)[kSteps][4],
                                                 uint32_t scale_mul = kScaleMul) {
  decode_words(*reinterpret_cast<const uint4*>(block + value_word_offset(t, 0)),
               *reinterpret_cast<const uint2*>(block + kValueBytes + 8 * thread_quad(t)), a,
               scale_mul);
}
__device__ __forceinline__ void decode_words(uint4 words, uint2 scales, uint32_t (&a)[kSteps][4],
                                             uint32_t scale_mul) {
  const uint32_t w4[kSteps] = {words.x, words.y, words.z, words.w};
#pragma unroll
  for (int step = 0; step < kSteps; ++step) {
    const uint32_t sw = step < 2 ? scales.x : scales.y;
    const uint32_t b0 = 2 * (step % 2), b1 = b0 + 1;  // the step's r0 and r1 bytes in sw
    // (r0's scale, r1's scale) from one byte permute (zero bytes from the second operand,
    // selector 4) and one multiply-add; each multiply takes the half its row needs. (A pair per
    // row, (r0, r0) and (r1, r1), took twice the permutes and multiply-adds: 4 of the decode's
    // ~12 integer-pipe instructions per word.)
    const uint32_t s01 = scale_pair(__byte_perm(sw, 0, 0x4040u | b0 | (b1 << 8)), scale_mul);
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const uint32_t v = decode_pair(w4[step], p);
      a[step][p] = p % 2 ? mul_bf16x2_hi(v, s01) : mul_bf16x2_lo(v, s01);
    }
  }
}
#endif

}  // namespace fusedmoe::detail::e2m1
