// Scalar math of the NVFP4 output of rmsnorm_quant, shared by the kernel (sm90_norm.cuh) and the
// CPU tests (tests/norm/test_norm_ref.cpp), which check it against fmt::e2m1_from_float and IEEE
// division on the host. No CUDA headers: the host side compiles it with g++.
//
// fmt::quantize_nvfp4 writes e2m1(y / denom) per value, one IEEE division each. A correctly
// rounded fp32 division costs about 9 instructions on sm_90 (reciprocal, refinement, range check),
// and the NVFP4 output has about 25 instructions of budget per value at full HBM bandwidth, so
// the kernel divides by a reciprocal computed once per 16-value block instead (div_by_recip), and
// encodes with a few integer operations (e2m1_code) rather than seven comparisons.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define FMOE_NORM_HD __host__ __device__ __forceinline__
#else
#define FMOE_NORM_HD inline
#endif

namespace fusedmoe::detail::norm_math {

FMOE_NORM_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

FMOE_NORM_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

/// a * b + c with one rounding (host: std::fma; the host build also never contracts a * b + c,
/// -ffp-contract=off, so the plain products below round once on both sides).
FMOE_NORM_HD float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// The E2M1 code of q (sign in bit 3, magnitude code in bits 0-2): round to nearest even onto
/// {0, 0.5, 1, 1.5, 2, 3, 4, 6}, saturating at 6; -0 and small negatives keep the sign bit. Equal
/// to fmt::e2m1_from_float for every q that is not NaN (the caller handles NaN blocks).
/// |q| < 1: the E2M1 subnormal range, a fixed step of 0.5: |q| + 2^22 rounds (once, to nearest
/// even) to a multiple of 0.5, whose count is the code 0, 1 or 2 (2 is 1.0).
/// |q| >= 1: one mantissa bit, so round the fp32 bits to nearest even at bit 22: the carry runs
/// into the exponent as E2M1's does, and (bits >> 22) - 252 is the code (1.0 -> 2 ... 6.0 -> 7).
FMOE_NORM_HD uint32_t e2m1_code(float q) {
  const uint32_t u = float_bits(q);
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t sign = (u >> 28) & 8u;
  const float small_sum = bits_float(a) + 0x1p22f;
  const uint32_t small = float_bits(small_sum) - 0x4A800000u;  // bits of 2^22
  const uint32_t rounded = (a + (0x1FFFFFu - (252u << 22)) + ((a >> 22) & 1u)) >> 22;
  const uint32_t big = rounded < 7u ? rounded : 7u;
  return sign | (a < 0x3F800000u ? small : big);
}

/// RN(y / d) given r = RN(1 / d), by one correction step: q0 = RN(y * r) is within about an ulp
/// of y / d, the residual y - q0 * d is then exact in one fma, and RN(q0 + residual * r) is the
/// correctly rounded quotient (Markstein's theorem; tests/norm/test_norm_ref.cpp checks it against
/// IEEE division on every divisor significand, with dividends next to rounding midpoints).
/// Valid while nothing over- or underflows: the kernel uses it only when div_by_recip_ok holds.
/// The sign is copied from y (d > 0): for y = -0 the correction sums +0 and -0, which rounds to
/// +0, where IEEE's -0 / d is -0 (E2M1 code 8, as fmt::quantize_nvfp4 writes it).
FMOE_NORM_HD float div_by_recip(float y, float d, float r) {
  const float q0 = y * r;
  const float e = fma_rn(-q0, d, y);
#if defined(__CUDA_ARCH__)
  return copysignf(fma_rn(e, r, q0), y);
#else
  return std::copysign(fma_rn(e, r, q0), y);
#endif
}

/// Whether div_by_recip is exact for every |y| <= amax of a block with divisor d and reciprocal
/// r: d within [2^-64, 2^64] keeps the residual of any quotient that matters (|q| >= 2^-3)
/// normal, and amax * r <= 16 keeps q0 finite. Outside (huge or tiny global scales, or a block
/// scale saturated at 448) the kernel divides as IEEE does.
FMOE_NORM_HD bool div_by_recip_ok(float d, float r, float amax) {
  return d >= 0x1p-64f && d <= 0x1p64f && amax * r <= 16.0f;
}

}  // namespace fusedmoe::detail::norm_math
