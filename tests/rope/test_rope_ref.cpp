// RoPE without a GPU: the CPU reference (ref::rope_from_cache) on hand-computed rotations, both
// styles, inverse after forward, a rope part shorter than the head, bad positions, and against
// the older theta-based ref::rope; in a CUDA build also the config and grid choice
// (select_rope_config, rope_grid), which are pure host functions.
#include <cmath>
#include <cstdint>
#include <vector>

#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"
#if defined(FMOE_HAS_CUDA)
#include "rope/rope_launch.hpp"
#endif

using namespace fusedmoe;

namespace {

constexpr ref::RopeStyle kGptj = ref::RopeStyle::gptj_interleaved;
constexpr ref::RopeStyle kNeox = ref::RopeStyle::neox;

// A cache of `rows` rows of rope_dim 4 whose row 1 has the angles 1 and 0.1 (as floats) and
// whose row 2 is the exact quarter turn (cos 0, sin 1) for both pairs.
std::vector<float> hand_cache() {
  std::vector<float> c(3 * 4, 0.0f);
  c[0] = c[1] = 1.0f;  // row 0: identity
  c[4 + 0] = float(std::cos(1.0));
  c[4 + 1] = float(std::cos(0.1));
  c[4 + 2] = float(std::sin(1.0));
  c[4 + 3] = float(std::sin(0.1));
  c[8 + 2] = c[8 + 3] = 1.0f;  // row 2: cos 0, sin 1
  return c;
}

}  // namespace

TEST(RopeRef, KnownRotationsBothStyles) {
  const std::vector<float> cache = hand_cache();
  const double c1 = cache[4], c01 = cache[5], s1 = cache[6], s01 = cache[7];
  const int64_t pos1[1] = {1};
  {  // GPT-J pairs (0, 1) and (2, 3): unit x of each pair -> (cos, sin); inverse -> (cos, -sin)
    const float x[4] = {1, 0, 1, 0};
    const auto f = ref::rope_from_cache(x, 1, 1, 4, 4, pos1, cache.data(), 3, kGptj, false);
    EXPECT_EQ(f.value, (std::vector<double>{c1, s1, c01, s01}));
    const auto b = ref::rope_from_cache(x, 1, 1, 4, 4, pos1, cache.data(), 3, kGptj, true);
    EXPECT_EQ(b.value, (std::vector<double>{c1, -s1, c01, -s01}));
    const float y[4] = {0, 1, 0, 1};  // unit y -> (-sin, cos)
    EXPECT_EQ(ref::rope_from_cache(y, 1, 1, 4, 4, pos1, cache.data(), 3, kGptj, false).value,
              (std::vector<double>{-s1, c1, -s01, c01}));
  }
  {  // NeoX pairs (0, 2) and (1, 3)
    const float x[4] = {1, 1, 0, 0};
    const auto f = ref::rope_from_cache(x, 1, 1, 4, 4, pos1, cache.data(), 3, kNeox, false);
    EXPECT_EQ(f.value, (std::vector<double>{c1, c01, s1, s01}));
    const auto b = ref::rope_from_cache(x, 1, 1, 4, 4, pos1, cache.data(), 3, kNeox, true);
    EXPECT_EQ(b.value, (std::vector<double>{c1, c01, -s1, -s01}));
  }
  {  // the quarter turn is exact: (x, y) -> (-y, x); position 0 is the identity
    const float x[4] = {3, -5, 7, 11};
    const int64_t pos2[1] = {2}, pos0[1] = {0};
    EXPECT_EQ(ref::rope_from_cache(x, 1, 1, 4, 4, pos2, cache.data(), 3, kGptj, false).value,
              (std::vector<double>{5, 3, -11, 7}));
    EXPECT_EQ(ref::rope_from_cache(x, 1, 1, 4, 4, pos2, cache.data(), 3, kNeox, false).value,
              (std::vector<double>{-7, -11, 3, -5}));
    EXPECT_EQ(ref::rope_from_cache(x, 1, 1, 4, 4, pos0, cache.data(), 3, kNeox, false).value,
              (std::vector<double>{3, -5, 7, 11}));
  }
}

TEST(RopeRef, CosSinCacheLayout) {
  const int R = 8, P = 50;
  const double theta = 10000.0;
  const std::vector<float> c = ref::rope_cos_sin_cache(P, R, theta);
  ASSERT_EQ(c.size(), size_t(P * R));
  for (int i = 0; i < R / 2; ++i) {
    EXPECT_EQ(c[size_t(i)], 1.0f) << "row 0: cos 1";
    EXPECT_EQ(c[size_t(R / 2 + i)], 0.0f) << "row 0: sin 0";
    const double f = std::pow(theta, -2.0 * i / R);
    EXPECT_EQ(c[size_t(37 * R + i)], float(std::cos(37 * f))) << i;
    EXPECT_EQ(c[size_t(37 * R + R / 2 + i)], float(std::sin(37 * f))) << i;
  }
}

TEST(RopeRef, InverseUndoesForward) {
  for (uint64_t seed : test::seeds_for(0x201)) {
    const int T = 7, H = 3, D = 64, R = 64, P = 4096;
    const std::vector<float> cache = ref::rope_cos_sin_cache(P, R, 10000.0);
    const std::vector<float> x = ref::random_bf16(T * H * D, seed, 1, 2.0f);
    ref::Rng rng(seed);
    std::vector<int64_t> pos(T);
    for (auto& p : pos) p = rng.below(P);
    for (auto style : {kGptj, kNeox}) {
      const auto f = ref::rope_from_cache(x.data(), T, H, D, R, pos.data(), cache.data(), P, style, false);
      std::vector<float> fx(f.value.begin(), f.value.end());  // rounded to float once
      const auto b = ref::rope_from_cache(fx.data(), T, H, D, R, pos.data(), cache.data(), P, style, true);
      for (size_t i = 0; i < x.size(); ++i) {
        // cos^2 + sin^2 = 1 within 2^-23 (float cache), plus two float roundings of the pair.
        const size_t head = i / D * D, j = i % D;
        const size_t partner = style == kGptj ? (j ^ 1) : (j < R / 2 ? j + R / 2 : j - R / 2);
        const double scale = std::fabs(x[i]) + std::fabs(x[head + partner]);
        ASSERT_NEAR(b.value[i], x[i], 8 * 0x1p-24 * scale + 1e-30)
            << "style " << int(style) << " element " << i << " seed " << seed;
      }
    }
  }
}

TEST(RopeRef, PartialRopeLeavesTheLeadingValuesAlone) {
  // DeepSeek's q head: 192 values, the last 64 rotated. The first 128 come back exactly, and the
  // last 64 are what a 64-value head rotated whole gives.
  for (uint64_t seed : test::seeds_for(0x202)) {
    const int T = 5, H = 4, D = 192, R = 64, P = 100;
    const std::vector<float> cache = ref::rope_cos_sin_cache(P, R, 10000.0);
    const std::vector<float> x = ref::random_bf16(T * H * D, seed, 2, 1.0f);
    std::vector<float> tail(size_t(T) * H * R);
    for (size_t h = 0; h < size_t(T) * H; ++h)
      for (int j = 0; j < R; ++j) tail[h * R + size_t(j)] = x[h * D + size_t(D - R + j)];
    const std::vector<int64_t> pos = {0, 99, 17, 42, 3};
    for (auto style : {kGptj, kNeox})
      for (bool inv : {false, true}) {
        const auto full = ref::rope_from_cache(x.data(), T, H, D, R, pos.data(), cache.data(), P, style, inv);
        const auto part = ref::rope_from_cache(tail.data(), T, H, R, R, pos.data(), cache.data(), P, style, inv);
        for (size_t h = 0; h < size_t(T) * H; ++h)
          for (int j = 0; j < D; ++j) {
            const size_t i = h * D + size_t(j);
            if (j < D - R) {
              ASSERT_EQ(full.value[i], double(x[i])) << "leading value " << j << " of head " << h;
              ASSERT_EQ(full.abs_terms[i], 0.0);
            } else {
              ASSERT_EQ(full.value[i], part.value[h * R + size_t(j - (D - R))]) << "rope value " << j;
            }
          }
        // position 0 is the identity (cos 1, sin 0) on the rope part too
        for (int j = 0; j < H * D; ++j) ASSERT_EQ(full.value[size_t(j)], double(x[size_t(j)]));
      }
  }
}

TEST(RopeRef, AgreesWithTheThetaReference) {
  // ref::rope (elementwise.cpp) computes its angles itself and rotates the FIRST rotary_dim
  // values; with rope_dim == head_dim the two must agree up to the float rounding of the cache.
  for (uint64_t seed : test::seeds_for(0x203)) {
    const int T = 6, H = 2, D = 32, P = 5000;
    const double theta = 10000.0;
    const std::vector<float> cache = ref::rope_cos_sin_cache(P, D, theta);
    const std::vector<float> x = ref::random_bf16(T * H * D, seed, 3, 4.0f);
    const std::vector<int32_t> pos32 = {0, 1, 4999, 1234, 77, 3000};
    const std::vector<int64_t> pos64(pos32.begin(), pos32.end());
    for (auto style : {kGptj, kNeox})
      for (bool inv : {false, true}) {
        std::vector<float> y = x;
        ref::rope(y.data(), pos32.data(), T, H, D, D, float(theta), style, inv);
        const auto r = ref::rope_from_cache(x.data(), T, H, D, D, pos64.data(), cache.data(), P, style, inv);
        for (size_t i = 0; i < x.size(); ++i)
          ASSERT_NEAR(r.value[i], double(y[i]), 4e-7 * (r.abs_terms[i] + 1e-30))
              << "element " << i << " style " << int(style) << " inverse " << inv;
      }
  }
}

TEST(RopeRef, BadPositionsLeaveTheirTokensAndAreCounted) {
  const int T = 5, H = 2, D = 8, R = 4, P = 10;
  const std::vector<float> cache = ref::rope_cos_sin_cache(P, R, 100.0);
  const std::vector<float> x = ref::random_bf16(T * H * D, 9, 4, 1.0f);
  const std::vector<int64_t> pos = {-1, 3, 10, int64_t(1) << 40, 9};
  const auto r = ref::rope_from_cache(x.data(), T, H, D, R, pos.data(), cache.data(), P, kNeox, false);
  EXPECT_EQ(r.bad_positions, 3);
  for (int t : {0, 2, 3})
    for (int j = 0; j < H * D; ++j) {
      const size_t i = size_t(t) * H * D + size_t(j);
      ASSERT_EQ(r.value[i], double(x[i])) << "token " << t;
    }
  // the good tokens moved (position 3 and 9 are real rotations)
  double moved = 0;
  for (int t : {1, 4})
    for (int j = 0; j < H * D; ++j) moved += std::fabs(r.value[size_t(t * H * D + j)] - x[size_t(t * H * D + j)]);
  EXPECT_GT(moved, 0.0);
}

TEST(RopeRef, RejectsBadRopeDims) {
  const std::vector<float> cache(16, 0.0f), x(8, 1.0f);
  const int64_t pos[1] = {0};
  test::expect_error([&] { ref::rope_from_cache(x.data(), 1, 1, 8, 3, pos, cache.data(), 1, kNeox, false); },
                     "rope_dim=3");
  test::expect_error([&] { ref::rope_from_cache(x.data(), 1, 1, 4, 6, pos, cache.data(), 1, kNeox, false); },
                     "rope_dim=6 must be even and in (0, head_dim=4]");
}

#if defined(FMOE_HAS_CUDA)
// ---- the config and grid choice ------------------------------------------------------------------
namespace {

detail::RopeProblem problem(DType t, int64_t T, int64_t heads, int R, int max_vec = 16) {
  detail::RopeProblem p;
  p.dtype = t;
  p.T = T;
  p.heads = heads;
  p.rope_dim = R;
  p.max_vec_bytes = max_vec;
  p.vec_why = max_vec < 16 ? "test: narrower layout" : "";
  p.num_sms = 132;
  return p;
}

// The invariants every grid must keep, whatever the problem: the kernel's tiles cover every item
// of every token exactly, fit a CTA's threads and its shared memory.
void check_grid(const detail::RopeProblem& p, int vec_bytes, const detail::RopeGrid& g) {
  const int V = vec_bytes / int(dtype_bytes(p.dtype));
  const int64_t ipt = p.heads * (p.rope_dim / (2 * V));
  const std::string ctx = strf("T=%lld heads=%lld R=%d %s v%d", (long long)p.T, (long long)p.heads,
                               p.rope_dim, dtype_name(p.dtype), vec_bytes);
  EXPECT_GE(g.threads, 32) << ctx;
  EXPECT_LE(g.threads, detail::kRopeMaxThreads) << ctx;
  EXPECT_EQ(g.threads % 32, 0) << ctx;
  EXPECT_LE(int64_t(g.tokens_per_cta) * g.items_per_cta, int64_t(g.threads) * detail::kRopeItemsPerThread) << ctx;
  EXPECT_GE(g.blocks_x * g.tokens_per_cta, p.T) << ctx;
  EXPECT_LT((g.blocks_x - 1) * g.tokens_per_cta, p.T) << ctx;
  EXPECT_GE(int64_t(g.blocks_y) * g.items_per_cta, ipt) << ctx;
  EXPECT_LT(int64_t(g.blocks_y - 1) * g.items_per_cta, ipt) << ctx;
  EXPECT_LE(g.blocks_y, 65535) << ctx;
  EXPECT_TRUE(g.tokens_per_cta == 1 || g.items_per_cta == ipt) << ctx << ": several tokens need whole tokens";
  EXPECT_LE(g.smem_bytes, size_t(48 * 1024)) << ctx << ": above 48 KB needs an opt-in";
  EXPECT_EQ(g.smem_bytes, detail::rope_smem_bytes(g.tokens_per_cta, p.rope_dim)) << ctx;
}

}  // namespace

TEST(RopeConfig, ModelShapes) {
  // DeepSeek-V3 q: 128 heads, rope 64 of 192, bf16: 4 items of 8 pairs per head, 512 per token:
  // one token per CTA of 256 threads.
  detail::RopeChoice c = detail::select_rope_config(problem(DType::bf16, 4096, 128, 64));
  EXPECT_STREQ(detail::rope_config_info(c.id).name, "bf16_v16");
  EXPECT_EQ(c.grid.tokens_per_cta, 1);
  EXPECT_EQ(c.grid.items_per_cta, 512);
  EXPECT_EQ(c.grid.threads, 256);
  EXPECT_EQ(c.grid.blocks_x, 4096);
  EXPECT_EQ(c.grid.blocks_y, 1);
  // At T = 128 that would be 128 CTAs for 132 SMs: each token goes to two CTAs of 128 threads.
  c = detail::select_rope_config(problem(DType::bf16, 128, 128, 64));
  EXPECT_EQ(c.grid.items_per_cta, 256);
  EXPECT_EQ(c.grid.threads, 128);
  EXPECT_EQ(c.grid.blocks_x, 128);
  EXPECT_EQ(c.grid.blocks_y, 2);
  // Llama: 32 q + 8 k heads of 128, all rotated: 8 items per head, 320 per token, 160 threads.
  c = detail::select_rope_config(problem(DType::bf16, 4096, 40, 128));
  EXPECT_EQ(c.grid.items_per_cta, 320);
  EXPECT_EQ(c.grid.threads, 160);
  EXPECT_EQ(c.grid.blocks_x, 4096);
  // Decode (T = 1): the token's 512 items spread over 8 CTAs of one warp.
  c = detail::select_rope_config(problem(DType::bf16, 1, 128, 64));
  EXPECT_EQ(c.grid.blocks_y, 8);
  EXPECT_EQ(c.grid.items_per_cta, 64);
  EXPECT_EQ(c.grid.threads, 32);
  // f32: 16 bytes are 4 pairs, so twice the items.
  c = detail::select_rope_config(problem(DType::f32, 128, 40, 128));
  EXPECT_STREQ(detail::rope_config_info(c.id).name, "f32_v16");
  EXPECT_EQ(c.grid.items_per_cta, 320);
  EXPECT_EQ(c.grid.blocks_y, 2);
  // One small head per token: whole tokens per CTA (64 at most, by the 16 KB of staged rows of
  // 64 floats), fewer when that spreads the tokens over the SMs.
  c = detail::select_rope_config(problem(DType::bf16, 100000, 1, 64));
  EXPECT_EQ(c.grid.tokens_per_cta, 64);
  EXPECT_EQ(c.grid.threads, 128);
  c = detail::select_rope_config(problem(DType::bf16, 10, 1, 64));
  EXPECT_EQ(c.grid.tokens_per_cta, 16);
  EXPECT_EQ(c.grid.blocks_x, 1);
}

TEST(RopeConfig, NarrowerLayoutsGetNarrowerVectors) {
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    for (int v : {16, 8, 4, 2}) {
      if (v < int(dtype_bytes(t))) continue;
      const detail::RopeChoice c = detail::select_rope_config(problem(t, 64, 8, 64, v));
      const detail::RopeConfigInfo info = detail::rope_config_info(c.id);
      EXPECT_EQ(info.dtype, t);
      EXPECT_EQ(info.vec_bytes, v) << dtype_name(t);
      if (v < 16) {
        EXPECT_NE(c.reason.find("test: narrower layout"), std::string::npos) << c.reason;
      }
    }
}

TEST(RopeConfig, GridInvariantsOverManyShapes) {
  ref::Rng rng(test::run_seed());
  const int64_t Ts[] = {1, 2, 3, 7, 128, 131, 1000, 4096, 65536, 1 << 20};
  for (int n = 0; n < 400; ++n) {
    const DType t = std::vector<DType>{DType::bf16, DType::f16, DType::f32}[size_t(rng.below(3))];
    const int eb = int(dtype_bytes(t));
    const int R = 2 * (1 + rng.below(n % 4 == 0 ? 2048 : 128));
    const int64_t heads = 1 + rng.below(n % 3 == 0 ? 8 : 256);
    const int64_t T = Ts[rng.below(10)];
    // the widest vector rope_dim / 2 allows (the addresses and strides are the caller's)
    int v = 16;
    while (v > eb && (R / 2 * eb) % v != 0) v /= 2;
    const detail::RopeProblem p = problem(t, T, heads, R, v);
    const detail::RopeChoice c = detail::select_rope_config(p);
    EXPECT_EQ(detail::rope_config_info(c.id).vec_bytes, v);
    check_grid(p, v, c.grid);
  }
  // the extremes the validation lets through: 2^24 rotated values per token, rope_dim 4096
  for (int v : {16, 2}) {
    const detail::RopeProblem big = problem(DType::bf16, 3, (int64_t(1) << 24) / 4096, 4096, v);
    check_grid(big, v, detail::select_rope_config(big).grid);
  }
  const detail::RopeProblem tiny = problem(DType::bf16, 1 << 20, 1, 2, 2);
  check_grid(tiny, 2, detail::select_rope_config(tiny).grid);
}

TEST(RopeConfig, ForcedConfigs) {
  const detail::RopeProblem p = problem(DType::bf16, 128, 8, 64, 8);
  EXPECT_STREQ(detail::rope_config_info(detail::select_rope_config(p, "bf16_v4").id).name, "bf16_v4");
  EXPECT_STREQ(detail::rope_config_info(detail::select_rope_config(p, "gemv_generic").id).name, "bf16_v8")
      << "another op's config name is not ours";
  test::expect_error([&] { detail::select_rope_config(p, "f16_v8"); }, "is a f16 rope config; q is bf16");
  test::expect_error([&] { detail::select_rope_config(p, "bf16_v16"); }, "needs 16-byte vectors; this call allows 8");
  EXPECT_EQ(detail::rope_config_by_name("no_such"), detail::RopeConfigId::count);
}
#endif
