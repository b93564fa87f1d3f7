// NVFP4 GEMV on the GPU against the CPU reference: the contest shapes, small and odd shapes, both
// forms of b, every output dtype and layout, the MoE decode form (repeated and bad ids), every
// compiled config forced once, NaN propagation, poisoned outputs, determinism, PDL, graphs.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "common/device_buffer.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/gemv.hpp"
#include "gemv/gemv_launch.hpp"
#include "tests/gemv/gemv_test_util.hpp"
#include "tests/test_util.hpp"
#include "tests/tolerance.hpp"

using namespace fusedmoe;

namespace {

// Print every config choice (stderr), so the logs say which kernel each case ran.
[[maybe_unused]] const int kPrintConfig = (detail::knobs().print_config = true, 0);

using test::dev_ref;

// Host matrix [rows, cols] bytes into a device buffer with row stride `ld` (padding = 0xFF).
DeviceBuffer upload_rows(const uint8_t* src, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<uint8_t> h(size_t(std::max<int64_t>(rows * ld, 1)), 0xFF);
  for (int64_t r = 0; r < rows; ++r) std::memcpy(h.data() + r * ld, src + r * cols, size_t(cols));
  return DeviceBuffer::from(h);
}

// NVFP4 matrices on the device, rows padded to `row_pad` extra bytes.
struct DevNvfp4 {
  DeviceBuffer q, s, g;
  int E = 0, N = 0, K = 0;
  int64_t ldq = 0, lds = 0;
  DevNvfp4(const ref::WeightSet& w, int64_t row_pad = 0) : E(w.E), N(w.N), K(w.K) {
    ldq = K / 2 + row_pad;
    lds = K / 16 + (row_pad ? 2 : 0);
    q = upload_rows(w.q.data(), int64_t(E) * N, K / 2, ldq);
    s = upload_rows(w.block_scale.data(), int64_t(E) * N, K / 16, lds);
    g = DeviceBuffer::from(w.global_scale);
  }
  TensorRef qref() { return dev_ref(q.get(), DType::e2m1x2, {E, N, K / 2}, {N * ldq, ldq, 1}); }
  TensorRef sref() { return dev_ref(s.get(), DType::e4m3, {E, N, K / 16}, {N * lds, lds, 1}); }
  TensorRef gref() { return dev_ref(g.get(), DType::f32, {E}, {1}); }
};

double out_value(const std::vector<uint8_t>& buf, DType t, int64_t idx) {
  if (t == DType::f32) {
    float f;
    std::memcpy(&f, buf.data() + idx * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, buf.data() + idx * 2, 2);
  return t == DType::f16 ? fmt::f16_to_float(h) : fmt::bf16_to_float(h);
}

test::Tol tol_for(DType t) {
  if (t != DType::f16) return t == DType::bf16 ? test::tol_bf16_out() : test::tol_f32_out();
  test::Tol tol = test::tol_f16_out();
  tol.abs_floor = 0x1p-25;  // half the spacing of fp16 subnormals: a tiny output rounds absolutely
  return tol;
}

// An output [rows, cols] in a poisoned buffer with strides {s_row, s_col}; checks values against
// the reference and that every byte outside the written elements is still poison.
struct DevOut {
  DType t;
  int64_t rows, cols, s_row, s_col, elems;
  DeviceBuffer buf;
  DevOut(DType dt, int64_t r, int64_t c, bool col_major) : t(dt), rows(r), cols(c) {
    s_row = col_major ? 1 : c + (c > 1 ? 3 : 0);  // a gap after each row: must stay untouched
    s_col = col_major ? r : 1;
    elems = std::max<int64_t>(col_major ? r * c : r * s_row, 1);
    buf.resize(size_t(elems) * dtype_bytes(t));
    buf.fill(0xFF);
  }
  TensorRef ref() { return dev_ref(buf.get(), t, {rows, cols}, {s_row, s_col}); }
  void check(const ref::GemvResult& want, const std::string& ctx) {
    FMOE_CUDA(cudaDeviceSynchronize());
    const std::vector<uint8_t> h = buf.to_host<uint8_t>();
    std::vector<char> written(size_t(elems), 0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) written[size_t(r * s_row + c * s_col)] = 1;
    test::check_close([&](size_t i) { return out_value(h, t, int64_t(i / cols) * s_row + int64_t(i % cols) * s_col); },
                      want.value.data(), want.abs_sum.data(), size_t(rows * cols), tol_for(t), ctx);
    const size_t eb = dtype_bytes(t);
    size_t touched = 0;
    for (int64_t e = 0; e < elems; ++e)
      if (!written[size_t(e)])
        for (size_t b = 0; b < eb; ++b) touched += h[size_t(e) * eb + b] != 0xFF;
    EXPECT_EQ(touched, 0u) << ctx << ": bytes outside the output were written";
  }
};

const char* dname(DType t) { return dtype_name(t); }

// ---- batched ----------------------------------------------------------------------------------
struct BatchedCase {
  int L, M, K;
  bool b_nvfp4;
  DType out;
  bool col_major = false;
  int64_t row_pad = 0;  // extra bytes per A row (16: still the fast path; 8: the generic one)
  bool sfb_odd = false;  // b's block scales at an odd address (the kernel's byte-copy fallback)
};

std::string describe(const BatchedCase& c, uint64_t seed) {
  return strf("L=%d M=%d K=%d b=%s c=%s%s pad=%lld%s seed=%llu", c.L, c.M, c.K, c.b_nvfp4 ? "nvfp4" : "bf16",
              dname(c.out), c.col_major ? " (M, L) view" : "", (long long)c.row_pad,
              c.sfb_odd ? " sfb+1" : "", (unsigned long long)seed);
}

// Runs one case and checks it; returns the output bytes (for determinism checks).
std::vector<uint8_t> run_batched(const BatchedCase& c, uint64_t seed, bool pdl = false, bool check = true) {
  const ref::WeightSet a = test::random_nvfp4(c.L, c.M, c.K, seed);
  const ref::WeightSet bq = test::random_nvfp4(c.L, 1, c.K, seed ^ 0xB0B);
  const ref::ActRows bh = test::random_bf16_rows(c.L, c.K, seed ^ 0xB16);
  DevNvfp4 da(a, c.row_pad);
  DevNvfp4 db(bq);
  DeviceBuffer bh_dev = DeviceBuffer::from(bh.bf16);
  std::vector<uint8_t> sfb_shifted(bq.block_scale.size() + 1, 0xFF);
  std::memcpy(sfb_shifted.data() + 1, bq.block_scale.data(), bq.block_scale.size());
  DeviceBuffer sfb_odd = DeviceBuffer::from(sfb_shifted);
  DevOut out(c.out, c.L, c.M, c.col_major);
  GemvNvfp4Args args;
  args.a = da.qref();
  args.a_scale = da.sref();
  args.a_global = da.gref();
  if (c.b_nvfp4) {
    args.b = dev_ref(db.q.get(), DType::e2m1x2, {c.L, c.K / 2}, {c.K / 2, 1});
    args.b_scale = dev_ref(c.sfb_odd ? sfb_odd.get<uint8_t>() + 1 : db.s.get<uint8_t>(), DType::e4m3,
                           {c.L, c.K / 16}, {c.K / 16, 1});
    args.b_global = db.gref();
  } else {
    args.b = dev_ref(bh_dev.get(), DType::bf16, {c.L, c.K}, {c.K, 1});
  }
  args.c = out.ref();
  args.pdl = pdl;
  gemv_nvfp4(args, nullptr);
  FMOE_CUDA(cudaGetLastError());
  if (check) {
    const ref::GemvResult want = c.b_nvfp4 ? ref::gemv(a, &bq, nullptr) : ref::gemv(a, nullptr, &bh);
    out.check(want, describe(c, seed));
  }
  FMOE_CUDA(cudaDeviceSynchronize());
  return out.buf.to_host<uint8_t>();
}

// ---- grouped (MoE decode) ---------------------------------------------------------------------
struct MoeCase {
  int E, N, K, T, top_k;
  DType out = DType::bf16;
  int pool = 0;  // > 0: ids drawn from the first `pool` experts (repeats across tokens)
  bool repeat_within = false;  // a token picks one expert twice
  int bad = 0;                 // out-of-range ids per token (at the end of its list)
};

struct MoeInputs {
  std::vector<int32_t> ids;
  std::vector<float> weights;
  int bad_total = 0;
};

MoeInputs make_routing(const MoeCase& c, uint64_t seed) {
  MoeInputs r;
  ref::Rng rng(seed ^ 0x1D5);
  const int pool = c.pool > 0 ? std::min(c.pool, c.E) : c.E;
  for (int t = 0; t < c.T; ++t) {
    std::vector<int32_t> mine;
    for (int j = 0; j < c.top_k; ++j) {
      int32_t e;
      if (j >= c.top_k - c.bad) {
        const int32_t bads[3] = {-1, c.E, c.E + 1000};
        e = bads[rng.below(3)];
        ++r.bad_total;
      } else if (c.repeat_within && j == 1 && !mine.empty()) {
        e = mine[0];
      } else {
        // distinct within the token unless repeat_within (when the pool allows it)
        for (int tries = 0;; ++tries) {
          e = rng.below(pool);
          bool dup = false;
          for (int32_t m : mine) dup |= m == e;
          if (!dup || tries > 50) break;
        }
      }
      mine.push_back(e);
      r.ids.push_back(e);
      r.weights.push_back(0.05f + rng.uniform());
    }
  }
  return r;
}

std::string describe(const MoeCase& c, uint64_t seed) {
  return strf("E=%d N=%d K=%d T=%d k=%d y=%s pool=%d repeat=%d bad=%d seed=%llu", c.E, c.N, c.K, c.T,
              c.top_k, dname(c.out), c.pool, int(c.repeat_within), c.bad, (unsigned long long)seed);
}

std::vector<uint8_t> run_moe(const MoeCase& c, uint64_t seed, const ref::WeightSet* w_in = nullptr,
                             bool pdl = false) {
  const ref::WeightSet w_rand = w_in ? ref::WeightSet() : test::random_nvfp4(c.E, c.N, c.K, seed);
  const ref::WeightSet& w = w_in ? *w_in : w_rand;
  const ref::ActRows x = test::random_bf16_rows(c.T, c.K, seed ^ 0x7E);
  const MoeInputs r = make_routing(c, seed);
  DevNvfp4 dw(w);
  DeviceBuffer x_dev = DeviceBuffer::from(x.bf16);
  DeviceBuffer ids_dev = DeviceBuffer::from(r.ids), w_dev = DeviceBuffer::from(r.weights);
  DeviceBuffer bad_dev(4);
  bad_dev.fill(0);
  DevOut out(c.out, c.T, c.N, false);
  MoeGemvNvfp4Args args;
  args.w = dw.qref();
  args.w_scale = dw.sref();
  args.w_global = dw.gref();
  args.x = dev_ref(x_dev.get(), DType::bf16, {c.T, c.K}, {c.K, 1});
  args.topk_ids = dev_ref(ids_dev.get(), DType::i32, {c.T, c.top_k}, {c.top_k, 1});
  args.topk_weights = dev_ref(w_dev.get(), DType::f32, {c.T, c.top_k}, {c.top_k, 1});
  args.y = out.ref();
  args.bad_id_count = dev_ref(bad_dev.get(), DType::i32, {1}, {1});
  args.pdl = pdl;
  moe_gemv_nvfp4(args, nullptr);
  FMOE_CUDA(cudaGetLastError());
  const ref::GemvResult want = ref::moe_gemv(w, x, r.ids.data(), r.weights.data(), c.top_k);
  out.check(want, describe(c, seed));
  EXPECT_EQ(bad_dev.to_host<int32_t>()[0], r.bad_total) << describe(c, seed) << ": bad ids counted";
  return out.buf.to_host<uint8_t>();
}

struct ForceConfig : detail::ScopedKnob<std::string> {
  explicit ForceConfig(const char* name) : ScopedKnob(&detail::Knobs::force_config, name) {}
};

uint64_t seed_of(std::initializer_list<long long> v) { return test::seeds_for(test::hash_ints(v))[2]; }

}  // namespace

// The GPUMODE nvfp4_gemv shapes (c in fp16 as in the contest), both forms of b.
TEST(GemvGpu, ContestShapes) {
  FMOE_SKIP_WITHOUT_GPU();
  for (const auto& [M, K, L] : std::vector<std::tuple<int, int, int>>{{7168, 16384, 1}, {4096, 7168, 8}, {7168, 2048, 4}})
    for (bool nv : {true, false}) {
      const auto seeds = test::seeds_for(test::hash_ints({M, K, L, nv}));
      for (uint64_t seed : {seeds[0], seeds[2]}) run_batched({L, M, K, nv, DType::f16}, seed);
    }
}

TEST(GemvGpu, SmallAndOddShapes) {
  FMOE_SKIP_WITHOUT_GPU();
  const std::vector<std::tuple<int, int, int>> shapes = {
      {3, 1, 16},     // generic: K % 32 != 0, one block
      {1, 1, 32},     // fast: one chunk, one row
      {2, 17, 160},   // fast: partial last step, rows past M in the tile
      {3, 33, 48},    // generic
      {4, 5, 96},     // fast: fewer steps than warps
      {1, 300, 2080}, // fast: K % 128 = 32
      {2, 129, 4096},
  };
  for (const auto& [L, M, K] : shapes)
    for (bool nv : {true, false})
      for (DType out : {DType::f16, DType::bf16, DType::f32}) {
        const uint64_t seed = seed_of({L, M, K, nv, int(out)});
        run_batched({L, M, K, nv, out}, seed);
      }
  // Layouts: c as an (M, L) column-major view; padded A rows (fast: 16 B, generic: 8 B).
  for (bool nv : {true, false}) {
    run_batched({3, 70, 256, nv, DType::f32, true}, seed_of({1, nv}));
    run_batched({2, 70, 256, nv, DType::bf16, false, 16}, seed_of({2, nv}));
    run_batched({2, 70, 256, nv, DType::f16, true, 8}, seed_of({3, nv}));
  }
  run_batched({3, 40, 1024, true, DType::f32, false, 0, true}, seed_of({4}));  // scales at an odd address
}

TEST(GemvGpu, QuantizedFromFloats) {
  FMOE_SKIP_WITHOUT_GPU();
  // Realistic values: weights and b through the ModelOpt quantizer rather than random codes.
  const int L = 2, M = 96, K = 1024;
  for (uint64_t seed : test::seeds_for(0xF10A7)) {
    std::vector<float> a(size_t(L) * M * K), b(size_t(L) * K);
    ref::fill_uniform(a.data(), int64_t(a.size()), seed, 1, 0.05f);
    ref::fill_uniform(b.data(), int64_t(b.size()), seed, 2, 3.0f);
    const ref::WeightSet aq = ref::make_weights(Precision::nvfp4, a.data(), L, M, K);
    const ref::WeightSet bq = ref::make_weights(Precision::nvfp4, b.data(), L, 1, K);
    DevNvfp4 da(aq), db(bq);
    DevOut out(DType::f32, L, M, false);
    GemvNvfp4Args args;
    args.a = da.qref();
    args.a_scale = da.sref();
    args.a_global = da.gref();
    args.b = dev_ref(db.q.get(), DType::e2m1x2, {L, K / 2}, {K / 2, 1});
    args.b_scale = dev_ref(db.s.get(), DType::e4m3, {L, K / 16}, {K / 16, 1});
    args.b_global = db.gref();
    args.c = out.ref();
    gemv_nvfp4(args, nullptr);
    out.check(ref::gemv(aq, &bq, nullptr), strf("quantized floats seed=%llu", (unsigned long long)seed));
  }
}

TEST(GemvGpu, EveryConfigForced) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int i = 0; i < int(detail::GemvConfigId::count); ++i) {
    const detail::GemvConfigInfo info = detail::gemv_config_info(detail::GemvConfigId(i));
    ForceConfig force(info.name);
    SCOPED_TRACE(info.name);
    if (info.mode == detail::GemvMode::batched) {
      for (bool nv : {true, false}) run_batched({2, 100, 416, nv, DType::f32}, seed_of({i, nv}));
      if (info.generic) run_batched({3, 1, 16, true, DType::f16}, seed_of({i, 16}));
    } else {
      run_moe({12, 100, 416, 5, 4, DType::f32, 6, true, 1}, seed_of({i, 5}));
      run_moe({12, 40, 416, 11, 3, DType::f16, 0, false, 0}, seed_of({i, 11}));
    }
  }
}

// The MoE decode form at T = 1, 2, 4, 8: repeated experts across tokens and within a token,
// out-of-range ids (skipped and counted), and more than one token group.
TEST(GemvGpu, MoeDecode) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int T : {1, 2, 4, 8}) {
    run_moe({32, 256, 7168, T, 8, DType::bf16, 0, false, 0}, seed_of({T, 0}));
    run_moe({32, 256, 2048, T, 8, DType::f16, 4, false, 0}, seed_of({T, 1}));  // heavy overlap
    run_moe({32, 192, 1024, T, 6, DType::f32, 0, true, 2}, seed_of({T, 2}));   // repeats + bad ids
  }
  run_moe({16, 4096, 7168, 4, 8, DType::bf16}, seed_of({4096, 7168}));  // deepseek-v3 gate/up rows
  run_moe({20, 96, 512, 17, 4, DType::f32, 8, true, 1}, seed_of({17}));  // three token groups
  run_moe({8, 64, 256, 3, 0, DType::bf16}, seed_of({0}));                // k = 0: y = 0
  run_moe({8, 64, 48, 5, 2, DType::bf16, 0, false, 1}, seed_of({48}));   // generic: K % 32 != 0
}

TEST(GemvGpu, MoeFromQuantizedFloats) {
  FMOE_SKIP_WITHOUT_GPU();
  const int E = 8, N = 128, K = 2048;
  std::vector<float> w(size_t(E) * N * K);
  ref::fill_uniform(w.data(), int64_t(w.size()), 77, 1, 0.02f);
  const ref::WeightSet wq = ref::make_weights(Precision::nvfp4, w.data(), E, N, K);
  run_moe({E, N, K, 4, 4, DType::bf16, 0, false, 0}, seed_of({77}), &wq);
}

// NaN block scales: only the outputs that use them turn NaN (a token that did not pick the
// expert with the NaN row stays finite).
TEST(GemvGpu, NanScalesStayWhereTheyAre) {
  FMOE_SKIP_WITHOUT_GPU();
  {
    ref::WeightSet a = test::random_nvfp4(2, 40, 256, 5);
    const ref::WeightSet b = test::random_nvfp4(2, 1, 256, 6);
    a.block_scale[size_t(3) * 16 + 5] = 0x7F;           // matrix 0, row 3
    a.block_scale[size_t(40 + 17) * 16 + 0] = 0xFF;     // matrix 1, row 17
    DevNvfp4 da(a), db(b);
    DevOut out(DType::f32, 2, 40, false);
    GemvNvfp4Args args;
    args.a = da.qref();
    args.a_scale = da.sref();
    args.a_global = da.gref();
    args.b = dev_ref(db.q.get(), DType::e2m1x2, {2, 128}, {128, 1});
    args.b_scale = dev_ref(db.s.get(), DType::e4m3, {2, 16}, {16, 1});
    args.b_global = db.gref();
    args.c = out.ref();
    gemv_nvfp4(args, nullptr);
    const ref::GemvResult want = ref::gemv(a, &b, nullptr);
    ASSERT_TRUE(std::isnan(want.value[3]) && std::isnan(want.value[40 + 17]));
    out.check(want, "NaN scales, batched");
  }
  {
    ref::WeightSet w = test::random_nvfp4(4, 32, 256, 9);
    w.block_scale[(size_t(2) * 32 + 7) * 16 + 3] = 0x7F;  // expert 2, row 7
    MoeCase c{4, 32, 256, 2, 1, DType::f32};
    // make_routing is random; build a case where only token 0 picks expert 2.
    const ref::ActRows x = test::random_bf16_rows(2, 256, 10);
    const std::vector<int32_t> ids = {2, 1};
    const std::vector<float> wts = {0.5f, 0.75f};
    DevNvfp4 dw(w);
    DeviceBuffer x_dev = DeviceBuffer::from(x.bf16), ids_dev = DeviceBuffer::from(ids), w_dev = DeviceBuffer::from(wts);
    DevOut out(c.out, 2, 32, false);
    MoeGemvNvfp4Args args;
    args.w = dw.qref();
    args.w_scale = dw.sref();
    args.w_global = dw.gref();
    args.x = dev_ref(x_dev.get(), DType::bf16, {2, 256}, {256, 1});
    args.topk_ids = dev_ref(ids_dev.get(), DType::i32, {2, 1}, {1, 1});
    args.topk_weights = dev_ref(w_dev.get(), DType::f32, {2, 1}, {1, 1});
    args.y = out.ref();
    moe_gemv_nvfp4(args, nullptr);
    const ref::GemvResult want = ref::moe_gemv(w, x, ids.data(), wts.data(), 1);
    ASSERT_TRUE(std::isnan(want.value[7]) && std::isfinite(want.value[32 + 7]));
    out.check(want, "NaN scale in an expert only token 0 picked");
  }
}

// Same inputs, same bits: on a second run, with PDL, and replayed from a CUDA graph.
TEST(GemvGpu, DeterministicPdlAndGraphs) {
  FMOE_SKIP_WITHOUT_GPU();
  const BatchedCase c{4, 7168, 2048, true, DType::f16};
  const uint64_t seed = seed_of({7168, 2048, 4});
  const std::vector<uint8_t> first = run_batched(c, seed);
  EXPECT_EQ(run_batched(c, seed, false, false), first) << "second run differs";
  EXPECT_EQ(run_batched(c, seed, true, false), first) << "PDL run differs";
  const MoeCase m{32, 256, 2048, 4, 8, DType::bf16, 0, false, 0};
  const std::vector<uint8_t> moe_first = run_moe(m, seed);
  EXPECT_EQ(run_moe(m, seed, nullptr, true), moe_first) << "PDL MoE run differs";

  // Graph capture: enqueue on a capturing stream, replay twice.
  const ref::WeightSet a = test::random_nvfp4(2, 300, 1024, seed), b = test::random_nvfp4(2, 1, 1024, seed + 1);
  DevNvfp4 da(a), db(b);
  DevOut out(DType::f32, 2, 300, false);
  GemvNvfp4Args args;
  args.a = da.qref();
  args.a_scale = da.sref();
  args.a_global = da.gref();
  args.b = dev_ref(db.q.get(), DType::e2m1x2, {2, 512}, {512, 1});
  args.b_scale = dev_ref(db.s.get(), DType::e4m3, {2, 64}, {64, 1});
  args.b_global = db.gref();
  args.c = out.ref();
  cudaStream_t s;
  FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FMOE_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  gemv_nvfp4(args, s);
  FMOE_CUDA(cudaStreamEndCapture(s, &graph));
  FMOE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  FMOE_CUDA(cudaGraphLaunch(exec, s));
  FMOE_CUDA(cudaGraphLaunch(exec, s));
  FMOE_CUDA(cudaStreamSynchronize(s));
  out.check(ref::gemv(a, &b, nullptr), "graph replay");
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST(GemvGpu, RejectsMisalignedDevicePointers) {
  FMOE_SKIP_WITHOUT_GPU();
  DeviceBuffer q(4096), s(512), g(64), b(512), c(4096);
  GemvNvfp4Args args;
  args.a = dev_ref(q.get<uint8_t>() + 8, DType::e2m1x2, {1, 4, 128}, {512, 128, 1});
  args.a_scale = dev_ref(s.get(), DType::e4m3, {1, 4, 16}, {64, 16, 1});
  args.a_global = dev_ref(g.get(), DType::f32, {1}, {1});
  args.b = dev_ref(b.get(), DType::bf16, {1, 256}, {256, 1});
  args.c = dev_ref(c.get(), DType::f32, {1, 4}, {4, 1});
  test::expect_error([&] { gemv_nvfp4(args, nullptr); }, "a must be 16-byte aligned");
}
