// The CPU side of the fused RMSNorm + quantize: the reference's properties (known values, the
// residual add, the poison rules, zero rows, the quantized forms against their definitions), the
// kernel's scalar NVFP4 math (src/norm/norm_math.hpp) against fmt:: and IEEE division, and the
// config choice. No GPU, no CUDA headers: these run in the build without CUDA too.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "fusedmoe/formats.hpp"
#include "norm/norm_config.hpp"
#include "norm/norm_math.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using ref::NormOutForm;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

float bits_float(uint32_t u) { return detail::norm_math::bits_float(u); }
uint32_t float_bits(float f) { return detail::norm_math::float_bits(f); }

std::vector<float> bf16_values(int64_t n, uint64_t seed, uint64_t stream, float scale) {
  return ref::random_bf16(n, seed, stream, scale);
}

double e4m3_value(uint8_t code) { return double(fmt::e4m3_to_float(code)); }

// The dequantized NVFP4 value of column c of row t.
double nvfp4_value(const ref::RmsNormQuantResult& r, int t, int c, float g) {
  const uint8_t byte = r.q[size_t(t) * (r.H / 2) + c / 2];
  const uint8_t code = c % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 15);
  return double(fmt::e2m1_to_float(code)) * e4m3_value(r.nvfp4_scale[size_t(t) * (r.H / 16) + c / 16]) * g;
}

}  // namespace

// ---- the reference ------------------------------------------------------------------------------

TEST(NormRef, KnownValues) {
  const std::vector<float> x = {1, 2, 3, 4}, w = {1, 0.5f, 2, -1};
  const float eps = 1e-6f;
  const auto r = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 1, 4, eps, NormOutForm::bf16);
  const double inv = 1.0 / std::sqrt(30.0 / 4 + double(eps));  // mean of 1 + 4 + 9 + 16
  EXPECT_EQ(r.inv_rms[0], inv);
  for (int c = 0; c < 4; ++c) {
    const float want = float(double(x[size_t(c)]) * inv * double(w[size_t(c)]));
    EXPECT_EQ(r.y[size_t(c)], want) << c;
    EXPECT_EQ(r.out_bf16[size_t(c)], fmt::bf16_from_float(want)) << c;
  }
  // 1 * inv = 0.36514837...: the bf16 output is its RNE, 0.365234375.
  EXPECT_EQ(fmt::bf16_to_float(r.out_bf16[0]), 0.365234375f);
  EXPECT_EQ(fmt::bf16_to_float(r.out_bf16[3]), -1.4609375f);
}

TEST(NormRef, ResidualIsAddedInFp32AndRoundedOnceToBf16) {
  // 1 + 2^-8 is a tie between bf16 neighbours 1 and 1 + 2^-7: even (1) wins; 1 + 3 * 2^-9 is past
  // the tie; 2^20 + 1 is exact in fp32 and rounds to 2^20 in bf16.
  const std::vector<float> x = {1.0f, 1.0f, 0x1p20f, -2.0f};
  const std::vector<float> res = {0x1p-8f, 3 * 0x1p-9f, 1.0f, 0.5f};
  const std::vector<float> w(4, 1.0f);
  const auto r = ref::rmsnorm_quant(x.data(), res.data(), w.data(), 1, 4, 1e-6f, NormOutForm::bf16);
  EXPECT_EQ(r.h[0], 1.0f);
  EXPECT_EQ(r.h[1], 1.0f + 0x1p-7f);
  EXPECT_EQ(r.h[2], 0x1p20f);
  EXPECT_EQ(r.h[3], -1.5f);
  double ss = 0;
  for (float v : r.h) ss += double(v) * v;
  EXPECT_EQ(r.inv_rms[0], 1.0 / std::sqrt(ss / 4 + double(1e-6f))) << "the normalized values are h";
}

TEST(NormRef, Fp8FormIsTheActivationQuantizerOfY) {
  const int T = 3, H = 128 + 48;  // a partial last block
  const auto x = bf16_values(T * H, 5, 1, 4.0f), w = bf16_values(H, 5, 2, 1.0f);
  const auto r = ref::rmsnorm_quant(x.data(), nullptr, w.data(), T, H, 1e-5f, NormOutForm::fp8);
  ASSERT_EQ(r.fp8_scale.size(), size_t(T * 2));
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < 2; ++b) {
      double amax = 0;
      for (int c = 128 * b; c < std::min(H, 128 * (b + 1)); ++c) amax = std::max(amax, std::fabs(double(r.y[size_t(t * H + c)])));
      EXPECT_EQ(r.fp8_scale[size_t(t * 2 + b)], float(amax) / 448.0f) << t << " " << b;
      for (int c = 128 * b; c < std::min(H, 128 * (b + 1)); ++c) {
        const double y = r.y[size_t(t * H + c)];
        const double back = e4m3_value(r.q[size_t(t * H + c)]) * r.fp8_scale[size_t(t * 2 + b)];
        // Half an e4m3 step: 2^-4 relative for normals, 2^-10 * scale in the subnormal range.
        EXPECT_LE(std::fabs(back - y), 0x1p-4 * std::fabs(y) + 0x1p-10 * r.fp8_scale[size_t(t * 2 + b)] + 1e-30)
            << t << " " << c;
      }
    }
}

TEST(NormRef, Nvfp4FormIsModelOptsQuantizerOfY) {
  const int T = 2, H = 64;
  const auto x = bf16_values(T * H, 6, 1, 3.0f), w = bf16_values(H, 6, 2, 1.0f);
  const float g = 1.0f / 700.0f;
  const auto r = ref::rmsnorm_quant(x.data(), nullptr, w.data(), T, H, 1e-6f, NormOutForm::nvfp4, g);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < H / 16; ++b) {
      float amax = 0;
      for (int c = 16 * b; c < 16 * b + 16; ++c) amax = std::max(amax, std::fabs(r.y[size_t(t * H + c)]));
      EXPECT_EQ(r.nvfp4_scale[size_t(t * (H / 16) + b)], fmt::e4m3_from_float((amax / 6.0f) / g));
      const double denom = e4m3_value(r.nvfp4_scale[size_t(t * (H / 16) + b)]) * g;
      for (int c = 16 * b; c < 16 * b + 16; ++c) {
        const double y = r.y[size_t(t * H + c)];
        // Half the E2M1 step around |y| / denom, plus the clipping at 6 when s rounded down.
        const double q = std::fabs(y) / denom, half_step = q < 2 ? 0.25 : q < 4 ? 0.5 : 1.0;
        EXPECT_LE(std::fabs(nvfp4_value(r, t, c, g) - y), (half_step + std::max(0.0, q - 6.0)) * denom * (1 + 1e-6))
            << t << " " << c;
      }
    }
}

TEST(NormRef, NanOrInfInARowPoisonsTheWholeRow) {
  const int T = 3, H = 256;
  for (float bad : {kNaN, INFINITY, -INFINITY}) {
    auto x = bf16_values(T * H, 7, 1, 1.0f);
    const auto w = bf16_values(H, 7, 2, 1.0f);
    x[size_t(H + 17)] = bad;  // row 1, block 0 of either form
    for (NormOutForm f : {NormOutForm::bf16, NormOutForm::fp8, NormOutForm::nvfp4}) {
      const auto r = ref::rmsnorm_quant(x.data(), nullptr, w.data(), T, H, 1e-6f, f, 0.01f);
      EXPECT_TRUE(std::isnan(r.inv_rms[1]));
      EXPECT_TRUE(std::isfinite(r.inv_rms[0]) && std::isfinite(r.inv_rms[2]));
      for (int c = 0; c < H; ++c) {
        if (f == NormOutForm::bf16) {
          EXPECT_TRUE(std::isnan(fmt::bf16_to_float(r.out_bf16[size_t(H + c)]))) << c;
          EXPECT_TRUE(std::isfinite(fmt::bf16_to_float(r.out_bf16[size_t(c)]))) << c;
        }
      }
      if (f == NormOutForm::fp8)
        for (int b = 0; b < 2; ++b) {
          EXPECT_TRUE(std::isnan(r.fp8_scale[size_t(2 + b)])) << b;
          EXPECT_TRUE(std::isfinite(r.fp8_scale[size_t(b)]) && std::isfinite(r.fp8_scale[size_t(4 + b)]));
        }
      if (f == NormOutForm::nvfp4)
        for (int b = 0; b < H / 16; ++b) {
          EXPECT_EQ(r.nvfp4_scale[size_t(H / 16 + b)] & 0x7F, 0x7F) << b;
          EXPECT_NE(r.nvfp4_scale[size_t(b)] & 0x7F, 0x7F) << b;
          for (int j = 0; j < 8; ++j) EXPECT_EQ(r.q[size_t(H / 2 + 8 * b + j)], 0) << "codes of a NaN block";
        }
    }
  }
}

TEST(NormRef, SumOfSquaresBeyondFp32PoisonsTheRow) {
  const int H = 64;
  const std::vector<float> w(H, 1.0f);
  std::vector<float> x(2 * H, fmt::round_to_bf16(1e15f));  // row 0: 1e30 * 64, fine in fp32
  for (int c = 0; c < H; ++c) x[size_t(H + c)] = fmt::round_to_bf16(c == 5 ? 1e20f : 1.0f);  // 1e40 overflows
  const auto r = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 2, H, 1e-6f, NormOutForm::fp8);
  EXPECT_TRUE(std::isfinite(r.inv_rms[0]));
  EXPECT_TRUE(std::isnan(r.inv_rms[1]));
  EXPECT_TRUE(std::isnan(r.fp8_scale[1]));
}

TEST(NormRef, ZeroRowsGiveZeroCodesAndScales) {
  const int T = 2, H = 32;
  std::vector<float> x(size_t(T * H), 0.0f);
  const auto w = bf16_values(H, 8, 2, 1.0f);
  for (NormOutForm f : {NormOutForm::bf16, NormOutForm::fp8, NormOutForm::nvfp4}) {
    const auto r = ref::rmsnorm_quant(x.data(), nullptr, w.data(), T, H, 1e-6f, f, 0.5f);
    EXPECT_EQ(r.inv_rms[0], 1.0 / std::sqrt(double(1e-6f)));
    for (float y : r.y) EXPECT_EQ(y, 0.0f);
    for (uint16_t b : r.out_bf16) EXPECT_EQ(b & 0x7FFF, 0);
    for (float s : r.fp8_scale) EXPECT_EQ(s, 0.0f);
    for (uint8_t q : r.q) EXPECT_EQ(q & 0x77, 0);  // +-0 codes
    for (uint8_t s : r.nvfp4_scale) EXPECT_EQ(s, 0);
  }
}

TEST(NormRef, InfWeightPoisonsOnlyItsBlock) {
  const int H = 256;
  const auto x = bf16_values(H, 9, 1, 1.0f);
  auto w = bf16_values(H, 9, 2, 1.0f);
  w[200] = INFINITY;  // fp8 block 1, nvfp4 block 12
  const auto f8 = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 1, H, 1e-6f, NormOutForm::fp8);
  EXPECT_TRUE(std::isfinite(f8.inv_rms[0]));
  EXPECT_TRUE(std::isfinite(f8.fp8_scale[0]));
  EXPECT_TRUE(std::isnan(f8.fp8_scale[1]));
  const auto nv = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 1, H, 1e-6f, NormOutForm::nvfp4, 0.01f);
  for (int b = 0; b < H / 16; ++b) EXPECT_EQ((nv.nvfp4_scale[size_t(b)] & 0x7F) == 0x7F, b == 12) << b;
  const auto bf = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 1, H, 1e-6f, NormOutForm::bf16);
  EXPECT_TRUE(std::isinf(fmt::bf16_to_float(bf.out_bf16[200])));
}

TEST(NormRef, BadGlobalScalePoisonsEveryNvfp4Block) {
  const int H = 32;
  const auto x = bf16_values(H, 10, 1, 1.0f), w = bf16_values(H, 10, 2, 1.0f);
  for (float g : {kNaN, 0.0f, -1.0f, INFINITY}) {
    const auto r = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 1, H, 1e-6f, NormOutForm::nvfp4, g);
    for (uint8_t s : r.nvfp4_scale) EXPECT_EQ(s, 0x7F) << g;
    for (uint8_t q : r.q) EXPECT_EQ(q, 0) << g;
  }
}

TEST(NormRef, GivenInvRmsIsUsedWithTheKernelsOperationOrder) {
  const int T = 4, H = 48;
  const auto x = bf16_values(T * H, 11, 1, 2.0f), res = bf16_values(T * H, 11, 3, 2.0f);
  const auto w = bf16_values(H, 11, 2, 1.5f);
  const auto d = ref::rmsnorm_quant(x.data(), res.data(), w.data(), T, H, 1e-6f, NormOutForm::fp8);
  std::vector<float> given(T);
  for (int t = 0; t < T; ++t) given[size_t(t)] = float(d.inv_rms[size_t(t)]) * (t == 2 ? 2.0f : 1.0f);
  const auto g = ref::rmsnorm_quant(x.data(), res.data(), w.data(), T, H, 1e-6f, NormOutForm::fp8, 1.0f, given.data());
  EXPECT_EQ(g.inv_rms, d.inv_rms) << "inv_rms is still the double one";
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < H; ++c) {
      const size_t i = size_t(t * H + c);
      const float prod = g.h[i] * given[size_t(t)];
      EXPECT_EQ(g.y[i], prod * w[size_t(c)]) << t << " " << c;
      // fp32 roundings against one rounding of the double product: a few ulps.
      const double want = t == 2 ? 2.0 * d.y[i] : d.y[i];
      EXPECT_NEAR(g.y[i], want, 4 * 0x1p-24 * std::fabs(want)) << t << " " << c;
    }
}

TEST(NormRef, ScalingTheRowByAPowerOfTwoLeavesItsNormUnchanged) {
  const int H = 512;
  auto x = bf16_values(H, 12, 1, 1.0f);
  const auto w = bf16_values(H, 12, 2, 1.0f);
  const auto a = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 1, H, 1e-12f, NormOutForm::bf16);
  for (float& v : x) v *= 64.0f;  // exact in bf16
  const auto b = ref::rmsnorm_quant(x.data(), nullptr, w.data(), 1, H, 1e-12f, NormOutForm::bf16);
  for (int c = 0; c < H; ++c) EXPECT_NEAR(b.y[size_t(c)], a.y[size_t(c)], 1e-6 * std::fabs(a.y[size_t(c)]) + 1e-12) << c;
}

// ---- the kernel's scalar NVFP4 math (norm_math.hpp) ------------------------------------------

// e2m1_code must equal fmt::e2m1_from_float for every non-NaN float. Every float within 2^16 ulps
// of each rounding threshold and of each grid value, both signs, plus a strided sweep of all
// positive floats (and specials).
TEST(NormMath, E2m1CodeIsFmtsEncoder) {
  using detail::norm_math::e2m1_code;
  auto check = [](float q) {
    ASSERT_EQ(e2m1_code(q), uint32_t(fmt::e2m1_from_float(q))) << "q = " << q << " (" << std::hexfloat << q << ")";
  };
  const float points[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  for (float p : points)
    for (int d = -65536; d <= 65536; ++d) {
      const int64_t b = int64_t(float_bits(p)) + d;
      if (b < 0) continue;
      check(bits_float(uint32_t(b)));
      check(-bits_float(uint32_t(b)));
    }
  for (uint64_t b = 0; b < 0x7F800000u; b += 4099) {
    check(bits_float(uint32_t(b)));
    check(-bits_float(uint32_t(b)));
  }
  for (float q : {INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, FLT_MIN, -0.0f, bits_float(1), 1e30f})
    check(q);
}

// div_by_recip(y, d, RN(1/d)) must be the IEEE quotient wherever div_by_recip_ok says it may be
// used: every divisor significand (2^23), each with dividends next to quotient rounding
// midpoints (the hard cases), then random exponents over the whole allowed range.
TEST(NormMath, DivisionByTheBlockReciprocalIsExact) {
  using detail::norm_math::div_by_recip;
  using detail::norm_math::div_by_recip_ok;
  ref::Rng rng(0xD1F);
  int64_t checked = 0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    const float d = bits_float(0x3F800000u | m);
    const float r = 1.0f / d;
    for (int k = 0; k < 2; ++k) {
      // A quotient in [2^-3, 8): the codes depend on it; y next to midpoint * d.
      const uint32_t qb = 0x3E000000u + uint32_t(rng.next() % (0x41000000u - 0x3E000000u));
      const double mid = (double(bits_float(qb)) + double(bits_float(qb + 1))) / 2;
      const float y = bits_float(float_bits(float(mid * double(d))) + uint32_t(rng.below(5)) - 2u);
      ASSERT_TRUE(div_by_recip_ok(d, r, std::fabs(y)));
      ASSERT_EQ(float_bits(div_by_recip(y, d, r)), float_bits(y / d)) << std::hexfloat << "y = " << y << " d = " << d;
      ASSERT_EQ(float_bits(div_by_recip(-y, d, r)), float_bits(-y / d));
      ++checked;
    }
  }
  for (int i = 0; i < 4000000; ++i) {
    const float d = bits_float(0x3F800000u | uint32_t(rng.next() & 0x7FFFFF)) * std::ldexp(1.0f, rng.below(129) - 64);
    const float r = 1.0f / d;
    const float y = d * bits_float(0x30000000u + uint32_t(rng.next() % (0x41800000u - 0x30000000u)));
    if (!div_by_recip_ok(d, r, std::fabs(y))) continue;
    ASSERT_EQ(float_bits(div_by_recip(y, d, r)), float_bits(y / d)) << std::hexfloat << "y = " << y << " d = " << d;
    ++checked;
  }
  EXPECT_GT(checked, 20000000);
  // Signed zeros and quotients that underflow keep y's sign and code, as IEEE division does (the H100 run
  // caught -0 coming back as +0: code 0 where fmt::quantize_nvfp4 writes 8).
  for (const float d : {1.0f, 0.3f, 448.0f * 0x1p-20f, 0x1p-64f, 0x1p63f})
    for (const float y : {0.0f, -0.0f, 0x1p-149f, -0x1p-149f, -1e-30f, 1e-30f}) {
      const float r = 1.0f / d;
      // Codes, not bits: a subnormal quotient may differ in its last bits (code 0 either way).
      ASSERT_EQ(detail::norm_math::e2m1_code(div_by_recip(y, d, r)), detail::norm_math::e2m1_code(y / d))
          << std::hexfloat << "y = " << y << " d = " << d;
      ASSERT_EQ(std::signbit(div_by_recip(y, d, r)), std::signbit(y / d)) << std::hexfloat << "y = " << y;
    }
  // Outside the range the kernel divides instead.
  EXPECT_FALSE(div_by_recip_ok(0x1p-70f, 0x1p70f, 1e-21f));
  EXPECT_FALSE(div_by_recip_ok(0x1p70f, 0x1p-70f, 1e21f));
  EXPECT_FALSE(div_by_recip_ok(1.0f, 1.0f, 17.0f));
}

// ---- the config choice -----------------------------------------------------------------------

namespace {
detail::NormChoice choose(int64_t T, int64_t H, bool vec_ok = true, const char* forced = nullptr) {
  detail::NormProblem p;
  p.T = T;
  p.H = H;
  p.num_sms = 132;
  p.vec_ok = vec_ok;
  p.vec_why_not = vec_ok ? "" : "the rows of x are not 16-byte aligned";
  return detail::select_norm_config(p, forced);
}
const char* name_of(const detail::NormChoice& c) { return detail::norm_config_info(c.id).name; }
}  // namespace

TEST(NormConfig, ChoiceByRowsAndWidth) {
  // H = 7168: 896 chunks. c8: 4 warps a row, fills 16 warps per SM from 528 rows; c4: 7 warps,
  // from 302; c2: 14 warps, from 151; below that the widest CTA (c2, 448 threads).
  EXPECT_STREQ(name_of(choose(4096, 7168)), "norm_c8");
  EXPECT_EQ(choose(4096, 7168).threads, 128);
  EXPECT_STREQ(name_of(choose(400, 7168)), "norm_c4");
  EXPECT_EQ(choose(400, 7168).threads, 224);
  EXPECT_STREQ(name_of(choose(200, 7168)), "norm_c2");
  EXPECT_EQ(choose(200, 7168).threads, 448);
  EXPECT_STREQ(name_of(choose(1, 7168)), "norm_c2");
  // Small rows: one warp whatever the config; ties go to the fewest registers.
  EXPECT_STREQ(name_of(choose(8, 16)), "norm_c2");
  EXPECT_EQ(choose(8, 16).threads, 32);
  // The largest rows in registers: 16384 values (c8 at 256 threads); beyond, the generic kernel.
  EXPECT_STREQ(name_of(choose(1, 16384)), "norm_c2");
  EXPECT_EQ(choose(100000, 16384).threads, 256);
  EXPECT_STREQ(name_of(choose(4096, 16384 + 16)), "norm_generic");
  EXPECT_STREQ(name_of(choose(4096, 7168, false)), "norm_generic");
  EXPECT_NE(choose(4096, 7168, false).reason.find("16-byte"), std::string::npos);
  for (int64_t T : {1, 7, 128, 1000, 100000})
    for (int64_t H : {8, 16, 48, 2048, 4112, 7168, 16384}) {
      const detail::NormChoice c = choose(T, H);
      const detail::NormConfigInfo info = detail::norm_config_info(c.id);
      ASSERT_FALSE(info.generic) << T << " " << H;
      EXPECT_GE(int64_t(c.threads) * 8 * info.chunks, H) << "the row fits the registers";
      EXPECT_EQ(c.threads % 32, 0);
      EXPECT_LE(c.threads, info.max_threads);
    }
}

TEST(NormConfig, ForcedConfigs) {
  EXPECT_STREQ(name_of(choose(4096, 7168, true, "norm_c2")), "norm_c2");
  EXPECT_EQ(choose(4096, 7168, true, "norm_c2").threads, 448);
  EXPECT_STREQ(name_of(choose(4096, 7168, true, "norm_generic")), "norm_generic");
  EXPECT_STREQ(name_of(choose(4096, 7168, true, "gemv_generic")), "norm_c8") << "another op's name: ignored";
  test::expect_error([] { choose(4096, 7168, false, "norm_c8"); }, "needs 16-byte rows");
  test::expect_error([] { choose(4096, 16384 + 16, true, "norm_c8"); }, "holds at most 16384 values per row");
}
