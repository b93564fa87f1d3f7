// Number formats and quantizers against hand-computed values and brute-force nearest search.
#include <cmath>
#include <cstring>
#include <vector>

#include "fusedmoe/formats.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using namespace fusedmoe::fmt;

namespace {

// Brute force: nearest finite E4M3 value, ties to the even code, saturating beyond 448.
uint8_t e4m3_brute(float x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFF : 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0;
  const double a = std::fabs(double(x));
  if (a >= 448.0) return sign | 0x7E;
  int best = 0;
  double best_err = INFINITY;
  for (int c = 0; c <= 0x7E; ++c) {
    const double err = std::fabs(double(e4m3_to_float(uint8_t(c))) - a);
    if (err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return sign | uint8_t(best);
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST(E4M3, HandValues) {
  EXPECT_EQ(e4m3_from_float(0.0f), 0x00);
  EXPECT_EQ(e4m3_from_float(-0.0f), 0x80);
  EXPECT_EQ(e4m3_from_float(1.0f), 0x38);          // exponent 7 (bias 7), mantissa 0
  EXPECT_EQ(e4m3_from_float(448.0f), 0x7E);        // largest finite
  EXPECT_EQ(e4m3_from_float(-448.0f), 0xFE);
  EXPECT_EQ(e4m3_from_float(464.0f), 0x7E);        // halfway to the (NaN) next code: saturates
  EXPECT_EQ(e4m3_from_float(1e6f), 0x7E);          // satfinite
  EXPECT_EQ(e4m3_from_float(INFINITY), 0x7E);      // satfinite: Inf saturates too
  EXPECT_EQ(e4m3_from_float(-INFINITY), 0xFE);
  EXPECT_EQ(e4m3_from_float(NAN) & 0x7F, 0x7F);    // NaN
  EXPECT_EQ(e4m3_from_float(0x1p-9f), 0x01);       // smallest subnormal
  EXPECT_EQ(e4m3_from_float(0x1p-6f), 0x08);       // smallest normal
  EXPECT_EQ(e4m3_from_float(7 * 0x1p-9f), 0x07);   // largest subnormal
  // Ties go to the even code.
  EXPECT_EQ(e4m3_from_float(0x1p-10f), 0x00);              // half of 2^-9: 0 (even)
  EXPECT_EQ(e4m3_from_float(3 * 0x1p-10f), 0x02);          // 1.5 quanta: 2 (even)
  EXPECT_EQ(e4m3_from_float(1.0f + 1.0f / 16), 0x38);      // between 1 and 1.125: 1
  EXPECT_EQ(e4m3_from_float(1.0f + 3.0f / 16), 0x3A);      // between 1.125 and 1.25: 1.25
  EXPECT_EQ(e4m3_from_float(0.12109375f), 0x20);   // 1.9375 * 2^-4: tie, carries to 2^-3 (even)
  EXPECT_EQ(e4m3_from_float(0x1p-6f * 15 / 16), 0x08);     // 7.5 quanta: 8 (even): rounds up to normal
  EXPECT_EQ(e4m3_from_float(240.0f + 8.0f), 0x78);         // between 240 (0x77) and 256: 256
  EXPECT_EQ(e4m3_from_float(432.0f), 0x7E);                // between 416 and 448: 448 (even)
  // Decoding.
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), 0x1p-9f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xFF)));
}

TEST(E4M3, EveryCodeRoundTrips) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7F) == 0x7F) continue;
    EXPECT_EQ(e4m3_from_float(e4m3_to_float(uint8_t(c))), c) << "code " << c;
  }
}

TEST(E4M3, MatchesBruteForceNearest) {
  for (uint64_t seed : test::seeds_for(0xE4)) {
    ref::Rng rng(seed);
    for (int i = 0; i < 200000; ++i) {
      // Log-uniform magnitudes over [2^-13, 2^10] hit subnormals, normals and saturation.
      const float mag = std::ldexp(1.0f + rng.uniform(), -13 + rng.below(24));
      const float x = (rng.next() & 1) ? -mag : mag;
      ASSERT_EQ(e4m3_from_float(x), e4m3_brute(x)) << "x=" << x << " seed " << seed;
    }
  }
}

TEST(E2M1, AllSixteenCodes) {
  const float expect[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_float(uint8_t(c)), expect[c]) << "code " << c;
    EXPECT_EQ(e2m1_from_float(expect[c]), c) << "code " << c;
  }
}

TEST(E2M1, RoundingAndSaturation) {
  // Midpoints: ties to the even code.
  EXPECT_EQ(e2m1_from_float(0.25f), 0);
  EXPECT_EQ(e2m1_from_float(0.75f), 2);
  EXPECT_EQ(e2m1_from_float(1.25f), 2);
  EXPECT_EQ(e2m1_from_float(1.75f), 4);
  EXPECT_EQ(e2m1_from_float(2.5f), 4);
  EXPECT_EQ(e2m1_from_float(3.5f), 6);
  EXPECT_EQ(e2m1_from_float(5.0f), 6);
  EXPECT_EQ(e2m1_from_float(-5.0f), 0xE);
  // Off the midpoints: nearest.
  EXPECT_EQ(e2m1_from_float(0.26f), 1);
  EXPECT_EQ(e2m1_from_float(5.01f), 7);
  EXPECT_EQ(e2m1_from_float(2.51f), 5);
  // Saturation.
  EXPECT_EQ(e2m1_from_float(100.0f), 7);
  EXPECT_EQ(e2m1_from_float(-INFINITY), 0xF);
}

TEST(UE8M0, CeilToPowerOfTwo) {
  EXPECT_EQ(ue8m0_from_float_ceil(1.0f), 127);
  EXPECT_EQ(ue8m0_from_float_ceil(1.5f), 128);
  EXPECT_EQ(ue8m0_from_float_ceil(2.0f), 128);
  EXPECT_EQ(ue8m0_from_float_ceil(0.75f), 127);
  EXPECT_EQ(ue8m0_from_float_ceil(0.5f), 126);
  EXPECT_EQ(ue8m0_from_float_ceil(0x1p-127f), 0);
  EXPECT_EQ(ue8m0_from_float_ceil(NAN), 0xFF);
  EXPECT_EQ(ue8m0_to_float(127), 1.0f);
  EXPECT_EQ(ue8m0_to_float(0), 0x1p-127f);
  EXPECT_TRUE(std::isnan(ue8m0_to_float(0xFF)));
}

TEST(BF16, RoundNearestEven) {
  EXPECT_EQ(bf16_from_float(1.0f), 0x3F80);
  EXPECT_EQ(bf16_from_float(1.0f + 0x1p-8f), 0x3F80);             // tie: even (down)
  EXPECT_EQ(bf16_from_float(1.0f + 3 * 0x1p-8f), 0x3F82);         // tie: even (up)
  EXPECT_EQ(bf16_from_float(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);  // above the tie
  EXPECT_EQ(bf16_from_float(bits_float(0x7F7FFFFF)), 0x7F80);     // overflow to Inf
  EXPECT_EQ(bf16_from_float(-INFINITY), 0xFF80);
  EXPECT_TRUE(std::isnan(bf16_to_float(bf16_from_float(NAN))));
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);
}

TEST(F16, RoundNearestEven) {
  EXPECT_EQ(f16_from_float(1.0f), 0x3C00);
  EXPECT_EQ(f16_from_float(65504.0f), 0x7BFF);
  EXPECT_EQ(f16_from_float(65519.0f), 0x7BFF);
  EXPECT_EQ(f16_from_float(65520.0f), 0x7C00);          // tie with 2^16: even = Inf
  EXPECT_EQ(f16_from_float(0x1p-24f), 0x0001);          // smallest subnormal
  EXPECT_EQ(f16_from_float(0x1p-25f), 0x0000);          // tie: even (zero)
  EXPECT_EQ(f16_from_float(1.0f + 0x1p-11f), 0x3C00);   // tie: even
  EXPECT_EQ(f16_from_float(1.0f + 3 * 0x1p-11f), 0x3C02);
  for (int b = 0; b < 0x7C00; ++b)
    ASSERT_EQ(f16_from_float(f16_to_float(uint16_t(b))), b) << "bits " << b;
}

TEST(QuantFp8PerToken, ScalesCodesAndPartialBlock) {
  for (uint64_t seed : test::seeds_for(0xA1)) {
    const int rows = 5, cols = 200;  // second block is partial (72 columns)
    std::vector<float> x = ref::random_bf16(rows * cols, seed, 1, 3.0f);
    x[0] = 0;  // make sure zeros are handled inside a block
    std::vector<uint8_t> q(rows * cols);
    std::vector<float> s(rows * 2);
    quantize_fp8_per_token_128(x.data(), rows, cols, q.data(), s.data());
    for (int r = 0; r < rows; ++r)
      for (int b = 0; b < 2; ++b) {
        float amax = 0;
        for (int c = b * 128; c < std::min(cols, b * 128 + 128); ++c)
          amax = std::max(amax, std::fabs(x[r * cols + c]));
        ASSERT_EQ(s[r * 2 + b], amax / 448.0f) << "row " << r << " block " << b;
        for (int c = b * 128; c < std::min(cols, b * 128 + 128); ++c) {
          const uint8_t want = e4m3_from_float(x[r * cols + c] * (448.0f / amax));
          ASSERT_EQ(q[r * cols + c], want);
          if (std::fabs(x[r * cols + c]) == amax) {
            ASSERT_EQ(q[r * cols + c] & 0x7F, 0x7E);
          }
        }
      }
  }
}

TEST(QuantFp8PerToken, ZeroBlockAndPoison) {
  std::vector<float> x(256, 0.0f);
  x[130] = NAN;
  std::vector<uint8_t> q(256);
  std::vector<float> s(2);
  quantize_fp8_per_token_128(x.data(), 1, 256, q.data(), s.data());
  EXPECT_EQ(s[0], 0.0f);
  for (int c = 0; c < 128; ++c) EXPECT_EQ(q[c], 0);
  EXPECT_TRUE(std::isnan(s[1]));  // a NaN poisons its block's scale
  std::vector<float> back(256);
  dequantize_fp8_per_token_128(q.data(), s.data(), 1, 256, back.data());
  for (int c = 128; c < 256; ++c) EXPECT_TRUE(std::isnan(back[c])) << c;
}

TEST(QuantFp8Block, BlockScalesAndEdges) {
  for (uint64_t seed : test::seeds_for(0xB1)) {
    const int rows = 130, cols = 144;  // partial blocks in both directions
    std::vector<float> w = ref::random_bf16(rows * cols, seed, 2, 0.5f);
    std::vector<uint8_t> q(rows * cols);
    std::vector<float> s(2 * 2);
    quantize_fp8_block_128x128(w.data(), rows, cols, q.data(), s.data());
    for (int br = 0; br < 2; ++br)
      for (int bc = 0; bc < 2; ++bc) {
        float amax = 0;
        for (int r = br * 128; r < std::min(rows, br * 128 + 128); ++r)
          for (int c = bc * 128; c < std::min(cols, bc * 128 + 128); ++c)
            amax = std::max(amax, std::fabs(w[r * cols + c]));
        ASSERT_EQ(s[br * 2 + bc], amax / 448.0f);
      }
    std::vector<float> back(rows * cols);
    dequantize_fp8_block_128x128(q.data(), s.data(), rows, cols, back.data());
    for (int i = 0; i < rows * cols; ++i) {
      const float scale = s[(i / cols / 128) * 2 + (i % cols) / 128];
      // Relative error of E4M3 RNE is at most 2^-4; plus subnormal absolute error.
      ASSERT_LE(std::fabs(back[i] - w[i]), std::fabs(w[i]) * 0.0625f + scale * 0x1p-10f) << i;
    }
  }
}

TEST(NVFP4, RoundTripOfRepresentableValues) {
  for (uint64_t seed : test::seeds_for(0xF4)) {
    ref::Rng rng(seed);
    const int rows = 3, cols = 64;
    const float global = 0.0125f;
    std::vector<uint8_t> scales(rows * cols / 16);
    std::vector<float> x(rows * cols);
    for (int r = 0; r < rows; ++r)
      for (int b = 0; b < cols / 16; ++b) {
        // A block whose max is 6 * s makes the quantizer pick exactly s (an E4M3 value).
        const uint8_t s_code = uint8_t(0x30 + rng.below(16));
        scales[r * 4 + b] = s_code;
        // Formed in the dequantizer's order, (e2m1 * e4m3) * global, so equality is exact.
        const float m = e4m3_to_float(s_code);
        for (int c = 0; c < 16; ++c)
          x[r * cols + b * 16 + c] = (e2m1_to_float(uint8_t(rng.below(16))) * m) * global;
        x[r * cols + b * 16 + rng.below(16)] = (6.0f * m) * global;
      }
    std::vector<uint8_t> packed(rows * cols / 2), got_scales(rows * cols / 16);
    quantize_nvfp4(x.data(), rows, cols, global, packed.data(), got_scales.data());
    std::vector<float> back(rows * cols);
    dequantize_nvfp4(packed.data(), got_scales.data(), global, rows, cols, back.data());
    for (int i = 0; i < rows * cols; ++i) ASSERT_EQ(back[i], x[i]) << i << " seed " << seed;
    EXPECT_EQ(got_scales, scales);
  }
}

TEST(MXFP4, RoundTripScalesAndPoison) {
  for (uint64_t seed : test::seeds_for(0x3F4)) {
    ref::Rng rng(seed);
    const int rows = 3, cols = 96;
    std::vector<uint8_t> scales(rows * cols / 32);
    std::vector<float> x(rows * cols);
    for (int r = 0; r < rows; ++r)
      for (int b = 0; b < cols / 32; ++b) {
        // A block whose largest magnitude is 6 * 2^e gets the scale 2^e exactly (rounded up).
        const uint8_t s_code = uint8_t(100 + rng.below(50));
        scales[r * 3 + b] = s_code;
        const float s = ue8m0_to_float(s_code);
        for (int c = 0; c < 32; ++c) x[r * cols + b * 32 + c] = e2m1_to_float(uint8_t(rng.below(16))) * s;
        x[r * cols + b * 32 + rng.below(32)] = -6.0f * s;
      }
    std::vector<uint8_t> packed(rows * cols / 2), got(rows * cols / 32);
    quantize_mxfp4(x.data(), rows, cols, packed.data(), got.data());
    EXPECT_EQ(got, scales) << "seed " << seed;
    std::vector<float> back(rows * cols);
    dequantize_mxfp4(packed.data(), got.data(), rows, cols, back.data());
    for (int i = 0; i < rows * cols; ++i) ASSERT_EQ(back[i], x[i]) << i << " seed " << seed;
  }
  // Rounded up: amax 6.5 needs the scale 2 (6.5 / 6 > 1), so nothing clips; then 6.5 / 2 = 3.25
  // rounds to 3 (RNE between 3 and 4). An all-zero block: code 0, zero values. Inf: NaN scale.
  std::vector<float> x(96, 0.0f);
  x[0] = 6.5f;
  x[1] = 1.0f;
  x[64] = INFINITY;
  std::vector<uint8_t> packed(48), s(3);
  quantize_mxfp4(x.data(), 1, 96, packed.data(), s.data());
  EXPECT_EQ(s[0], 128);
  EXPECT_EQ(packed[0], 0x15);  // low nibble 3 (code 5), high nibble 1.0 / 2 = 0.5 (code 1)
  EXPECT_EQ(s[1], 0);
  EXPECT_EQ(s[2], 0xFF);
  std::vector<float> back(96);
  dequantize_mxfp4(packed.data(), s.data(), 1, 96, back.data());
  EXPECT_EQ(back[0], 6.0f);
  EXPECT_EQ(back[40], 0.0f);
  EXPECT_TRUE(std::isnan(back[70]));
  test::expect_error([&] { quantize_mxfp4(x.data(), 1, 48, packed.data(), s.data()); },
                     "multiple of 32");
}

TEST(NVFP4, PackingOrderAndGlobalScale) {
  // Even element in the low nibble (ModelOpt / torch float4_e2m1fn_x2 convention).
  std::vector<float> x(16, 0.0f);
  x[0] = 6.0f;   // code 7
  x[1] = -1.0f;  // code 0xA
  x[2] = 0.5f;   // code 1
  const float g = nvfp4_global_scale(6.0f);
  EXPECT_EQ(g, 6.0f / (6.0f * 448.0f));
  std::vector<uint8_t> packed(8), s(1);
  quantize_nvfp4(x.data(), 1, 16, g, packed.data(), s.data());
  EXPECT_EQ(s[0], 0x7E);  // the tensor's amax block gets the largest E4M3 scale
  EXPECT_EQ(packed[0], 0xA7);
  EXPECT_EQ(packed[1], 0x01);
  test::expect_error([&] { quantize_nvfp4(x.data(), 1, 15, g, packed.data(), s.data()); },
                     "multiple of 16");
}
