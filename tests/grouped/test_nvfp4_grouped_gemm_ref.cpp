// The NVFP4 grouped GEMM reference (ref::nvfp4_grouped_gemm) without a GPU: hand-checked cases
// (nibble order, per-block scales, global scales, groups and empty groups, uncovered rows, NaN
// scales) and random cases against a naive float64 matmul over fmt::dequantize_nvfp4.
#include <cmath>
#include <string>
#include <vector>

#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;

namespace {

// E2M1 codes (low 3 bits magnitude, bit 3 sign) and E4M3 scale codes used by the hand cases;
// HandCodes checks their values against the library's codecs, so the arithmetic below is real.
constexpr uint8_t kE2m1Half = 0x1, kE2m1One = 0x2, kE2m1Two = 0x4, kE2m1Three = 0x5,
                  kE2m1MinusOne = 0xA;
constexpr uint8_t kE4m3Half = 0x30, kE4m3One = 0x38, kE4m3Two = 0x40, kE4m3Three = 0x44,
                  kE4m3Nan = 0x7F;

uint8_t pack(uint8_t even, uint8_t odd) { return uint8_t(even | (odd << 4)); }

// One NVFP4 operand with rows of K values, every value the same code and every block the same
// scale unless a case overwrites them.
struct Operand {
  int rows, K;
  std::vector<uint8_t> q, scale;
  Operand(int rows_, int K_, uint8_t even, uint8_t odd, uint8_t scale_code)
      : rows(rows_), K(K_), q(size_t(rows_) * K_ / 2, pack(even, odd)),
        scale(size_t(rows_) * K_ / 16, scale_code) {}
};

}  // namespace

TEST(Nvfp4GroupedGemmRef, HandCodes) {
  EXPECT_EQ(fmt::e2m1_to_float(kE2m1Half), 0.5f);
  EXPECT_EQ(fmt::e2m1_to_float(kE2m1One), 1.0f);
  EXPECT_EQ(fmt::e2m1_to_float(kE2m1Two), 2.0f);
  EXPECT_EQ(fmt::e2m1_to_float(kE2m1Three), 3.0f);
  EXPECT_EQ(fmt::e2m1_to_float(kE2m1MinusOne), -1.0f);
  EXPECT_EQ(fmt::e4m3_to_float(kE4m3Half), 0.5f);
  EXPECT_EQ(fmt::e4m3_to_float(kE4m3One), 1.0f);
  EXPECT_EQ(fmt::e4m3_to_float(kE4m3Two), 2.0f);
  EXPECT_EQ(fmt::e4m3_to_float(kE4m3Three), 3.0f);
  EXPECT_TRUE(std::isnan(fmt::e4m3_to_float(kE4m3Nan)));
}

// One group, a 1x1 output, K = 32 (two scale blocks):
//   block 0: a = (1, 3, 1, 3, ...) * 1, b = (2, 0, 2, 0, ...) * 2  -> 8 * 1 * 4    = 32
//   block 1: a = 0.5 * 1,               b = -1 * 0.5              -> 16 * 0.5 * -0.5 = -4
// so c = 28. Reading A's nibbles the other way round (and B's right) gives 8 * 3 * 4 - 4 = 92;
// swapping both operands' nibbles permutes k in both and leaves every sum as it is, so the
// values here are what a kernel test should feed to catch an operand decoded out of order.
TEST(Nvfp4GroupedGemmRef, SingleOutputKnownCodes) {
  Operand a(1, 32, kE2m1One, kE2m1Three, kE4m3One), b(1, 32, kE2m1Two, 0x0, kE4m3Two);
  for (int j = 8; j < 16; ++j) {
    a.q[size_t(j)] = pack(kE2m1Half, kE2m1Half);
    b.q[size_t(j)] = pack(kE2m1MinusOne, kE2m1MinusOne);
  }
  b.scale[1] = kE4m3Half;
  const std::vector<int32_t> offsets = {0, 1};
  const float one = 1.0f;
  const std::vector<float> c = ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr, offsets.data(),
                                                       1, 1, b.q.data(), b.scale.data(), &one, 1, 32);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0], 28.0f);
}

TEST(Nvfp4GroupedGemmRef, GlobalScalesMultiply) {
  const Operand a(2, 16, kE2m1One, kE2m1One, kE4m3One), b(3, 16, kE2m1Two, kE2m1Two, kE4m3One);
  const std::vector<int32_t> offsets = {0, 2};
  const float a_global = 0.25f, b_global = 3.0f;
  // sum = 16 * 1 * 2 = 32 for every output.
  const std::vector<float> both = ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), &a_global,
                                                          offsets.data(), 1, 2, b.q.data(),
                                                          b.scale.data(), &b_global, 3, 16);
  const std::vector<float> b_only = ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr,
                                                            offsets.data(), 1, 2, b.q.data(),
                                                            b.scale.data(), &b_global, 3, 16);
  ASSERT_EQ(both.size(), 6u);
  for (size_t i = 0; i < both.size(); ++i) {
    EXPECT_EQ(both[i], 32.0f * 0.25f * 3.0f) << i;
    EXPECT_EQ(b_only[i], 32.0f * 3.0f) << i;
  }
}

// Three groups, the middle one empty: row 0 is group 0, rows 1..2 group 2. Each group's B has its
// own value (g + 1, as the block scale) and global scale, so every output tells which group's B
// it used; the empty group's B has NaN scales and a large global, so touching it would show.
TEST(Nvfp4GroupedGemmRef, EmptyGroupAndRowsOfALaterGroup) {
  const int G = 3, M = 3, N = 5, K = 16;
  const Operand a(M, K, kE2m1One, kE2m1One, kE4m3One);
  Operand b(G * N, K, kE2m1One, kE2m1One, kE4m3One);
  const uint8_t group_scale[G] = {kE4m3One, kE4m3Nan, kE4m3Three};
  for (int g = 0; g < G; ++g)
    for (int i = 0; i < N * K / 16; ++i) b.scale[size_t(g) * N * K / 16 + i] = group_scale[g];
  const std::vector<float> b_global = {1.0f, 100.0f, 0.5f};
  const std::vector<int32_t> offsets = {0, 1, 1, 3};
  const std::vector<float> c = ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr, offsets.data(),
                                                       G, M, b.q.data(), b.scale.data(), b_global.data(), N, K);
  ASSERT_EQ(c.size(), size_t(M * N));
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(c[size_t(n)], 16.0f) << "row 0 (group 0), n " << n;
    EXPECT_EQ(c[size_t(N + n)], 16.0f * 3.0f * 0.5f) << "row 1 (group 2), n " << n;
    EXPECT_EQ(c[size_t(2 * N + n)], 16.0f * 3.0f * 0.5f) << "row 2 (group 2), n " << n;
  }
}

// Rows before offsets[0] and after offsets[G] belong to no group: zeros, whatever A holds there.
TEST(Nvfp4GroupedGemmRef, UncoveredRowsAreZero) {
  Operand a(4, 16, kE2m1One, kE2m1One, kE4m3One);
  a.scale[0] = kE4m3Nan;  // row 0 and row 3 are not covered: their NaN never reaches c
  a.scale[3] = kE4m3Nan;
  const Operand b(2, 16, kE2m1One, kE2m1One, kE4m3One);
  const std::vector<int32_t> offsets = {1, 3};
  const float one = 1.0f;
  const std::vector<float> c = ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr, offsets.data(),
                                                       1, 4, b.q.data(), b.scale.data(), &one, 2, 16);
  const std::vector<float> want = {0, 0, 16, 16, 16, 16, 0, 0};
  EXPECT_EQ(c, want);
}

// A NaN scale (E4M3 0x7F) poisons every output its block reaches, even where the block's codes
// are 0 (NaN * 0 is NaN); nothing else.
TEST(Nvfp4GroupedGemmRef, NanScalePropagates) {
  const int M = 3, N = 4, K = 32;
  Operand a(M, K, 0x0, 0x0, kE4m3One);  // all-zero codes
  a.scale[size_t(1 * K / 16 + 1)] = kE4m3Nan;  // row 1, block 1
  Operand b(N, K, kE2m1One, kE2m1One, kE4m3One);
  b.scale[size_t(2 * K / 16)] = kE4m3Nan;      // row n = 2, block 0
  const std::vector<int32_t> offsets = {0, M};
  const float one = 1.0f;
  const std::vector<float> c = ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr, offsets.data(),
                                                       1, M, b.q.data(), b.scale.data(), &one, N, K);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      const float v = c[size_t(m) * N + n];
      if (m == 1 || n == 2) EXPECT_TRUE(std::isnan(v)) << "m " << m << " n " << n << ": " << v;
      else EXPECT_EQ(v, 0.0f) << "m " << m << " n " << n;
    }
}

TEST(Nvfp4GroupedGemmRef, RejectsBadShapesAndOffsets) {
  const Operand a(2, 32, kE2m1One, kE2m1One, kE4m3One), b(1, 32, kE2m1One, kE2m1One, kE4m3One);
  const float one = 1.0f;
  const std::vector<int32_t> good = {0, 2}, past_m = {0, 3}, decreasing = {0, 2, 1};
  test::expect_error([&] {
    ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr, good.data(), 1, 2, b.q.data(),
                            b.scale.data(), &one, 1, 24);
  }, "K a multiple of 16");
  test::expect_error([&] {
    ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr, past_m.data(), 1, 2, b.q.data(),
                            b.scale.data(), &one, 1, 32);
  }, "offsets[1]=3");
  const std::vector<float> globals = {1.0f, 1.0f};
  test::expect_error([&] {
    ref::nvfp4_grouped_gemm(a.q.data(), a.scale.data(), nullptr, decreasing.data(), 2, 2, b.q.data(),
                            b.scale.data(), globals.data(), 1, 32);
  }, "offsets[2]=1");
}

// Random data quantized as the benchmark does (fmt::quantize_nvfp4, one global scale per group
// and operand from its amax), against the plainest computation: dequantize each group's A and B
// with fmt::dequantize_nvfp4 (global 1: exact in fp32), multiply in float64, apply the globals.
// Shapes cross the reference's 64-row and 64-column work blocks, and include empty and 1-row groups.
TEST(Nvfp4GroupedGemmRef, MatchesNaiveDequantizedMatmul) {
  struct Shape { int N, K; std::vector<int> group_rows; };
  const std::vector<Shape> shapes = {{1, 16, {1}}, {17, 48, {5, 0, 9}}, {70, 160, {1, 65, 0, 2}},
                                     {130, 64, {0, 0, 3}}};
  for (const Shape& s : shapes) {
    const int G = int(s.group_rows.size()), N = s.N, K = s.K;
    std::vector<int32_t> offsets = {0};
    for (int rows : s.group_rows) offsets.push_back(offsets.back() + rows);
    const int M = offsets.back();
    for (uint64_t seed : test::seeds_for(test::hash_ints({G, N, K, M}))) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " G " + std::to_string(G) + " N " +
                   std::to_string(N) + " K " + std::to_string(K) + " M " + std::to_string(M));
      // Values spread over a few binades, so the blocks' scales differ.
      std::vector<float> a_f(size_t(M) * K), b_f(size_t(G) * N * K);
      ref::fill_uniform(a_f.data(), int64_t(a_f.size()), seed, 1, 1.0f);
      ref::fill_uniform(b_f.data(), int64_t(b_f.size()), seed, 2, 1.0f);
      for (size_t i = 0; i < a_f.size(); ++i) a_f[i] *= std::ldexp(1.0f, int(i / 16 % 7) - 3);
      for (size_t i = 0; i < b_f.size(); ++i) b_f[i] *= std::ldexp(1.0f, int(i / 16 % 5) - 2);
      std::vector<uint8_t> a_q(a_f.size() / 2), a_s(a_f.size() / 16), b_q(b_f.size() / 2),
          b_s(b_f.size() / 16);
      std::vector<float> a_global(static_cast<size_t>(G)), b_global(static_cast<size_t>(G));
      for (int g = 0; g < G; ++g) {
        const int64_t r0 = offsets[size_t(g)], rows = offsets[size_t(g) + 1] - r0;
        const float* ag = a_f.data() + r0 * K;
        a_global[size_t(g)] = fmt::nvfp4_global_scale(fmt::abs_max(ag, rows * K));
        fmt::quantize_nvfp4(ag, rows, K, a_global[size_t(g)], a_q.data() + r0 * K / 2,
                            a_s.data() + r0 * K / 16);
        const float* bg = b_f.data() + size_t(g) * N * K;
        b_global[size_t(g)] = fmt::nvfp4_global_scale(fmt::abs_max(bg, int64_t(N) * K));
        fmt::quantize_nvfp4(bg, N, K, b_global[size_t(g)], b_q.data() + size_t(g) * N * K / 2,
                            b_s.data() + size_t(g) * N * K / 16);
      }
      const std::vector<float> c =
          ref::nvfp4_grouped_gemm(a_q.data(), a_s.data(), a_global.data(), offsets.data(), G, M,
                                  b_q.data(), b_s.data(), b_global.data(), N, K);
      ASSERT_EQ(c.size(), size_t(M) * N);

      std::vector<float> a_dq(a_f.size()), b_dq(b_f.size());
      fmt::dequantize_nvfp4(a_q.data(), a_s.data(), 1.0f, M, K, a_dq.data());
      fmt::dequantize_nvfp4(b_q.data(), b_s.data(), 1.0f, int64_t(G) * N, K, b_dq.data());
      int checked = 0;
      for (int g = 0; g < G; ++g)
        for (int m = offsets[size_t(g)]; m < offsets[size_t(g) + 1]; ++m)
          for (int n = 0; n < N; ++n) {
            double sum = 0, abs_sum = 0;
            for (int k = 0; k < K; ++k) {
              const double p = double(a_dq[size_t(m) * K + k]) *
                               double(b_dq[(size_t(g) * N + n) * K + k]);
              sum += p;
              abs_sum += std::fabs(p);
            }
            const double global = double(a_global[size_t(g)]) * double(b_global[size_t(g)]);
            const double want = global * sum;
            // Both sums are exact products added in float64 (different order), then one rounding
            // to fp32: half an fp32 ulp plus the float64 order difference.
            const double bound = 0x1p-24 * std::fabs(want) + 1e-13 * global * abs_sum;
            EXPECT_NEAR(double(c[size_t(m) * N + n]), want, bound) << "group " << g << " m " << m
                                                                   << " n " << n;
            ASSERT_TRUE(std::isfinite(c[size_t(m) * N + n]));
            ++checked;
          }
      EXPECT_EQ(checked, M * N);
    }
  }
}
