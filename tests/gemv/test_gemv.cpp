// NVFP4 GEMV without a GPU: the reference against a plain float64 computation, the config choice,
// and the argument checks that fail before any CUDA call.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "fusedmoe/formats.hpp"
#include "fusedmoe/gemv.hpp"
#include "tests/gemv/gemv_test_util.hpp"
#include "tests/test_util.hpp"
#if defined(FMOE_HAS_CUDA)
#include "gemv/gemv_launch.hpp"
#endif

using namespace fusedmoe;

namespace {

// Straight from the format definition: value = e2m1(code) * e4m3(scale) * global.
double nvfp4_value(const ref::WeightSet& w, int e, int n, int k) {
  const size_t idx = (size_t(e) * w.N + n) * w.K + k;
  const uint8_t byte = w.q[idx / 2];
  const uint8_t code = (k % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  return double(fmt::e2m1_to_float(code)) * double(fmt::e4m3_to_float(w.block_scale[idx / 16])) *
         double(w.global_scale[size_t(e)]);
}

}  // namespace

TEST(GemvRef, MatchesPlainFloat64BothForms) {
  for (const auto& [L, M, K] : std::vector<std::tuple<int, int, int>>{{1, 1, 16}, {3, 5, 48}, {2, 33, 160}}) {
    for (uint64_t seed : test::seeds_for(test::hash_ints({L, M, K}))) {
      const ref::WeightSet a = test::random_nvfp4(L, M, K, seed);
      const ref::WeightSet bq = test::random_nvfp4(L, 1, K, seed ^ 0xB);
      const ref::ActRows bh = test::random_bf16_rows(L, K, seed ^ 0xC);
      const ref::GemvResult r4 = ref::gemv(a, &bq, nullptr), rh = ref::gemv(a, nullptr, &bh);
      for (int l = 0; l < L; ++l)
        for (int m = 0; m < M; ++m) {
          double v4 = 0, s4 = 0, vh = 0, sh = 0;
          for (int k = 0; k < K; ++k) {
            const double av = nvfp4_value(a, l, m, k);
            const double p4 = av * nvfp4_value(bq, l, 0, k);
            const double ph = av * double(fmt::bf16_to_float(bh.bf16[size_t(l) * K + k]));
            v4 += p4;
            s4 += std::fabs(p4);
            vh += ph;
            sh += std::fabs(ph);
          }
          const size_t o = size_t(l) * M + m;
          EXPECT_NEAR(r4.value[o], v4, 1e-12 * s4) << "seed " << seed << " l " << l << " m " << m;
          EXPECT_NEAR(r4.abs_sum[o], s4, 1e-12 * s4);
          EXPECT_NEAR(rh.value[o], vh, 1e-12 * sh);
          EXPECT_NEAR(rh.abs_sum[o], sh, 1e-12 * sh);
        }
    }
  }
}

TEST(GemvRef, MoeFormSumsRoutesAndSkipsBadIds) {
  const int E = 5, N = 7, K = 64, T = 3, k = 4;
  for (uint64_t seed : test::seeds_for(0x30E)) {
    const ref::WeightSet w = test::random_nvfp4(E, N, K, seed);
    const ref::ActRows x = test::random_bf16_rows(T, K, seed ^ 1);
    // Token 0: a repeated expert; token 1: two out-of-range ids; token 2: all the same expert.
    const std::vector<int32_t> ids = {2, 0, 2, 4, -1, 3, E, 1, 4, 4, 4, 4};
    const std::vector<float> wts = {0.5f, -0.25f, 0.125f, 1.0f, 9.0f, 0.75f, 9.0f, 0.5f, 0.25f, 0.5f, 1.0f, 2.0f};
    const ref::GemvResult r = ref::moe_gemv(w, x, ids.data(), wts.data(), k);
    for (int t = 0; t < T; ++t)
      for (int n = 0; n < N; ++n) {
        double v = 0, s = 0;
        for (int j = 0; j < k; ++j) {
          const int e = ids[size_t(t) * k + j];
          if (e < 0 || e >= E) continue;
          double d = 0, ds = 0;
          for (int kk = 0; kk < K; ++kk) {
            const double p = nvfp4_value(w, e, n, kk) * double(fmt::bf16_to_float(x.bf16[size_t(t) * K + kk]));
            d += p;
            ds += std::fabs(p);
          }
          v += double(wts[size_t(t) * k + j]) * d;
          s += std::fabs(double(wts[size_t(t) * k + j])) * ds;
        }
        EXPECT_NEAR(r.value[size_t(t) * N + n], v, 1e-12 * s) << "t " << t << " n " << n;
        EXPECT_NEAR(r.abs_sum[size_t(t) * N + n], s, 1e-12 * s);
      }
  }
}

#if defined(FMOE_HAS_CUDA)
using detail::GemvConfigId;
using detail::GemvMode;

namespace {
detail::GemvProblem batched(int64_t M, int64_t K, int64_t L) {
  detail::GemvProblem p;
  p.mode = GemvMode::batched;
  p.M = M;
  p.K = K;
  p.L = L;
  return p;
}
detail::GemvProblem grouped(int64_t N, int64_t K, int64_t T, int64_t top_k) {
  detail::GemvProblem p;
  p.mode = GemvMode::grouped;
  p.M = N;
  p.K = K;
  p.T = T;
  p.top_k = top_k;
  return p;
}
std::string name_of(const detail::GemvChoice& c) { return detail::gemv_config_info(c.id).name; }
}  // namespace

TEST(GemvConfig, TableIsConsistent) {
  for (int i = 0; i < int(GemvConfigId::count); ++i) {
    const detail::GemvConfigInfo c = detail::gemv_config_info(GemvConfigId(i));
    EXPECT_EQ(detail::gemv_config_by_name(c.name), GemvConfigId(i)) << c.name;
    if (!c.generic) {
      EXPECT_EQ(c.block_m() % 16, 0) << c.name;
      EXPECT_LE(c.threads(), 512) << c.name;
    }
  }
  EXPECT_EQ(detail::gemv_config_by_name("bt16_s10"), GemvConfigId::count);  // another op's name
}

TEST(GemvConfig, ContestShapesFillOneWave) {
  // H100: 132 SMs, two 256-thread CTAs per SM.
  for (const auto& [M, K, L] : std::vector<std::tuple<int, int, int>>{{7168, 16384, 1}, {4096, 7168, 8}, {7168, 2048, 4}}) {
    const detail::GemvChoice c = detail::select_gemv_config(batched(M, K, L));
    const detail::GemvConfigInfo info = detail::gemv_config_info(c.id);
    EXPECT_FALSE(info.generic);
    const int64_t ctas = (M + info.block_m() - 1) / info.block_m() * L;
    EXPECT_LE(ctas, 2 * 132) << info.name;
    EXPECT_GE(ctas, 132) << info.name;
    EXPECT_FALSE(c.reason.empty());
    EXPECT_GT(c.smem_bytes, size_t(K) * 2);  // b row in fp16
  }
  EXPECT_EQ(name_of(detail::select_gemv_config(batched(7168, 16384, 1))), "gemv_m32_k8_s2");
  EXPECT_EQ(name_of(detail::select_gemv_config(batched(4096, 7168, 8))), "gemv_m128_k2_s2");
  EXPECT_EQ(name_of(detail::select_gemv_config(batched(7168, 2048, 4))), "gemv_m128_k2_s2");
}

TEST(GemvConfig, MoeDecodeUsesTheGroupedKernel) {
  for (int T : {1, 2, 4, 8}) {
    const detail::GemvChoice c = detail::select_gemv_config(grouped(4096, 7168, T, 8));
    const detail::GemvConfigInfo info = detail::gemv_config_info(c.id);
    EXPECT_EQ(info.mode, GemvMode::grouped);
    EXPECT_FALSE(info.generic);
    EXPECT_EQ(c.tokens_per_cta, T);  // one token group: each expert's weights read once
  }
  EXPECT_EQ(detail::select_gemv_config(grouped(4096, 7168, 100, 8)).tokens_per_cta, 8);
}

TEST(GemvConfig, GenericWhenTheFastPathCannotRun) {
  detail::GemvProblem p = batched(1, 16, 3);
  p.fast_ok = false;
  p.fast_why_not = "K = 16 is not a multiple of 32";
  const detail::GemvChoice c = detail::select_gemv_config(p);
  EXPECT_EQ(c.id, GemvConfigId::gemv_generic);
  EXPECT_NE(c.reason.find("K = 16"), std::string::npos);
  detail::GemvProblem g = grouped(64, 48, 2, 2);
  g.fast_ok = false;
  EXPECT_EQ(detail::select_gemv_config(g).id, GemvConfigId::moe_generic);
  // B rows that do not fit in shared memory.
  const detail::GemvChoice big = detail::select_gemv_config(batched(64, int64_t(1) << 20, 1));
  EXPECT_EQ(big.id, GemvConfigId::gemv_generic);
  EXPECT_NE(big.reason.find("shared memory"), std::string::npos);
}

TEST(GemvConfig, ForcedConfigs) {
  for (int i = 0; i < int(GemvConfigId::count); ++i) {
    const detail::GemvConfigInfo info = detail::gemv_config_info(GemvConfigId(i));
    const detail::GemvProblem p = info.mode == GemvMode::batched ? batched(100, 256, 2) : grouped(100, 256, 3, 4);
    const detail::GemvChoice c = detail::select_gemv_config(p, info.name);
    EXPECT_EQ(c.id, GemvConfigId(i));
    EXPECT_EQ(c.reason, "forced by FMOE_FORCE_CONFIG");
    // The other mode is refused with a message naming both.
    const detail::GemvProblem other = info.mode == GemvMode::batched ? grouped(100, 256, 3, 4) : batched(100, 256, 2);
    test::expect_error([&] { detail::select_gemv_config(other, info.name); }, info.name);
  }
  // Another op's config name is not ours: ignored.
  EXPECT_NE(detail::select_gemv_config(batched(100, 256, 2), "bt16_s10").reason, "forced by FMOE_FORCE_CONFIG");
  // A fast config on a problem only the generic kernel can run.
  detail::GemvProblem p = batched(1, 16, 1);
  p.fast_ok = false;
  p.fast_why_not = "K = 16 is not a multiple of 32";
  test::expect_error([&] { detail::select_gemv_config(p, "gemv_m32_k8_s2"); }, "K = 16 is not a multiple of 32");
}
#endif

// ---- argument checks (all fail before any CUDA call) ----------------------------------------------
namespace {
// Fake device addresses: never dereferenced, the checks throw first.
void* dev_ptr(uintptr_t a) { return reinterpret_cast<void*>(a); }
TensorRef dt(uintptr_t addr, DType t, std::initializer_list<int64_t> shape) {
  return TensorRef::contiguous(dev_ptr(addr), t, shape, Device::cuda, 0);
}
GemvNvfp4Args good_batched(int64_t L, int64_t M, int64_t K) {
  GemvNvfp4Args a;
  a.a = dt(0x100000, DType::e2m1x2, {L, M, K / 2});
  a.a_scale = dt(0x200000, DType::e4m3, {L, M, K / 16});
  a.a_global = dt(0x300000, DType::f32, {L});
  a.b = dt(0x400000, DType::e2m1x2, {L, K / 2});
  a.b_scale = dt(0x500000, DType::e4m3, {L, K / 16});
  a.b_global = dt(0x600000, DType::f32, {L});
  a.c = dt(0x700000, DType::f16, {L, M});
  return a;
}
MoeGemvNvfp4Args good_moe(int64_t E, int64_t N, int64_t K, int64_t T, int64_t k) {
  MoeGemvNvfp4Args a;
  a.w = dt(0x100000, DType::e2m1x2, {E, N, K / 2});
  a.w_scale = dt(0x200000, DType::e4m3, {E, N, K / 16});
  a.w_global = dt(0x300000, DType::f32, {E});
  a.x = dt(0x400000, DType::bf16, {T, K});
  a.topk_ids = dt(0x500000, DType::i32, {T, k});
  a.topk_weights = dt(0x600000, DType::f32, {T, k});
  a.y = dt(0x700000, DType::bf16, {T, N});
  return a;
}
}  // namespace

TEST(GemvArgs, RejectsBadBatchedArguments) {
  auto expect = [](GemvNvfp4Args a, const std::string& needle) {
    test::expect_error([&] { gemv_nvfp4(a, nullptr); }, needle);
  };
  GemvNvfp4Args a = good_batched(2, 64, 256);
  a.a.dtype = DType::e4m3;
  expect(a, "a must be e2m1x2, got e4m3");
  a = good_batched(2, 64, 256);
  a.a = dt(0x100000, DType::e2m1x2, {2, 64, 12});  // K = 24
  a.a_scale = dt(0x200000, DType::e4m3, {2, 64, 1});
  expect(a, "K = 2 * a.shape[-1] = 24 must be a multiple of 16");
  a = good_batched(2, 64, 256);
  a.a_scale = dt(0x200000, DType::e4m3, {2, 64, 8});
  expect(a, "a_scale must have shape [2, 64, 16]");
  a = good_batched(2, 64, 256);
  a.a.data = dev_ptr(0x100008);
  expect(a, "a must be 16-byte aligned");
  a = good_batched(2, 64, 256);
  a.a.stride[2] = 2;
  expect(a, "the last dimension of a must be contiguous");
  a = good_batched(2, 64, 256);
  a.a_global = dt(0x300000, DType::f32, {3});
  expect(a, "a_global must have shape [2]");
  a = good_batched(2, 64, 256);
  a.b = dt(0x400000, DType::f16, {2, 256});
  expect(a, "b must be e2m1x2 (NVFP4) or bf16, got f16");
  a = good_batched(2, 64, 256);
  a.b = dt(0x400000, DType::bf16, {2, 256});
  expect(a, "b is bf16, so b_scale and b_global must be empty");
  a = good_batched(2, 64, 256);
  a.b = dt(0x400001, DType::bf16, {2, 256});
  a.b_scale = TensorRef();
  a.b_global = TensorRef();
  expect(a, "b must be 2-byte aligned");
  a = good_batched(2, 64, 256);
  a.b_scale = dt(0x500000, DType::e4m3, {2, 8});
  expect(a, "b_scale must have shape [2, 16]");
  a = good_batched(2, 64, 256);
  a.c = dt(0x700000, DType::e4m3, {2, 64});
  expect(a, "c must be f16, bf16 or f32, got e4m3");
  a = good_batched(2, 64, 256);
  a.c.stride[0] = 1;  // overlapping [2, 64] with strides {1, 1}
  expect(a, "c strides {1, 1} make elements of its [2, 64] overlap");
  a = good_batched(2, 64, 256);
  a.c.device = Device::cpu;
  expect(a, "c must be on a CUDA device");
  a = good_batched(2, 64, 256);
  a.b.device_index = 1;
  expect(a, "b is on cuda:1, the other tensors on cuda:0");
  a = good_batched(2, 64, 256);
  a.a_scale.data = nullptr;
  expect(a, "a_scale is missing");
}

TEST(GemvArgs, RejectsBadMoeArguments) {
  auto expect = [](MoeGemvNvfp4Args a, const std::string& needle) {
    test::expect_error([&] { moe_gemv_nvfp4(a, nullptr); }, needle);
  };
  MoeGemvNvfp4Args a = good_moe(8, 64, 256, 4, 2);
  a.w = dt(0x100000, DType::e2m1x2, {64, 128});
  expect(a, "w must be [E, N, K/2]");
  a = good_moe(8, 64, 256, 4, 2);
  a.x = dt(0x400000, DType::bf16, {4, 128});
  expect(a, "x must have shape [T, 256]");
  a = good_moe(8, 64, 256, 4, 2);
  a.topk_ids = dt(0x500000, DType::f32, {4, 2});
  expect(a, "topk_ids must be i32, got f32");
  a = good_moe(8, 64, 256, 4, 2);
  a.topk_weights = dt(0x600000, DType::f32, {4, 3});
  expect(a, "topk_weights must have shape [4, 2]");
  a = good_moe(8, 64, 256, 4, 2);
  a.y = dt(0x700000, DType::bf16, {4, 32});
  expect(a, "y must have shape [4, 64]");
  a = good_moe(8, 64, 256, 4, 2);
  a.w_global = dt(0x300000, DType::bf16, {8});
  expect(a, "w_global must be f32, got bf16");
  a = good_moe(8, 64, 256, 4, 2);
  a.bad_id_count = dt(0x800000, DType::f32, {1});
  expect(a, "bad_id_count must be i32");
  a = good_moe(8, 64, 256, 4, 2);
  a.x.data = dev_ptr(0x400001);
  expect(a, "x must be 2-byte aligned");
}

TEST(GemvArgs, ValidArgumentsWithoutAGpuSayWhy) {
  std::string why;
  if (gpu_usable(0, &why)) GTEST_SKIP() << "a GPU is present: covered by test_gemv_gpu";
  test::expect_error([] { gemv_nvfp4(good_batched(2, 64, 256), nullptr); }, "gemv_nvfp4");
}
