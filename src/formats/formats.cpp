// Host codecs and quantizers. The device kernels implement the same float operations in the
// same order, so codes and scales match bit for bit (tests/formats checks the codecs against
// hand-computed values; tests of each kernel compare its codes with these).
#include "fusedmoe/formats.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/parallel.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe::fmt {
namespace {

uint32_t float_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float bits_float(uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

struct E4M3Table {
  float value[256];
  E4M3Table() {
    for (int c = 0; c < 256; ++c) {
      const int sign = c >> 7, exp = (c >> 3) & 0xF, man = c & 7;
      float v;
      if (exp == 0xF && man == 7) {
        v = std::nanf("");
      } else if (exp == 0) {
        v = std::ldexp(float(man), -9);  // subnormal: man * 2^-6 / 8
      } else {
        v = std::ldexp(1.0f + float(man) / 8.0f, exp - 7);
      }
      value[c] = sign ? -v : v;
    }
  }
};
const E4M3Table& e4m3_table() {
  static const E4M3Table table;
  return table;
}

constexpr float kE2M1Values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// NaN-propagating max of magnitudes: any NaN makes the block's amax NaN (poison policy).
inline float amax_step(float acc, float x) {
  const float a = std::fabs(x);
  if (std::isnan(a) || std::isnan(acc)) return std::nanf("");
  return a > acc ? a : acc;
}

}  // namespace

uint8_t e4m3_from_float(float x) {
  uint32_t u = float_bits(x);
  const uint8_t sign = uint8_t((u >> 24) & 0x80);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return sign | 0x7F;              // NaN
  if (u >= 0x43E00000u) return sign | 0x7E;             // >= 448 (and Inf): satfinite
  if (u < 0x3C800000u) {                                // below 2^-6: E4M3 subnormal or zero
    // Scaling by 2^9 is exact; RNE to an integer count of 2^-9 quanta (8 quanta is 2^-6,
    // whose code 0x08 is the first normal: the encoding is continuous).
    const float quanta = bits_float(u) * 512.0f;
    return sign | uint8_t(std::nearbyint(quanta));
  }
  // Normal: keep 3 of the 23 mantissa bits, RNE on the 20 dropped bits; a carry into the
  // exponent is the correct next binade. Rebias 127 -> 7.
  const uint32_t rounded = (u + 0x7FFFFu + ((u >> 20) & 1u)) >> 20;
  const uint32_t code = rounded - ((127u - 7u) << 3);
  return sign | uint8_t(std::min<uint32_t>(code, 0x7E));
}

float e4m3_to_float(uint8_t code) { return e4m3_table().value[code]; }

uint8_t e2m1_from_float(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const float a = std::fabs(x);
  // Thresholds are the midpoints between neighbours; at a tie the even code wins (<= vs <).
  uint8_t c;
  if (a <= 0.25f) c = 0;
  else if (a < 0.75f) c = 1;
  else if (a <= 1.25f) c = 2;
  else if (a < 1.75f) c = 3;
  else if (a <= 2.5f) c = 4;
  else if (a < 3.5f) c = 5;
  else if (a <= 5.0f) c = 6;
  else c = 7;
  return sign | c;
}

float e2m1_to_float(uint8_t code) {
  const float v = kE2M1Values[code & 7];
  return (code & 8) ? -v : v;
}

uint8_t ue8m0_from_float_ceil(float x) {
  if (std::isnan(x)) return 0xFF;
  if (x <= 0.0f) return 0;
  if (x > 0x1p127f) return 0xFE;
  int exp;
  const float m = std::frexp(x, &exp);  // x = m * 2^exp, m in [0.5, 1)
  int e = (m == 0.5f) ? exp - 1 : exp;  // exact power of two keeps its exponent
  return uint8_t(std::clamp(e + 127, 0, 0xFE));
}

float ue8m0_to_float(uint8_t code) {
  if (code == 0xFF) return std::nanf("");
  return std::ldexp(1.0f, int(code) - 127);
}

uint16_t bf16_from_float(float x) {
  const uint32_t u = float_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x0040);  // quiet NaN
  const uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
  return uint16_t(rounded >> 16);
}

float bf16_to_float(uint16_t bits) { return bits_float(uint32_t(bits) << 16); }

uint16_t f16_from_float(float x) {
  const uint32_t u = float_bits(x);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00;              // NaN
  if (a >= 0x477FF000u) return sign | 0x7C00;             // >= 65520 rounds to Inf
  if (a < 0x38800000u) {                                  // below 2^-14: half subnormal
    const float quanta = bits_float(a) * 0x1p24f;         // exact scaling to 2^-24 units
    return sign | uint16_t(std::nearbyint(quanta));
  }
  const uint32_t rounded = (a + 0xFFFu + ((a >> 13) & 1u)) >> 13;
  return sign | uint16_t(rounded - ((127u - 15u) << 10));
}

float f16_to_float(uint16_t bits) {
  const uint32_t sign = uint32_t(bits & 0x8000) << 16;
  const int exp = (bits >> 10) & 0x1F;
  const int man = bits & 0x3FF;
  float v;
  if (exp == 0) v = std::ldexp(float(man), -24);
  else if (exp == 31) v = man ? std::nanf("") : INFINITY;
  else v = std::ldexp(1.0f + float(man) / 1024.0f, exp - 15);
  return bits_float(float_bits(v) | sign);
}

float abs_max(const float* x, int64_t n) {
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc = amax_step(acc, x[i]);
  return acc;
}

namespace {
// scale = amax / 448 and inverse 448 / amax, with the zero-block and poison rules shared by
// every FP8 quantizer.
struct Fp8Scale {
  float scale, inv;
};
inline Fp8Scale fp8_scale_from_amax(float amax) {
  if (amax == 0.0f) return {0.0f, 0.0f};
  return {amax / kE4M3Max, kE4M3Max / amax};
}
}  // namespace

void quantize_fp8_per_token(const float* x, int64_t rows, int64_t cols, int block, uint8_t* q,
                            float* scales) {
  FMOE_REQUIRE(rows >= 0 && cols >= 0 && block > 0,
               "quantize_fp8_per_token: rows=%lld cols=%lld block=%d", (long long)rows,
               (long long)cols, block);
  const int64_t nblk = (cols + block - 1) / block;
  detail::parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t b = 0; b < nblk; ++b) {
        const int64_t c0 = b * block, c1 = std::min(cols, c0 + block);
        const float* xr = x + r * cols;
        float amax = 0.0f;
        for (int64_t c = c0; c < c1; ++c) amax = amax_step(amax, xr[c]);
        const Fp8Scale s = fp8_scale_from_amax(amax);
        scales[r * nblk + b] = s.scale;
        for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = e4m3_from_float(xr[c] * s.inv);
      }
    }
  }, 16);
}

void quantize_fp8_per_token_128(const float* x, int64_t rows, int64_t cols, uint8_t* q,
                                float* scales) {
  quantize_fp8_per_token(x, rows, cols, 128, q, scales);
}

void quantize_fp8_block_128x128(const float* w, int64_t rows, int64_t cols, uint8_t* q,
                                float* scale_inv) {
  FMOE_REQUIRE(rows >= 0 && cols >= 0, "quantize_fp8_block_128x128: rows=%lld cols=%lld",
               (long long)rows, (long long)cols);
  const int64_t nbr = (rows + 127) / 128, nbc = (cols + 127) / 128;
  detail::parallel_for(nbr * nbc, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t br = i / nbc, bc = i % nbc;
      const int64_t r0 = br * 128, r1 = std::min(rows, r0 + 128);
      const int64_t c0 = bc * 128, c1 = std::min(cols, c0 + 128);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = amax_step(amax, w[r * cols + c]);
      const Fp8Scale s = fp8_scale_from_amax(amax);
      scale_inv[i] = s.scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) q[r * cols + c] = e4m3_from_float(w[r * cols + c] * s.inv);
    }
  });
}

float nvfp4_global_scale(float amax) {
  if (amax == 0.0f) return 1.0f;
  return amax / (kE2M1Max * kE4M3Max);
}

void quantize_nvfp4(const float* x, int64_t rows, int64_t cols, float global_scale,
                    uint8_t* packed, uint8_t* block_scales) {
  FMOE_REQUIRE(cols % 16 == 0, "quantize_nvfp4: cols=%lld must be a multiple of 16 (scale block)",
               (long long)cols);
  FMOE_REQUIRE(global_scale > 0.0f || std::isnan(global_scale),
               "quantize_nvfp4: global_scale=%g must be positive", double(global_scale));
  const int64_t nblk = cols / 16;
  detail::parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      for (int64_t b = 0; b < nblk; ++b) {
        float amax = 0.0f;
        for (int c = 0; c < 16; ++c) amax = amax_step(amax, xr[b * 16 + c]);
        const uint8_t s_code = e4m3_from_float((amax / kE2M1Max) / global_scale);
        block_scales[r * nblk + b] = s_code;
        const float denom = e4m3_to_float(s_code) * global_scale;
        for (int c = 0; c < 16; c += 2) {
          uint8_t lo = 0, hi = 0;
          if (denom != 0.0f) {
            lo = e2m1_from_float(xr[b * 16 + c] / denom);
            hi = e2m1_from_float(xr[b * 16 + c + 1] / denom);
          }
          packed[r * (cols / 2) + (b * 16 + c) / 2] = uint8_t(lo | (hi << 4));
        }
      }
    }
  }, 16);
}

void quantize_mxfp4(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales) {
  FMOE_REQUIRE(cols % 32 == 0, "quantize_mxfp4: cols=%lld must be a multiple of 32 (scale block)",
               (long long)cols);
  const int64_t nblk = cols / 32;
  detail::parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      for (int64_t b = 0; b < nblk; ++b) {
        float amax = 0.0f;
        for (int c = 0; c < 32; ++c) amax = amax_step(amax, xr[b * 32 + c]);
        // Inf poisons the block as NaN does (formats.hpp's non-finite policy).
        const uint8_t s_code = std::isfinite(amax) ? ue8m0_from_float_ceil(amax / kE2M1Max) : 0xFF;
        scales[r * nblk + b] = s_code;
        const float s = ue8m0_to_float(s_code);
        for (int c = 0; c < 32; c += 2) {
          uint8_t lo = 0, hi = 0;
          if (amax > 0.0f && s_code != 0xFF) {
            lo = e2m1_from_float(xr[b * 32 + c] / s);  // a power of two: the division is exact
            hi = e2m1_from_float(xr[b * 32 + c + 1] / s);
          }
          packed[r * (cols / 2) + (b * 32 + c) / 2] = uint8_t(lo | (hi << 4));
        }
      }
    }
  }, 16);
}

void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                      float* x) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = packed[r * (cols / 2) + c / 2];
      const uint8_t code = (c & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF);
      x[r * cols + c] = e2m1_to_float(code) * ue8m0_to_float(scales[r * (cols / 32) + c / 32]);
    }
}

void dequantize_fp8_per_token_128(const uint8_t* q, const float* scales, int64_t rows,
                                  int64_t cols, float* x) {
  const int64_t nblk = (cols + 127) / 128;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] = e4m3_to_float(q[r * cols + c]) * scales[r * nblk + c / 128];
}

void dequantize_fp8_block_128x128(const uint8_t* q, const float* scale_inv, int64_t rows,
                                  int64_t cols, float* w) {
  const int64_t nbc = (cols + 127) / 128;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w[r * cols + c] = e4m3_to_float(q[r * cols + c]) * scale_inv[(r / 128) * nbc + c / 128];
}

void dequantize_nvfp4(const uint8_t* packed, const uint8_t* block_scales, float global_scale,
                      int64_t rows, int64_t cols, float* x) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t byte = packed[r * (cols / 2) + c / 2];
      const uint8_t code = (c & 1) ? uint8_t(byte >> 4) : uint8_t(byte & 0xF);
      // e2m1 * e4m3 is exact in fp32 (and in bf16): the kernels form it first, then apply the
      // fp32 global scale, so the reference does the same.
      const float v = e2m1_to_float(code) * e4m3_to_float(block_scales[r * (cols / 16) + c / 16]);
      x[r * cols + c] = v * global_scale;
    }
}

}  // namespace fusedmoe::fmt
