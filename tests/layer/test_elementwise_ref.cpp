// Element-wise references against hand-computed values.
#include <cmath>

#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;

TEST(ActivationRef, SwigluAndClamped) {
  ActivationConfig plain;
  const float gu[4] = {1.0f, -2.0f, 3.0f, 0.5f};  // gate [1, -2], up [3, 0.5]
  float out[2];
  ref::activation(plain, gu, 1, 2, out);
  EXPECT_NEAR(out[0], 1.0 / (1 + std::exp(-1.0)) * 3.0, 1e-6);
  EXPECT_NEAR(out[1], -2.0 / (1 + std::exp(2.0)) * 0.5, 1e-6);

  ActivationConfig oss;
  oss.fn = ActivationFn::swiglu_clamped;
  // Interleaved: (gate 9 -> clamped to 7, up -8 -> -7), (gate -1, up 2).
  const float gu2[4] = {9.0f, -8.0f, -1.0f, 2.0f};
  ref::activation(oss, gu2, 1, 2, out);
  EXPECT_NEAR(out[0], (-7.0 + 1) * 7.0 / (1 + std::exp(-1.702 * 7.0)), 1e-5);
  EXPECT_NEAR(out[1], (2.0 + 1) * -1.0 / (1 + std::exp(1.702)), 1e-6);
}

TEST(CombineRef, WeightedSumInRouteOrderAndSlots) {
  // T=2, k=2, H=2; rows stored in expert-sorted order given by route_slot.
  const double rows[8] = {1, 2, 10, 20, 100, 200, 1000, 2000};
  const int32_t slot[4] = {2, 0, 3, 1};  // route 0 -> row 2, route 1 -> row 0, ...
  const float w[4] = {0.5f, 0.25f, 1.0f, 2.0f};
  double y[4];
  ref::combine(rows, slot, w, 2, 2, 2, y);
  EXPECT_DOUBLE_EQ(y[0], 0.5 * 100 + 0.25 * 1);
  EXPECT_DOUBLE_EQ(y[1], 0.5 * 200 + 0.25 * 2);
  EXPECT_DOUBLE_EQ(y[2], 1.0 * 1000 + 2.0 * 10);
  EXPECT_DOUBLE_EQ(y[3], 1.0 * 2000 + 2.0 * 20);
  ref::combine(rows, nullptr, nullptr, 2, 2, 2, y);
  EXPECT_DOUBLE_EQ(y[0], 1 + 10);
}

TEST(RmsNormRef, HandValue) {
  const float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5f};
  float y[4];
  ref::rmsnorm(x, w, 1, 4, 1e-6f, y);
  const double inv = 1 / std::sqrt((1 + 4 + 9 + 16) / 4.0 + 1e-6);
  EXPECT_NEAR(y[0], 1 * inv, 1e-6);
  EXPECT_NEAR(y[2], 3 * inv * 2, 1e-6);
  EXPECT_NEAR(y[3], 4 * inv * 0.5, 1e-6);
}

TEST(RopeRef, PairingsAndInverse) {
  // One token at position 1, one head of dim 4, rotary_dim 4, theta 100: angles 1 and 0.1.
  const int32_t pos[1] = {1};
  float g[4] = {1, 0, 1, 0};  // GPT-J pairs (0,1) and (2,3)
  ref::rope(g, pos, 1, 1, 4, 4, 100.0f, ref::RopeStyle::gptj_interleaved, false);
  EXPECT_NEAR(g[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(g[1], std::sin(1.0), 1e-6);
  EXPECT_NEAR(g[2], std::cos(0.1), 1e-6);
  EXPECT_NEAR(g[3], std::sin(0.1), 1e-6);
  float n[4] = {1, 1, 0, 0};  // NeoX pairs (0,2) and (1,3)
  ref::rope(n, pos, 1, 1, 4, 4, 100.0f, ref::RopeStyle::neox, false);
  EXPECT_NEAR(n[0], std::cos(1.0), 1e-6);
  EXPECT_NEAR(n[2], std::sin(1.0), 1e-6);
  EXPECT_NEAR(n[1], std::cos(0.1), 1e-6);
  EXPECT_NEAR(n[3], std::sin(0.1), 1e-6);

  for (uint64_t seed : test::seeds_for(0x20)) {
    const int T = 9, heads = 3, hd = 64, rd = 32;
    std::vector<float> x = ref::random_bf16(T * heads * hd, seed, 1, 2.0f), orig = x;
    std::vector<int32_t> p(T);
    for (int t = 0; t < T; ++t) p[size_t(t)] = t * 997;
    for (auto style : {ref::RopeStyle::gptj_interleaved, ref::RopeStyle::neox}) {
      ref::rope(x.data(), p.data(), T, heads, hd, rd, 10000.0f, style, false);
      ref::rope(x.data(), p.data(), T, heads, hd, rd, 10000.0f, style, true);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_NEAR(x[i], orig[i], 1e-5) << i;
        if (int(i % hd) >= rd) {
          ASSERT_EQ(x[i], orig[i]) << "beyond rotary_dim must be untouched";
        }
      }
    }
  }
  float y[4];
  test::expect_error([&] { ref::rope(y, pos, 1, 1, 4, 3, 1e4f, ref::RopeStyle::neox, false); },
                     "rotary_dim=3");
}
