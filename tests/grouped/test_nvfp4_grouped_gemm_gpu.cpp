// NVFP4 grouped GEMM on the GPU (include/fusedmoe/grouped_gemm.hpp) against the CPU reference
// (ref::nvfp4_grouped_gemm) fed the same quantized bytes: the four contest shapes scaled down in
// K, empty groups, one-row groups, a hot group, odd and small N, K not a multiple of 64, many
// groups, every compiled config of the family forced once (rings wrap: K >> stages x 64), every
// output dtype, with and without A's global scales, poisoned outputs, determinism, CUDA graphs,
// bad offsets (checked and clamped), and the argument errors.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/device_buffer.hpp"
#include "common/env.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/grouped_gemm.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"
#include "tests/tolerance.hpp"

using namespace fusedmoe;

namespace {

[[maybe_unused]] const int kPrintConfig = (detail::knobs().print_config = true, 0);

using test::dev_ref;

// One problem's bytes on the host: the quantized A and B exactly as the kernels see them.
struct Problem {
  int G = 0, M = 0, N = 0, K = 0;
  std::vector<int32_t> offsets;
  std::vector<uint8_t> a, a_scale, b, b_scale;
  std::vector<float> a_global, b_global;
};

// Random values with magnitudes spread over a few octaves per row (so the per-16 scales differ),
// quantized per group with ModelOpt's rule (global scale from the group's amax).
Problem make_problem(const std::vector<int>& m, int N, int K, uint64_t seed) {
  Problem p;
  p.G = int(m.size());
  p.N = N;
  p.K = K;
  p.offsets.push_back(0);
  for (int x : m) p.offsets.push_back(p.offsets.back() + x);
  p.M = p.offsets.back();
  auto values = [&](int64_t rows, uint64_t stream) {
    std::vector<float> x(size_t(rows * K));
    ref::fill_uniform(x.data(), int64_t(x.size()), seed, stream, 1.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float octave = std::ldexp(1.0f, int(ref::hash3(seed, stream + 7, uint64_t(r)) % 7) - 3);
      for (int k = 0; k < K; ++k) x[size_t(r * K + k)] *= octave;
    }
    return x;
  };
  p.a.resize(size_t(p.M) * K / 2);
  p.a_scale.resize(size_t(p.M) * K / 16);
  p.b.resize(size_t(p.G) * N * K / 2);
  p.b_scale.resize(size_t(p.G) * N * K / 16);
  for (int g = 0; g < p.G; ++g) {
    const int64_t r0 = p.offsets[size_t(g)], rows = m[size_t(g)];
    const std::vector<float> xa = values(rows, 100 + uint64_t(g));
    const float ga = fmt::nvfp4_global_scale(fmt::abs_max(xa.data(), int64_t(xa.size())));
    p.a_global.push_back(ga);
    if (rows > 0)
      fmt::quantize_nvfp4(xa.data(), rows, K, ga, p.a.data() + r0 * K / 2, p.a_scale.data() + r0 * K / 16);
    const std::vector<float> xb = values(N, 1000 + uint64_t(g));
    const float gb = fmt::nvfp4_global_scale(fmt::abs_max(xb.data(), int64_t(xb.size())));
    p.b_global.push_back(gb);
    fmt::quantize_nvfp4(xb.data(), N, K, gb, p.b.data() + int64_t(g) * N * K / 2,
                        p.b_scale.data() + int64_t(g) * N * K / 16);
  }
  return p;
}

// The reference, and the sums of |products| (the reference on |A|, |B|: sign bits cleared) that
// bound the fp32 accumulation error.
struct Want {
  std::vector<double> c, abs_sum;
};
Want reference(const Problem& p, bool with_a_global) {
  const float* ag = with_a_global ? p.a_global.data() : nullptr;
  const std::vector<float> c = ref::nvfp4_grouped_gemm(p.a.data(), p.a_scale.data(), ag, p.offsets.data(),
                                                       p.G, p.M, p.b.data(), p.b_scale.data(),
                                                       p.b_global.data(), p.N, p.K);
  auto magnitude = [](std::vector<uint8_t> v) {
    for (uint8_t& x : v) x &= 0x77;
    return v;
  };
  std::vector<float> ag_abs(p.a_global.size()), bg_abs(p.b_global.size());
  for (size_t i = 0; i < ag_abs.size(); ++i) ag_abs[i] = std::fabs(p.a_global[i]);
  for (size_t i = 0; i < bg_abs.size(); ++i) bg_abs[i] = std::fabs(p.b_global[i]);
  const std::vector<uint8_t> a_abs = magnitude(p.a), b_abs = magnitude(p.b);
  const std::vector<float> s = ref::nvfp4_grouped_gemm(a_abs.data(), p.a_scale.data(),
                                                       with_a_global ? ag_abs.data() : nullptr,
                                                       p.offsets.data(), p.G, p.M, b_abs.data(),
                                                       p.b_scale.data(), bg_abs.data(), p.N, p.K);
  return {std::vector<double>(c.begin(), c.end()), std::vector<double>(s.begin(), s.end())};
}

// Device copies of a problem and a prepared op.
struct Device {
  DeviceBuffer a, a_scale, a_global, offsets, b, b_scale, b_global;
  explicit Device(const Problem& p)
      : a(DeviceBuffer::from(p.a)), a_scale(DeviceBuffer::from(p.a_scale)),
        a_global(DeviceBuffer::from(p.a_global)), offsets(DeviceBuffer::from(p.offsets)),
        b(DeviceBuffer::from(p.b)), b_scale(DeviceBuffer::from(p.b_scale)),
        b_global(DeviceBuffer::from(p.b_global)) {}
  Nvfp4GroupedGemm prepare(const Problem& p) const {
    return Nvfp4GroupedGemm(dev_ref(b.get(), DType::e2m1x2, {p.G, p.N, p.K / 2}, {int64_t(p.N) * p.K / 2, p.K / 2, 1}),
                            dev_ref(b_scale.get(), DType::e4m3, {p.G, p.N, p.K / 16}, {int64_t(p.N) * p.K / 16, p.K / 16, 1}),
                            dev_ref(b_global.get(), DType::f32, {p.G}, {1}));
  }
  Nvfp4GroupedGemmArgs args(const Problem& p, void* c, DType out, bool with_a_global) const {
    Nvfp4GroupedGemmArgs x;
    x.a = dev_ref(a.get(), DType::e2m1x2, {p.M, p.K / 2}, {p.K / 2, 1});
    x.a_scale = dev_ref(a_scale.get(), DType::e4m3, {p.M, p.K / 16}, {p.K / 16, 1});
    if (with_a_global) x.a_global = dev_ref(a_global.get(), DType::f32, {p.G}, {1});
    x.offsets = dev_ref(offsets.get(), DType::i32, {p.G + 1}, {1});
    x.c = dev_ref(c, out, {p.M, p.N}, {p.N, 1});
    return x;
  }
};

double to_double(const uint8_t* c, DType t, size_t i) {
  if (t == DType::f32) {
    float v;
    std::memcpy(&v, c + 4 * i, 4);
    return v;
  }
  uint16_t h;
  std::memcpy(&h, c + 2 * i, 2);
  if (t == DType::bf16) {
    const uint32_t bits = uint32_t(h) << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
  // IEEE half: sign, 5-bit exponent (bias 15), 10-bit mantissa.
  const int e = (h >> 10) & 0x1F, f = h & 0x3FF;
  const double mag = e == 0 ? std::ldexp(double(f), -24) : e == 31 ? (f ? NAN : INFINITY)
                                                                  : std::ldexp(double(f | 0x400), e - 25);
  return h & 0x8000 ? -mag : mag;
}

test::Tol tol_of(DType t) {
  return t == DType::bf16 ? test::tol_bf16_out() : t == DType::f16 ? test::tol_f16_out() : test::tol_f32_out();
}

// Runs one case (each seed of test::seeds_for) with c poisoned first, and checks it.
void run_case(const std::vector<int>& m, int N, int K, DType out, bool with_a_global,
              const std::string& force = "") {
  std::string ms;
  for (int x : m) ms += std::to_string(x) + ",";
  detail::ScopedKnob<std::string> forced(&detail::Knobs::force_config, force);
  for (uint64_t seed : test::seeds_for(test::hash_ints({N, K, int(out), with_a_global, int(m.size())}))) {
    const std::string ctx = "seed " + std::to_string(seed) + " M=[" + ms + "] N=" + std::to_string(N) +
                            " K=" + std::to_string(K) + " out=" + dtype_name(out) +
                            (with_a_global ? " a_global" : "") + (force.empty() ? "" : " forced " + force);
    SCOPED_TRACE(ctx);
    const Problem p = make_problem(m, N, K, seed);
    const Device d(p);
    const Nvfp4GroupedGemm op = d.prepare(p);
    const size_t eb = dtype_bytes(out);
    DeviceBuffer c(std::max<size_t>(size_t(p.M) * p.N * eb, 16));
    c.fill(0xFF);  // NaN in every output type: a row left unwritten fails
    DeviceBuffer ws(op.workspace_size(p.M));
    ws.fill(0xFF);
    op.run(d.args(p, c.get(), out, with_a_global), ws.get(), ws.bytes(), nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
    EXPECT_FALSE(op.offsets_clamped(ws.get(), nullptr));
    const std::vector<uint8_t> got = c.to_host<uint8_t>();
    Want want = reference(p, with_a_global);
    if (out == DType::f16)  // values that round past the largest half (65504) are +-inf
      for (double& w : want.c)
        if (std::fabs(w) >= 65520.0) w = std::copysign(INFINITY, w);
    test::check_close([&](size_t i) { return to_double(got.data(), out, i); }, want.c.data(),
                      want.abs_sum.data(), want.c.size(), tol_of(out), ctx);
  }
}

TEST(Nvfp4GroupedGemmGpu, ContestShapesWithShorterK) {
  FMOE_SKIP_WITHOUT_GPU();
  // The contest's groups and N with K cut to keep the CPU reference quick; shape D in full.
  run_case({80, 176, 128, 72, 64, 248, 96, 160}, 4096, 512, DType::bf16, true);
  run_case({40, 76, 168, 72, 164, 148, 196, 160}, 7168, 256, DType::bf16, true);
  run_case({192, 320}, 3072, 512, DType::f16, true);
  run_case({128, 384}, 4096, 1536, DType::bf16, false);
}

TEST(Nvfp4GroupedGemmGpu, EdgeShapes) {
  FMOE_SKIP_WITHOUT_GPU();
  run_case({1}, 256, 128, DType::bf16, true);                 // one row
  run_case({0, 5, 0, 1, 0}, 384, 1024, DType::f32, true);     // empty groups, one-row group
  run_case({300, 0, 0, 2}, 256, 1040, DType::bf16, true);     // hot group, K % 64 = 16
  run_case({17, 33}, 201, 208, DType::bf16, true);            // odd N: unpaired rows
  run_case({9, 40, 3}, 40, 16, DType::f16, false);            // N < 128, the smallest K
  run_case({64, 64, 64}, 130, 2048, DType::f32, true);        // N one past a tile, ring wraps
  std::vector<int> many(300);
  for (size_t i = 0; i < many.size(); ++i) many[i] = int(i % 7);  // many groups, many empty
  run_case(many, 256, 128, DType::bf16, true);
}

TEST(Nvfp4GroupedGemmGpu, EveryConfigForced) {
  FMOE_SKIP_WITHOUT_GPU();
  // K = 1536: 24 k-blocks wrap every ring (6-10 stages); N = 512 gives the two-wave config whole
  // 256-row tiles; groups of 1..200 rows give full and partial token tiles of every width.
  for (const char* name : {"down_e2m1_bt16_c2_s8", "down_e2m1_bt32_c2_s6", "down_e2m1_bt64_s10",
                           "down_e2m1_bt128_s8", "down_e2m1_bt128_w2_s6"})
    run_case({200, 1, 0, 37, 129}, 512, 1536, DType::bf16, true, name);
}

TEST(Nvfp4GroupedGemmGpu, DeterministicAndGraphCapturable) {
  FMOE_SKIP_WITHOUT_GPU();
  const Problem p = make_problem({70, 0, 130, 56}, 512, 1024, 42);
  const Device d(p);
  const Nvfp4GroupedGemm op = d.prepare(p);
  const size_t bytes = size_t(p.M) * p.N * 2;
  DeviceBuffer c1(bytes), c2(bytes), ws(op.workspace_size(p.M));
  op.run(d.args(p, c1.get(), DType::bf16, true), ws.get(), ws.bytes(), nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());
  const std::vector<uint8_t> first = c1.to_host<uint8_t>();
  // Captured into a graph (no offsets check inside a capture), replayed twice into poisoned c.
  cudaStream_t s;
  FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FMOE_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  op.run(d.args(p, c2.get(), DType::bf16, true), ws.get(), ws.bytes(), s);
  FMOE_CUDA(cudaStreamEndCapture(s, &graph));
  FMOE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 2; ++rep) {
    c2.fill(0xFF);
    FMOE_CUDA(cudaGraphLaunch(exec, s));
    FMOE_CUDA(cudaStreamSynchronize(s));
    EXPECT_EQ(first, c2.to_host<uint8_t>()) << "replay " << rep << " differs from the eager run";
  }
  FMOE_CUDA(cudaGraphExecDestroy(exec));
  FMOE_CUDA(cudaGraphDestroy(graph));
  FMOE_CUDA(cudaStreamDestroy(s));
}

TEST(Nvfp4GroupedGemmGpu, BadOffsetsAreRefusedOrClamped) {
  FMOE_SKIP_WITHOUT_GPU();
  Problem p = make_problem({20, 30, 14}, 256, 256, 7);
  const Device d(p);
  const Nvfp4GroupedGemm op = d.prepare(p);
  DeviceBuffer c(size_t(p.M) * p.N * 4), ws(op.workspace_size(p.M));
  auto with_offsets = [&](std::vector<int32_t> o, bool validate) {
    d.offsets.upload(o.data(), o.size() * 4);
    Nvfp4GroupedGemmArgs x = d.args(p, c.get(), DType::f32, true);
    x.validate_offsets = validate;
    c.fill(0xFF);
    op.run(x, ws.get(), ws.bytes(), nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
  };
  test::expect_error([&] { with_offsets({1, 20, 50, 64}, true); }, "offsets[0] must be 0, got 1");
  test::expect_error([&] { with_offsets({0, 30, 20, 64}, true); },
                     "offsets must be non-decreasing, got offsets[2] = 20 after offsets[1] = 30");
  test::expect_error([&] { with_offsets({0, 20, 50, 60}, true); }, "offsets[3] must be M = 64");
  // Unchecked: the kernels use min(M, max(0, prefix max)): {0, 30, 30, 60}; rows 60..63 are zero.
  with_offsets({0, 30, 20, 60}, false);
  EXPECT_TRUE(op.offsets_clamped(ws.get(), nullptr));
  const std::vector<float> got = c.to_host<float>();
  Problem q = p;
  q.offsets = {0, 30, 30, 60};
  const Want want = reference(q, true);
  for (size_t i = 0; i < want.c.size(); ++i) {
    const size_t row = i / size_t(p.N);
    if (row >= 60) {
      ASSERT_EQ(got[i], 0.0f) << "row " << row << " is outside every group and must be zero";
      continue;
    }
    ASSERT_LE(std::fabs(got[i] - want.c[i]), 1e-5 * std::fabs(want.c[i]) + 64 * test::kUnitF32 * want.abs_sum[i])
        << "row " << row << " column " << i % size_t(p.N);
  }
  with_offsets({0, 20, 50, 64}, false);
  EXPECT_FALSE(op.offsets_clamped(ws.get(), nullptr));
}

TEST(Nvfp4GroupedGemmGpu, ArgumentErrors) {
  FMOE_SKIP_WITHOUT_GPU();
  Problem p = make_problem({4, 4}, 128, 64, 3);
  const Device d(p);
  const Nvfp4GroupedGemm op = d.prepare(p);
  DeviceBuffer c(size_t(p.M) * p.N * 2 + 64), ws(op.workspace_size(p.M));
  auto run = [&](const Nvfp4GroupedGemmArgs& x, size_t ws_bytes) { op.run(x, ws.get(), ws_bytes, nullptr); };
  const Nvfp4GroupedGemmArgs good = d.args(p, c.get(), DType::bf16, true);
  Nvfp4GroupedGemmArgs x = good;
  x.a.dtype = DType::e4m3;
  test::expect_error([&] { run(x, ws.bytes()); }, "a must be e2m1x2, got [8, 32] e4m3");
  x = good;
  x.a_scale.shape[1] = 3;
  test::expect_error([&] { run(x, ws.bytes()); }, "a_scale");
  x = good;
  x.c.dtype = DType::i32;
  test::expect_error([&] { run(x, ws.bytes()); }, "c must be bf16, f16 or f32, got i32");
  x = good;
  x.c.data = static_cast<uint8_t*>(c.get()) + 2;
  test::expect_error([&] { run(x, ws.bytes()); }, "c");
  x = good;
  x.offsets.shape[0] = 2;
  test::expect_error([&] { run(x, ws.bytes()); }, "offsets");
  test::expect_error([&] { run(good, ws.bytes() - 1); }, "workspace holds");
  // B: a NaN and a negative block scale, a NaN global scale, K not a multiple of 16.
  std::vector<uint8_t> bad_scale = p.b_scale;
  bad_scale[size_t(p.N * p.K / 16 + 5 * p.K / 16 + 2)] = 0x7F;  // group 1, row 5, block 2
  DeviceBuffer bs = DeviceBuffer::from(bad_scale);
  auto prepare_with = [&](void* scale, void* global, int K) {
    Nvfp4GroupedGemm(dev_ref(d.b.get(), DType::e2m1x2, {p.G, p.N, K / 2}, {int64_t(p.N) * K / 2, K / 2, 1}),
                     dev_ref(scale, DType::e4m3, {p.G, p.N, K / 16}, {int64_t(p.N) * (K / 16), K / 16, 1}),
                     dev_ref(global, DType::f32, {p.G}, {1}));
  };
  test::expect_error([&] { prepare_with(bs.get(), d.b_global.get(), p.K); },
                     "b_scale holds the NaN block scale code 0x7f at group 1, row 5, column block 2");
  bad_scale[size_t(p.N * p.K / 16 + 5 * p.K / 16 + 2)] = 0xB8;
  bs = DeviceBuffer::from(bad_scale);
  test::expect_error([&] { prepare_with(bs.get(), d.b_global.get(), p.K); },
                     "b_scale holds a negative block scale code 0xb8 at group 1, row 5");
  DeviceBuffer bg = DeviceBuffer::from(std::vector<float>{1.0f, NAN});
  test::expect_error([&] { prepare_with(d.b_scale.get(), bg.get(), p.K); }, "b_global[1] = nan must be finite");
  test::expect_error([&] { prepare_with(d.b_scale.get(), d.b_global.get(), 24); }, "must be a positive multiple of 16");
}

TEST(Nvfp4GroupedGemmGpu, SanitizerSmall) {
  // For compute-sanitizer (scripts/gpu_check.sh): the prep kernel and the e2m1 combine GEMM with
  // bf16 rows, every config once, rings wrapped (K = 1536: 24 k-blocks), an empty group, a
  // clamped-offsets call (the zeroed rows).
  FMOE_SKIP_WITHOUT_GPU();
  for (const char* name : {"down_e2m1_bt16_c2_s8", "down_e2m1_bt64_s10", "down_e2m1_bt128_w2_s6"})
    run_case({40, 0, 150}, 256, 1536, DType::bf16, true, name);
  run_case({3, 5}, 201, 64, DType::f16, false);
}

}  // namespace
