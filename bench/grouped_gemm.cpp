// `fusedmoe bench --op nvfp4_grouped_gemm`: the NVFP4 x NVFP4 grouped GEMM
// (include/fusedmoe/grouped_gemm.hpp) on the four GPUMODE contest shapes, or one custom shape.
//
// Data: random floats quantized with fmt::quantize_nvfp4, one global scale per group and operand
// from its amax (fmt::nvfp4_global_scale), as the contest's inputs are made. Each shape is checked
// first: the output poisoned, every element must come out finite, and sampled rows of every group
// (first, middle, last) must match ref::nvfp4_grouped_gemm within the output rounding plus an fp32
// accumulation allowance (sum |a*b| from the same reference over the codes' magnitudes).
//
// Floors: bytes = B codes + scales of every group + A codes + scales + C (+ the globals and the
// offsets), over the copy ceiling; FLOPs = 2 * sum(M) * N * K over the dense BF16 rate (Hopper
// multiplies the decoded operands in bf16). Both ceilings are measured in the same run.
// Cold L2: the weights are prepared `copies` times (and A copied as often) and launch i uses copy
// i % copies, so the bytes one rotation reads are at least 3x the L2 (within a memory cap; the
// row says when not). Prepare time is the constructor's host wall clock: it re-lays B on the
// device and synchronizes, so it is what a caller waits for once per weight set.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/parallel.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/grouped_gemm.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::bench {
namespace {

constexpr double kColdL2Factor = 3.0;
constexpr double kPoolMemFraction = 0.45;  // prepared copies may use this share of free memory
constexpr int kMaxCopies = 32;
constexpr int kLaunchesPerGraph = 20;
constexpr int kMaxGroups = 512;  // Nvfp4GroupedGemm's limit (grouped_gemm.hpp)

struct Shape {
  std::string name;
  int N = 0, K = 0;
  std::vector<int> group_rows;  // M_g
  int G() const { return int(group_rows.size()); }
  int M() const {
    int m = 0;
    for (int r : group_rows) m += r;
    return m;
  }
};

// GPUMODE nvfp4 grouped GEMM, the four ranked shapes.
const std::vector<Shape> kContestShapes = {
    {"A", 4096, 7168, {80, 176, 128, 72, 64, 248, 96, 160}},
    {"B", 7168, 2048, {40, 76, 168, 72, 164, 148, 196, 160}},
    {"C", 3072, 4096, {192, 320}},
    {"D", 4096, 1536, {128, 384}},
};

struct OutType {
  DType dtype;
  double unit_roundoff;  // of one rounding to this type
};
OutType out_type(const std::string& name) {
  if (name == "f16") return {DType::f16, 0x1p-11};
  if (name == "f32") return {DType::f32, 0x1p-24};
  return {DType::bf16, 0x1p-8};
}

double out_at(const std::vector<uint8_t>& c, DType t, size_t i) {
  switch (t) {
    case DType::f16: return double(fmt::f16_to_float(reinterpret_cast<const uint16_t*>(c.data())[i]));
    case DType::f32: return double(reinterpret_cast<const float*>(c.data())[i]);
    default: return double(fmt::bf16_to_float(reinterpret_cast<const uint16_t*>(c.data())[i]));
  }
}

TensorRef dref(const void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorRef::contiguous(const_cast<void*>(p), t, shape, Device::cuda, 0);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// rows x K random floats (stream `stream` of `seed`) quantized to NVFP4 with their own global
// scale; codes and scales appended at q / s. Row-parallel: quantize_nvfp4 is row-independent
// once the global scale is known, and contest shape A's B is 235M values.
float quantize_random(int64_t rows, int K, uint64_t seed, uint64_t stream, uint8_t* q, uint8_t* s) {
  std::vector<float> x(size_t(rows) * size_t(K));
  ref::fill_uniform(x.data(), int64_t(x.size()), seed, stream, 1.0f);
  const float global = fmt::nvfp4_global_scale(fmt::abs_max(x.data(), int64_t(x.size())));
  detail::parallel_for(rows, [&](int64_t r0, int64_t r1) {
    fmt::quantize_nvfp4(x.data() + r0 * K, r1 - r0, K, global, q + r0 * (K / 2), s + r0 * (K / 16));
  }, 16);
  return global;
}

// The host side of one shape: quantized operands and their globals.
struct HostData {
  std::vector<uint8_t> a_q, a_s, b_q, b_s;  // [M, K/2], [M, K/16], [G, N, K/2], [G, N, K/16]
  std::vector<float> a_global, b_global;     // [G]
  std::vector<int32_t> offsets;              // [G + 1]
};

HostData make_host_data(const Shape& sh, uint64_t seed) {
  const int G = sh.G(), N = sh.N, K = sh.K, M = sh.M();
  HostData h;
  h.a_q.resize(size_t(M) * (K / 2));
  h.a_s.resize(size_t(M) * (K / 16));
  h.b_q.resize(size_t(G) * N * (K / 2));
  h.b_s.resize(size_t(G) * N * (K / 16));
  h.a_global.resize(size_t(G));
  h.b_global.resize(size_t(G));
  h.offsets = {0};
  for (int g = 0; g < G; ++g) {
    const int64_t r0 = h.offsets.back(), rows = sh.group_rows[size_t(g)];
    h.offsets.push_back(int32_t(r0 + rows));
    h.a_global[size_t(g)] = quantize_random(rows, K, seed, 2 * uint64_t(g), h.a_q.data() + r0 * (K / 2),
                                            h.a_s.data() + r0 * (K / 16));
    h.b_global[size_t(g)] = quantize_random(N, K, seed, 2 * uint64_t(g) + 1,
                                            h.b_q.data() + size_t(g) * N * (K / 2),
                                            h.b_s.data() + size_t(g) * N * (K / 16));
  }
  return h;
}

// The reference on sampled rows: every group's first, middle and last row, all N columns, with
// sum |a*b| for the tolerance. Computed once per shape; every prepared copy is checked against it.
struct Sampled {
  std::vector<int> rows;       // [R] rows of A and c
  std::vector<float> want;     // [R, N]
  std::vector<float> abs_sum;  // [R, N] sum |a*b| times the globals
};

Sampled sample_reference(const Shape& sh, const HostData& h) {
  const int G = sh.G(), N = sh.N, K = sh.K;
  Sampled out;
  std::vector<int32_t> sub_offsets = {0};
  for (int g = 0; g < G; ++g) {
    const int r0 = h.offsets[size_t(g)], r1 = h.offsets[size_t(g) + 1];
    for (int r : {r0, (r0 + r1) / 2, r1 - 1})  // non-decreasing: a repeat is the previous one
      if (r >= r0 && r < r1 && (int(out.rows.size()) == sub_offsets.back() || out.rows.back() != r))
        out.rows.push_back(r);
    sub_offsets.push_back(int32_t(out.rows.size()));
  }
  const int R = int(out.rows.size());
  std::vector<uint8_t> a_q(size_t(R) * (K / 2)), a_s(size_t(R) * (K / 16));
  for (int i = 0; i < R; ++i) {
    std::copy_n(h.a_q.data() + size_t(out.rows[size_t(i)]) * (K / 2), K / 2, a_q.data() + size_t(i) * (K / 2));
    std::copy_n(h.a_s.data() + size_t(out.rows[size_t(i)]) * (K / 16), K / 16, a_s.data() + size_t(i) * (K / 16));
  }
  out.want = ref::nvfp4_grouped_gemm(a_q.data(), a_s.data(), h.a_global.data(), sub_offsets.data(), G, R,
                                     h.b_q.data(), h.b_s.data(), h.b_global.data(), N, K);
  // sum |a*b| * globals: the same reference over the codes' magnitudes (each E2M1 sign bit
  // cleared; the quantizer's block scales and the globals are never negative).
  std::vector<uint8_t> b_abs(h.b_q);
  for (uint8_t& v : a_q) v &= 0x77;
  for (uint8_t& v : b_abs) v &= 0x77;
  out.abs_sum = ref::nvfp4_grouped_gemm(a_q.data(), a_s.data(), h.a_global.data(), sub_offsets.data(), G, R,
                                        b_abs.data(), h.b_s.data(), h.b_global.data(), N, K);
  return out;
}

// Checks c (the op's whole output, poisoned before the call): every element finite, the sampled
// rows within one output rounding plus an fp32 accumulation allowance. Throws naming the worst.
void verify(const Shape& sh, const Sampled& ref_rows, const std::vector<uint8_t>& c,
            const OutType& out, int copy) {
  const int N = sh.N, M = sh.M();
  for (size_t i = 0; i < size_t(M) * N; ++i)
    FMOE_REQUIRE(std::isfinite(out_at(c, out.dtype, i)), "bench nvfp4_grouped_gemm: shape %s copy %d: "
                 "c[%zu, %zu] is not finite (left unwritten?): the kernel is wrong, not timing it",
                 sh.name.c_str(), copy, i / size_t(N), i % size_t(N));
  double worst_excess = -1;
  size_t worst = 0;
  int bad = 0;
  const int R = int(ref_rows.rows.size());
  for (int i = 0; i < R; ++i)
    for (int n = 0; n < N; ++n) {
      const size_t o = size_t(i) * N + n;
      const double w = double(ref_rows.want[o]), s = double(ref_rows.abs_sum[o]);
      const double got = out_at(c, out.dtype, size_t(ref_rows.rows[size_t(i)]) * N + n);
      // One output rounding, plus fp32 accumulation over K and the fp32 global product.
      const double tol = out.unit_roundoff * std::fabs(w) + 64 * 0x1p-24 * s + 1e-30;
      const double err = std::fabs(got - w);
      if (err > tol) {
        ++bad;
        if (err - tol > worst_excess) {
          worst_excess = err - tol;
          worst = o;
        }
      }
    }
  if (bad > 0) {
    const int row = ref_rows.rows[worst / size_t(N)], n = int(worst % size_t(N));
    FMOE_REQUIRE(false, "bench nvfp4_grouped_gemm: shape %s copy %d: %d of %d sampled outputs differ "
                 "from ref::nvfp4_grouped_gemm; worst c[%d, %d]: got %.9g, want %.9g (sum |a*b| "
                 "%.6g): the kernel is wrong, not timing it", sh.name.c_str(), copy, bad, R * N, row, n,
                 out_at(c, out.dtype, size_t(row) * N + n), double(ref_rows.want[worst]),
                 double(ref_rows.abs_sum[worst]));
  }
}

struct ShapeResult {
  std::vector<std::pair<std::string, double>> median_us;  // (mode, µs)
};

ShapeResult bench_shape(const Context& ctx, const Shape& sh, const OutType& out,
                        const std::vector<std::string>& l2_modes, uint64_t seed) {
  const Ceilings& ceil = *ctx.ceil;
  const int G = sh.G(), N = sh.N, K = sh.K, M = sh.M();
  std::string rows_text;
  for (int r : sh.group_rows) rows_text += (rows_text.empty() ? "" : ",") + std::to_string(r);
  const auto t_gen = std::chrono::steady_clock::now();
  const HostData h = make_host_data(sh, seed);
  const double gen_s = seconds_since(t_gen);

  // Device operands: B raw once (each prepared copy reads it), A per copy (below).
  const DeviceBuffer d_bq = DeviceBuffer::from(h.b_q), d_bs = DeviceBuffer::from(h.b_s),
                     d_bg = DeviceBuffer::from(h.b_global), d_ag = DeviceBuffer::from(h.a_global),
                     d_off = DeviceBuffer::from(h.offsets);
  const TensorRef b = dref(d_bq.get(), DType::e2m1x2, {G, N, K / 2});
  const TensorRef b_scale = dref(d_bs.get(), DType::e4m3, {G, N, K / 16});
  const TensorRef b_global = dref(d_bg.get(), DType::f32, {G});

  const double a_bytes = double(M) * (K / 2 + K / 16);
  const double b_bytes = double(G) * N * (K / 2 + K / 16);
  const double c_bytes = double(M) * N * double(dtype_bytes(out.dtype));
  const double small_bytes = 8.0 * G + 4.0 * (G + 1);  // globals, offsets
  const double bytes = a_bytes + b_bytes + c_bytes + small_bytes;
  const double flops = 2.0 * M * double(N) * K;

  // The first copy, timed: the prepare cost a caller pays once per weight set (its first call
  // in a process also loads the module).
  std::vector<Nvfp4GroupedGemm> gemms;
  gemms.reserve(kMaxCopies);
  std::vector<double> prepare_ms;
  auto prepare = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    gemms.emplace_back(b, b_scale, b_global, ctx.stream);
    prepare_ms.push_back(1e3 * seconds_since(t0));
  };
  prepare();
  const double prepared = double(gemms[0].prepared_bytes());
  size_t free_bytes = 0, total = 0;
  FMOE_CUDA(cudaMemGetInfo(&free_bytes, &total));
  const bool any_cold = std::find(l2_modes.begin(), l2_modes.end(), "cold") != l2_modes.end();
  const int wanted = any_cold ? std::max(1, int(std::ceil(kColdL2Factor * ceil.l2_bytes / bytes))) : 1;
  const int fit = 1 + int(kPoolMemFraction * double(free_bytes) / (prepared + a_bytes));
  const int copies = std::min({wanted, kMaxCopies, fit});
  while (int(gemms.size()) < copies) prepare();

  std::vector<DeviceBuffer> d_aq, d_as;
  for (int i = 0; i < copies; ++i) {
    d_aq.push_back(DeviceBuffer::from(h.a_q));
    d_as.push_back(DeviceBuffer::from(h.a_s));
  }
  DeviceBuffer d_c{size_t(c_bytes)}, workspace{gemms[0].workspace_size(M)};
  auto make_args = [&](int i, bool validate) {
    Nvfp4GroupedGemmArgs a;
    a.a = dref(d_aq[size_t(i)].get(), DType::e2m1x2, {M, K / 2});
    a.a_scale = dref(d_as[size_t(i)].get(), DType::e4m3, {M, K / 16});
    a.a_global = dref(d_ag.get(), DType::f32, {G});
    a.offsets = dref(d_off.get(), DType::i32, {G + 1});
    a.c = dref(d_c.get(), out.dtype, {M, N});
    a.validate_offsets = validate;
    return a;
  };

  std::vector<double> later(prepare_ms.begin() + 1, prepare_ms.end());
  std::sort(later.begin(), later.end());
  std::printf("# %s: G=%d N=%d K=%d M=%d (%s), out %s; data drawn in %.1f s; prepare "
              "(Nvfp4GroupedGemm constructor, host wall clock incl. device re-layout and sync): "
              "%.2f ms first%s; prepared B %.1f MB, workspace %.1f MB; %d cop%s rotated (%d wanted "
              "for cold L2)\n", sh.name.c_str(), G, N, K, M, rows_text.c_str(), dtype_name(out.dtype),
              gen_s, prepare_ms[0],
              later.empty() ? "" : strf(", %.2f ms median of the other %zu", later[later.size() / 2],
                                        later.size()).c_str(),
              prepared / 1e6, double(workspace.bytes()) / 1e6, copies, copies == 1 ? "y" : "ies", wanted);
  std::fflush(stdout);
  {
    Row pr;
    pr.op = "nvfp4_grouped_gemm.prepare";
    pr.shape = sh.name;
    pr.mode = "host_wall";
    pr.tokens = M;
    pr.t.median_us = 1e3 * prepare_ms[0];
    pr.t.p10_us = pr.t.p90_us = pr.t.median_us;
    pr.t.samples = 1;
    pr.weight_bytes = prepared;
    pr.note = "first Nvfp4GroupedGemm constructor, host wall clock (re-lays B on the device, syncs)";
    ctx.rows->push_back(pr);
  }

  // Every copy is checked: each is its own preparation of the weights (and its own A).
  const Sampled ref_rows = sample_reference(sh, h);
  for (int i = 0; i < copies; ++i) {
    d_c.fill(0xFF);
    gemms[size_t(i)].run(make_args(i, true), workspace.get(), workspace.bytes(), ctx.stream);
    FMOE_CUDA(cudaStreamSynchronize(ctx.stream));
    verify(sh, ref_rows, d_c.to_host<uint8_t>(), out, i);
  }

  ShapeResult res;
  const int per_graph = copies * ((kLaunchesPerGraph + copies - 1) / copies);
  for (const std::string& mode : l2_modes) {
    const int rotate = mode == "cold" ? copies : 1;
    Row r;
    r.op = "nvfp4_grouped_gemm";
    r.shape = strf("%s g%d n%d k%d", sh.name.c_str(), G, N, K);
    r.config = std::string("out_") + dtype_name(out.dtype);
    r.mode = mode;
    r.tokens = M;
    // validate_offsets off: the check is a host sync that a graph cannot hold (and the offsets
    // were checked above).
    r.t = time_graph([&](cudaStream_t s, int i) {
      gemms[size_t(i % rotate)].run(make_args(i % rotate, false), workspace.get(), workspace.bytes(), s);
    }, ctx.stream, per_graph);
    r.flops = flops;
    r.bytes = bytes;
    r.weight_bytes = b_bytes;
    set_floor(r, ceil, "bf16");
    const double byte_us = bytes / (ceil.copy_gbps * 1e9) * 1e6;
    const double flop_us = flops / (ceil.bf16_tflops * 1e12) * 1e6;
    r.note = strf("byte floor %.2f us, bf16 floor %.2f us, spread p90/p10 %.3f", byte_us, flop_us,
                  r.t.p10_us > 0 ? r.t.p90_us / r.t.p10_us : 0.0);
    if (mode == "cold" && copies < wanted) r.note += strf(", L2 partly warm: %d of %d copies fit", copies, wanted);
    print_row(r, ceil);
    ctx.rows->push_back(r);
    res.median_us.emplace_back(mode, r.t.median_us);
  }
  // The last replay's output: still finite after the graph replays.
  const std::vector<uint8_t> c_last = d_c.to_host<uint8_t>();
  for (size_t i = 0; i < size_t(M) * N; ++i)
    FMOE_REQUIRE(std::isfinite(out_at(c_last, out.dtype, i)), "bench nvfp4_grouped_gemm: shape %s: "
                 "c[%zu] is not finite after the timed replays", sh.name.c_str(), i);
  return res;
}

// The custom shape's options, checked before the GPU is touched (BenchOp::check) and read by run.
bool custom_shape_given(const cli::Args& args) {
  return args.has("groups") || args.has("n") || args.has("k") || args.has("m");
}

Shape custom_shape(const cli::Args& args) {
  const std::string shapes = args.str("shapes", custom_shape_given(args) ? "custom" : "contest");
  if (shapes == "contest" && custom_shape_given(args))
    throw cli::UsageError("--groups, --n, --k and --m describe a custom shape: give them without "
                          "--shapes contest (or with --shapes custom)");
  Shape s;
  s.name = "custom";
  if (shapes != "custom") return s;
  for (const char* need : {"n", "k", "m"})
    if (!args.has(need))
      throw cli::UsageError(strf("a custom shape needs --n, --k and --m; --%s is missing", need));
  s.N = int(args.integer("n", 0, 1, 1 << 20));
  s.K = int(args.integer("k", 0, 16, 1 << 20));
  if (s.K % 16 != 0)
    throw cli::UsageError(strf("--k must be a multiple of 16 (one E4M3 scale per 16 values), got %d", s.K));
  const std::vector<long long> m = args.int_list("m", {}, 0, 1 << 20);
  const int G = int(args.integer("groups", (long long)m.size(), 1, kMaxGroups));
  if (m.size() == 1) {
    s.group_rows.assign(size_t(G), int(m[0]));  // --groups 8 --m 128: eight groups of 128
  } else if (int(m.size()) == G) {
    for (long long v : m) s.group_rows.push_back(int(v));
  } else {
    throw cli::UsageError(strf("--m gives %zu group sizes but --groups is %d (give one size for "
                               "every group, or a single size for all)", m.size(), G));
  }
  if (s.G() > kMaxGroups)
    throw cli::UsageError(strf("--m gives %d groups; at most %d", s.G(), kMaxGroups));
  if (s.M() < 1) throw cli::UsageError("--m: the groups need at least one row in all");
  return s;
}

void check(const cli::Args& args) { custom_shape(args); }

void run(const Context& ctx, const cli::Args& args) {
  const Shape custom = custom_shape(args);
  const std::vector<Shape> shapes = custom.G() > 0 ? std::vector<Shape>{custom} : kContestShapes;
  const OutType out = out_type(args.str("out", "bf16"));
  const std::string l2 = args.str("l2", "cold");
  const std::vector<std::string> l2_modes =
      l2 == "both" ? std::vector<std::string>{"cold", "warm"} : std::vector<std::string>{l2};
  const uint64_t seed = uint64_t(args.integer("seed", 1, 0, 1ll << 62));

  std::vector<ShapeResult> results;
  for (const Shape& sh : shapes) results.push_back(bench_shape(ctx, sh, out, l2_modes, seed));
  // The contest ranks by the geometric mean of the shapes' times.
  for (size_t j = 0; j < l2_modes.size(); ++j) {
    double log_sum = 0;
    for (const ShapeResult& r : results) log_sum += std::log(r.median_us[j].second);
    std::printf("# geomean of the median times over %zu shape%s (%s L2): %.2f us\n", results.size(),
                results.size() == 1 ? "" : "s", l2_modes[j].c_str(),
                std::exp(log_sum / double(results.size())));
  }
  std::fflush(stdout);
}

using Kind = BenchOption::Kind;
const Register kRegister({"nvfp4_grouped_gemm",
                          "NVFP4 x NVFP4 grouped GEMM (Nvfp4GroupedGemm): the GPUMODE contest "
                          "shapes, or one custom shape",
                          {{"shapes", "contest|custom", "contest: shapes A-D; custom: the one --groups/--n/--k/"
                            "--m give (default contest, custom when those are given)",
                            Kind::choice, {"contest", "custom"}},
                           {"groups", "G", "custom: number of groups in [1, 512] (default: the "
                            "length of --m)", Kind::integer, {}, 1, kMaxGroups},
                           {"n", "N", "custom: output columns", Kind::integer, {}, 1, 1 << 20},
                           {"k", "K", "custom: reduction length, a multiple of 16", Kind::integer,
                            {}, 16, 1 << 20},
                           {"m", "LIST", "custom: rows of each group (comma-separated), or one "
                            "size for all --groups", Kind::int_list, {}, 0, 1 << 20},
                           {"out", "bf16|f16|f32", "output type (default bf16)", Kind::choice,
                            {"bf16", "f16", "f32"}},
                           {"l2", "cold|warm|both", "cold: rotate prepared copies past the L2 "
                            "(default cold)", Kind::choice, {"cold", "warm", "both"}},
                           {"seed", "N", "seed of the random operands (default 1)", Kind::integer,
                            {}, 0, 1ll << 62}},
                          run, check});

}  // namespace
}  // namespace fusedmoe::bench
