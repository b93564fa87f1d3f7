// The fused RMSNorm + quantize on the GPU against the CPU reference: every output form, with and
// without the residual, T = 0, 1, 7, 128, 1000, H = 16 .. 7168 and past the register configs, odd
// row strides and misaligned pointers (the generic kernel), every compiled config forced, in-place
// output, non-finite inputs, determinism, PDL and graphs, and every class of bad argument.
//
// How outputs are compared: the kernel's fp32 inv_rms differs from the double reference's in the
// last bits (summation order), and near a rounding boundary one ulp of y flips a bf16, E4M3 or
// E2M1 code. So the kernel exposes the inv_rms it used (RmsNormQuantArgs::inv_rms): the test
// checks that inv_rms against the double reference within a bound derived from the fp32 summation
// (tight enough to catch a dropped or doubled value), then recomputes the outputs on the host from
// the kernel's inv_rms with the kernel's fp32 operations and the fmt:: quantizers, and requires
// every code, scale, bf16 value and the residual write-back to match bit for bit. A relative-L2
// check of the dequantized outputs against the all-double reference sits on top (it does not
// depend on the kernel's inv_rms). Every byte around the outputs is poisoned (0xFF) and must stay.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "common/device_buffer.hpp"
#include "common/env.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/norm.hpp"
#include "norm/norm_config.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using ref::NormOutForm;

namespace {

// Print every config choice (stderr), so the logs say which kernel each case ran.
[[maybe_unused]] const int kPrintConfig = (detail::knobs().print_config = true, 0);

using test::dev_ref;

const char* form_name(NormOutForm f) { return f == NormOutForm::bf16 ? "bf16" : f == NormOutForm::fp8 ? "fp8" : "nvfp4"; }

// A [rows, cols] tensor of eb-byte elements at row stride ld (elements), `offset` bytes into its
// allocation; every other byte of the allocation is 0xFF. `image` is what the device holds.
struct Dev2d {
  int64_t rows = 0, cols = 0, ld = 0;
  size_t eb = 1, offset = 0;
  std::vector<uint8_t> image;
  DeviceBuffer buf;
  Dev2d(int64_t r, int64_t c, int64_t ld_, size_t eb_, size_t off = 0) : rows(r), cols(c), ld(ld_), eb(eb_), offset(off) {
    image.assign(offset + size_t(std::max<int64_t>(rows * ld, 1)) * eb + 16, 0xFF);
    buf.resize(image.size());
  }
  void* ptr() const { return buf.get<uint8_t>() + offset; }
  size_t at(int64_t r, int64_t c) const { return offset + size_t(r * ld + c) * eb; }
  void upload(const void* dense) {  // dense [rows, cols]
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(image.data() + at(r, 0), static_cast<const uint8_t*>(dense) + size_t(r * cols) * eb, size_t(cols) * eb);
    buf.upload(image.data(), image.size());
  }
  void upload_poison() { buf.upload(image.data(), image.size()); }
  // The device contents: `dense` gets the elements; returns how many bytes outside them differ
  // from `image` (i.e. were written).
  size_t download(std::vector<uint8_t>& dense) const {
    std::vector<uint8_t> got(image.size());
    FMOE_CUDA(cudaMemcpy(got.data(), buf.get(), got.size(), cudaMemcpyDeviceToHost));
    dense.assign(size_t(rows * cols) * eb, 0);
    std::vector<char> inside(got.size(), 0);
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(dense.data() + size_t(r * cols) * eb, got.data() + at(r, 0), size_t(cols) * eb);
      std::fill(inside.begin() + long(at(r, 0)), inside.begin() + long(at(r, 0) + size_t(cols) * eb), 1);
    }
    size_t touched = 0;
    for (size_t i = 0; i < got.size(); ++i) touched += !inside[i] && got[i] != image[i];
    return touched;
  }
  TensorRef ref(DType t) const { return dev_ref(ptr(), t, {rows, cols}, {ld, 1}); }
};

struct Case {
  int T = 1, H = 64;
  NormOutForm form = NormOutForm::bf16;
  bool residual = false;
  int x_pad = 0, res_pad = 0, out_pad = 0, scale_pad = 0;  // extra elements per row
  int w_offset = 0;                                          // weight starts this many elements in
  int inv_stride = 2;                                        // inv_rms stride (elements)
  bool in_place = false;                                     // bf16 out written into x
  bool pdl = false;
};

std::string describe(const Case& c, uint64_t seed) {
  return strf("T=%d H=%d out=%s residual=%d pads x/res/out/scale=%d/%d/%d/%d w+%d%s%s seed=%llu", c.T, c.H,
              form_name(c.form), int(c.residual), c.x_pad, c.res_pad, c.out_pad, c.scale_pad, c.w_offset,
              c.in_place ? " in-place" : "", c.pdl ? " pdl" : "", (unsigned long long)seed);
}

// Inputs: bf16 values, each row scaled by a power of two from 2^-6 to 2^6 (so the scales vary
// over rows), every 11th row all zeros (zero blocks and scales).
struct Inputs {
  std::vector<float> x, res, w;
  float global = 1.0f;
  // Extra poison, set by the non-finite test: (index, value) pairs into x and w.
  std::vector<std::pair<size_t, float>> x_bad, w_bad;
};

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  const int64_t n = int64_t(c.T) * c.H;
  in.x = ref::random_bf16(n, seed, 1, 1.0f);
  in.res = ref::random_bf16(n, seed, 2, 1.0f);
  in.w = ref::random_bf16(c.H, seed, 3, 1.0f);
  for (int t = 0; t < c.T; ++t) {
    const float s = std::ldexp(1.0f, int(ref::hash3(seed, 4, uint64_t(t)) % 13) - 6);
    for (int h = 0; h < c.H; ++h) {
      const size_t i = size_t(t) * c.H + h;
      in.x[i] = t % 11 == 10 ? 0.0f : in.x[i] * s;
      in.res[i] = t % 11 == 10 ? 0.0f : in.res[i] * s;
    }
  }
  return in;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = fmt::bf16_from_float(v[i]);
  return b;
}

bool same_bf16(uint16_t a, uint16_t b) {
  const bool na = std::isnan(fmt::bf16_to_float(a)), nb = std::isnan(fmt::bf16_to_float(b));
  return na || nb ? na && nb : a == b;
}

// The relative bound on the kernel's inv_rms: fp32 sums of non-negative terms have relative error
// at most (number of additions in the longest chain) * 2^-24; a thread adds at most H/32 + 8 of
// them, then 5 shuffle levels and at most 32 warp partials; the mean, eps, sqrt and reciprocal
// add 4 roundings; inv_rms moves by half the sum's relative error. A dropped or doubled value
// moves it by 1/(2H) of the row's mean square, far more for every H tested with average rows.
double inv_rms_bound(int H) { return (0.5 * (double(H) / 32 + 8 + 5 + 32) + 4) * 0x1p-24; }

struct NormRun {
  std::vector<uint8_t> out, scale, res, x_after, inv;  // device results, dense
};

// Runs one case on `in` and checks it (unless !check); the device results go to *result when
// given (determinism checks).
void run_case(const Case& c, uint64_t seed, Inputs in, bool check = true, NormRun* result = nullptr) {
  const std::string ctx = describe(c, seed);
  SCOPED_TRACE(ctx);
  // The kernel reads bf16: the reference must see the same values (1e20 is not one).
  for (auto [i, v] : in.x_bad) in.x[i] = fmt::round_to_bf16(v);
  for (auto [i, v] : in.w_bad) in.w[i] = fmt::round_to_bf16(v);
  const int T = c.T, H = c.H;
  // The double reference; the nvfp4 global scale as a calibration would set it (amax / (6 * 448)).
  const ref::RmsNormQuantResult want_d =
      ref::rmsnorm_quant(in.x.data(), c.residual ? in.res.data() : nullptr, in.w.data(), T, H, 1e-6f, NormOutForm::bf16);
  if (c.form == NormOutForm::nvfp4 && in.global == 1.0f) {
    float amax = 0;
    for (float y : want_d.y)
      if (std::isfinite(y)) amax = std::max(amax, std::fabs(y));
    in.global = fmt::nvfp4_global_scale(amax);
  }

  const bool nv = c.form == NormOutForm::nvfp4, f8 = c.form == NormOutForm::fp8;
  const int64_t out_cols = nv ? H / 2 : H, scale_cols = f8 ? (H + 127) / 128 : H / 16;
  const size_t out_eb = c.form == NormOutForm::bf16 ? 2 : 1;
  Dev2d x(T, H, H + c.x_pad, 2), res(T, H, H + c.res_pad, 2), w(1, H, H, 2, size_t(c.w_offset) * 2);
  Dev2d out(T, out_cols, out_cols + c.out_pad, out_eb), scale(T, scale_cols, scale_cols + c.scale_pad, f8 ? 4 : 1);
  Dev2d inv(T, 1, c.inv_stride, 4), global(1, 1, 1, 4);
  const std::vector<uint16_t> xb = to_bf16_bits(in.x), rb = to_bf16_bits(in.res), wb = to_bf16_bits(in.w);
  x.upload(xb.data());
  res.upload(rb.data());
  w.upload(wb.data());
  out.upload_poison();
  scale.upload_poison();
  inv.upload_poison();
  global.upload(&in.global);

  RmsNormQuantArgs a;
  a.x = x.ref(DType::bf16);
  if (c.residual) a.residual = res.ref(DType::bf16);
  a.weight = dev_ref(w.ptr(), DType::bf16, {H}, {1});
  a.eps = 1e-6f;
  a.out = c.in_place ? x.ref(DType::bf16) : out.ref(c.form == NormOutForm::bf16 ? DType::bf16 : f8 ? DType::e4m3 : DType::e2m1x2);
  if (!c.in_place && c.form != NormOutForm::bf16) a.out_scale = scale.ref(f8 ? DType::f32 : DType::e4m3);
  if (nv) a.global_scale = dev_ref(global.ptr(), DType::f32, {1}, {1});
  a.inv_rms = dev_ref(inv.ptr(), DType::f32, {T}, {c.inv_stride});
  a.pdl = c.pdl;
  rmsnorm_quant(a, nullptr);
  FMOE_CUDA(cudaGetLastError());
  FMOE_CUDA(cudaDeviceSynchronize());

  NormRun local;
  NormRun& run = result ? *result : local;
  EXPECT_EQ(inv.download(run.inv), 0u) << "bytes between the inv_rms elements were written";
  EXPECT_EQ(x.download(run.x_after), 0u) << "bytes around x were written";
  EXPECT_EQ(res.download(run.res), 0u) << "bytes around residual were written";
  if (!c.in_place) {
    EXPECT_EQ(out.download(run.out), 0u) << "bytes around out were written";
    EXPECT_EQ(scale.download(run.scale), 0u) << "bytes around out_scale were written";
  } else {
    run.out = run.x_after;
  }
  if (!check) return;

  // 1. inv_rms against the double reference.
  std::vector<float> inv_k(static_cast<size_t>(T));
  std::memcpy(inv_k.data(), run.inv.data(), size_t(T) * 4);
  const double bound = inv_rms_bound(H);
  for (int t = 0; t < T; ++t) {
    const double d = want_d.inv_rms[size_t(t)], k = inv_k[size_t(t)];
    if (std::isnan(d)) {
      ASSERT_TRUE(std::isnan(k)) << "row " << t << ": inv_rms " << k << ", want NaN (a poisoned row)";
      continue;
    }
    ASSERT_LE(std::fabs(k - d), bound * d) << "row " << t << ": inv_rms " << std::hexfloat << k << " want " << d
                                           << std::defaultfloat << " (relative error " << std::fabs(k - d) / d
                                           << ", bound " << bound << ")";
  }

  // 2. Bit for bit against the reference computed from the kernel's inv_rms.
  const ref::RmsNormQuantResult want = ref::rmsnorm_quant(
      in.x.data(), c.residual ? in.res.data() : nullptr, in.w.data(), T, H, 1e-6f, c.form, in.global, inv_k.data());
  if (c.residual) {
    const uint16_t* got = reinterpret_cast<const uint16_t*>(run.res.data());
    for (int64_t i = 0; i < int64_t(T) * H; ++i)
      ASSERT_TRUE(same_bf16(got[i], fmt::bf16_from_float(want.h[size_t(i)])))
          << "residual write-back at row " << i / H << " col " << i % H << ": got 0x" << std::hex << got[i]
          << " want 0x" << fmt::bf16_from_float(want.h[size_t(i)]);
  } else {
    EXPECT_EQ(std::memcmp(run.res.data(), rb.data(), run.res.size()), 0) << "residual was written, but none was given";
  }
  if (!c.in_place) {
    std::vector<uint8_t> x_dense(xb.size() * 2);
    std::memcpy(x_dense.data(), xb.data(), x_dense.size());
    EXPECT_TRUE(run.x_after == x_dense) << "x was modified";
  }
  if (c.form == NormOutForm::bf16) {
    const uint16_t* got = reinterpret_cast<const uint16_t*>(run.out.data());
    for (int64_t i = 0; i < int64_t(T) * H; ++i)
      ASSERT_TRUE(same_bf16(got[i], want.out_bf16[size_t(i)]))
          << "out at row " << i / H << " col " << i % H << ": got " << fmt::bf16_to_float(got[i]) << " want "
          << fmt::bf16_to_float(want.out_bf16[size_t(i)]) << " (y " << want.y[size_t(i)] << ")";
  } else if (f8) {
    const float* s = reinterpret_cast<const float*>(run.scale.data());
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < scale_cols; ++b) {
        const float gs = s[t * scale_cols + b], ws = want.fp8_scale[size_t(t * scale_cols + b)];
        ASSERT_TRUE(std::isnan(ws) ? std::isnan(gs) : std::memcmp(&gs, &ws, 4) == 0)
            << "fp8 scale row " << t << " block " << b << ": got " << gs << " want " << ws;
        if (std::isnan(ws)) continue;  // codes of a poisoned block are unspecified
        for (int col = 128 * b; col < std::min(H, 128 * b + 128); ++col) {
          const size_t i = size_t(t) * H + col;
          ASSERT_EQ(run.out[i], want.q[i]) << "fp8 code row " << t << " col " << col << " (y " << want.y[i]
                                           << ", scale " << ws << ")";
        }
      }
  } else {
    for (int t = 0; t < T; ++t)
      for (int b = 0; b < scale_cols; ++b) {
        const uint8_t gs = run.scale[size_t(t * scale_cols + b)], ws = want.nvfp4_scale[size_t(t * scale_cols + b)];
        ASSERT_TRUE((ws & 0x7F) == 0x7F ? (gs & 0x7F) == 0x7F : gs == ws)
            << "nvfp4 scale row " << t << " block " << b << ": got 0x" << std::hex << int(gs) << " want 0x" << int(ws);
        for (int j = 0; j < 8; ++j) {
          const size_t i = size_t(t) * (H / 2) + size_t(b) * 8 + j;
          const size_t y0 = size_t(t) * H + size_t(16 * b + 2 * j);
          ASSERT_EQ(run.out[i], want.q[i]) << "nvfp4 code pair row " << t << " cols " << 16 * b + 2 * j << ", "
                                           << 16 * b + 2 * j + 1 << " (y " << want.y[y0] << ", " << want.y[y0 + 1]
                                           << ", scale 0x" << std::hex << int(ws) << ")";
        }
      }
  }

  // 3. Dequantized output against the all-double reference: relative L2 over the finite rows.
  double err2 = 0, ref2 = 0;
  for (int t = 0; t < T; ++t) {
    if (std::isnan(want_d.inv_rms[size_t(t)])) continue;
    for (int col = 0; col < H; ++col) {
      const size_t i = size_t(t) * H + col;
      const double yd = want_d.y[i];
      if (!std::isfinite(yd)) continue;
      double got;
      if (c.form == NormOutForm::bf16) {
        got = fmt::bf16_to_float(reinterpret_cast<const uint16_t*>(run.out.data())[i]);
      } else if (f8) {
        got = double(fmt::e4m3_to_float(run.out[i])) * reinterpret_cast<const float*>(run.scale.data())[t * scale_cols + col / 128];
      } else {
        const uint8_t byte = run.out[size_t(t) * (H / 2) + col / 2];
        got = double(fmt::e2m1_to_float(col % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 15))) *
              double(fmt::e4m3_to_float(run.scale[size_t(t * scale_cols + col / 16)])) * in.global;
      }
      if (!std::isfinite(got)) continue;  // a poisoned block (checked bit for bit above)
      err2 += (got - yd) * (got - yd);
      ref2 += yd * yd;
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : 0.0;
  const double rel_bound = c.form == NormOutForm::bf16 ? 0x1p-8 : f8 ? 0.05 : 0.2;
  EXPECT_LE(rel, rel_bound) << "dequantized output vs the double reference: relative L2 " << rel;
}

uint64_t seed_of(std::initializer_list<long long> v) { return test::seeds_for(test::hash_ints(v))[2]; }

struct ForceConfig : detail::ScopedKnob<std::string> {
  explicit ForceConfig(const char* name) : ScopedKnob(&detail::Knobs::force_config, name) {}
};

constexpr NormOutForm kForms[] = {NormOutForm::bf16, NormOutForm::fp8, NormOutForm::nvfp4};

}  // namespace

// Every form, with and without residual, over the token counts and hidden sizes of the brief
// (4112 = 4096 + 16: rows that are not a multiple of 128 or of the warp's step).
TEST(NormGpu, ShapesFormsResidual) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int T : {0, 1, 7, 128, 1000})
    for (int H : {16, 48, 2048, 7168, 4112})
      for (NormOutForm f : kForms)
        for (bool r : {false, true}) {
          Case c;
          c.T = T;
          c.H = H;
          c.form = f;
          c.residual = r;
          const uint64_t seed = seed_of({T, H, int(f), r});
          run_case(c, seed, make_inputs(c, seed));
        }
}

// Odd row strides and misaligned pointers: the generic kernel; padded but aligned rows: the fast one.
TEST(NormGpu, StridesAndAlignment) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Layout {
    int x_pad, res_pad, out_pad, scale_pad, w_offset, inv_stride;
  };
  const Layout layouts[] = {
      {8, 16, 8, 3, 0, 1},   // padded, 16-byte aligned rows: fast
      {1, 0, 0, 0, 0, 3},    // odd x stride: generic
      {0, 3, 0, 1, 0, 2},    // odd residual stride: generic
      {0, 0, 5, 2, 0, 2},    // bf16 out rows 10 bytes apart (fp8: 5, nvfp4: 5): generic
      {0, 0, 4, 0, 0, 2},    // out rows 8 / 4 bytes past alignment: fast for fp8 and nvfp4
      {0, 0, 0, 0, 1, 2},    // weight 2 bytes off: generic
      {24, 40, 16, 7, 8, 5}, // everything padded, weight 16 bytes in: fast
  };
  int li = 0;
  for (const Layout& l : layouts) {
    for (int H : {48, 2048, 7168})
      for (NormOutForm f : kForms)
        for (bool r : {false, true}) {
          Case c;
          c.T = 37;
          c.H = H;
          c.form = f;
          c.residual = r;
          c.x_pad = l.x_pad;
          c.res_pad = l.res_pad;
          c.out_pad = l.out_pad;
          c.scale_pad = l.scale_pad;
          c.w_offset = l.w_offset;
          c.inv_stride = l.inv_stride;
          const uint64_t seed = seed_of({li, H, int(f), r});
          run_case(c, seed, make_inputs(c, seed));
        }
    ++li;
  }
  // H not a multiple of 8 (bf16, fp8 only): generic, with a partial last fp8 block.
  for (int H : {1, 7, 100, 1001})
    for (NormOutForm f : {NormOutForm::bf16, NormOutForm::fp8})
      for (bool r : {false, true}) {
        Case c;
        c.T = 9;
        c.H = H;
        c.form = f;
        c.residual = r;
        const uint64_t seed = seed_of({H, int(f), r, 99});
        run_case(c, seed, make_inputs(c, seed));
      }
}

// The largest rows the register configs hold (16384) and the first past them (generic).
TEST(NormGpu, LargeRows) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int H : {16384, 16384 + 16, 32768 + 48})
    for (int T : {3, 700})
      for (NormOutForm f : kForms) {
        Case c;
        c.T = T;
        c.H = H;
        c.form = f;
        c.residual = T == 3;
        const uint64_t seed = seed_of({H, T, int(f)});
        run_case(c, seed, make_inputs(c, seed));
      }
}

TEST(NormGpu, EveryConfigForced) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int i = 0; i < int(detail::NormConfigId::count); ++i) {
    const detail::NormConfigInfo info = detail::norm_config_info(detail::NormConfigId(i));
    ForceConfig force(info.name);
    SCOPED_TRACE(info.name);
    for (const auto& [T, H] : std::vector<std::pair<int, int>>{{5, 48}, {5, 2048}, {130, 7168}, {3, 16}})
      for (NormOutForm f : kForms) {
        Case c;
        c.T = T;
        c.H = H;
        c.form = f;
        c.residual = true;
        const uint64_t seed = seed_of({i, T, H, int(f)});
        run_case(c, seed, make_inputs(c, seed));
      }
  }
}

// vLLM's fused_add_rms_norm writes the normalized output into its input: out == x.
TEST(NormGpu, InPlaceBf16) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int H : {48, 7168, 1001})  // fast, fast, generic
    for (bool r : {false, true}) {
      Case c;
      c.T = 33;
      c.H = H;
      c.residual = r;
      c.in_place = true;
      const uint64_t seed = seed_of({H, r, 7});
      run_case(c, seed, make_inputs(c, seed));
    }
}

// NaN and Inf in x poison their row; an Inf past fp32 squares too; an Inf weight poisons its
// blocks only; a NaN, zero or negative global scale poisons every NVFP4 block.
TEST(NormGpu, NonFiniteValues) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int H : {256, 2048, 1000})
    for (NormOutForm f : kForms) {
      if (f == NormOutForm::nvfp4 && H % 16) continue;
      for (bool r : {false, true}) {
        Case c;
        c.T = 8;
        c.H = H;
        c.form = f;
        c.residual = r;
        const uint64_t seed = seed_of({H, int(f), r, 13});
        Inputs in = make_inputs(c, seed);
        in.x_bad = {{size_t(1) * H + 3, NAN}, {size_t(3) * H + H - 1, INFINITY}, {size_t(5) * H + 77, 1e20f},
                    {size_t(6) * H + 5, -INFINITY}};
        in.w_bad = {{size_t(200), INFINITY}};
        run_case(c, seed, in);
      }
    }
  for (float g : {NAN, 0.0f, -1.0f, INFINITY}) {
    Case c;
    c.T = 4;
    c.H = 64;
    c.form = NormOutForm::nvfp4;
    const uint64_t seed = seed_of({17});
    Inputs in = make_inputs(c, seed);
    in.global = g;
    NormRun run;
    run_case(c, seed, in, true, &run);
    for (uint8_t s : run.scale) EXPECT_EQ(s & 0x7F, 0x7F) << "global scale " << g;
  }
}

TEST(NormGpu, ZeroTokensIsANoOp) {
  FMOE_SKIP_WITHOUT_GPU();
  for (NormOutForm f : kForms) {
    Case c;
    c.T = 0;
    c.H = 64;
    c.form = f;
    c.residual = true;
    run_case(c, 1, make_inputs(c, 1));
  }
  // Null data with the right shapes is valid at T = 0 (torch gives empty tensors no storage).
  DeviceBuffer w(128), g(4);
  RmsNormQuantArgs a;
  a.x = dev_ref(nullptr, DType::bf16, {0, 64}, {64, 1});
  a.weight = dev_ref(w.get(), DType::bf16, {64}, {1});
  a.out = dev_ref(nullptr, DType::e2m1x2, {0, 32}, {32, 1});
  a.out_scale = dev_ref(nullptr, DType::e4m3, {0, 4}, {4, 1});
  a.global_scale = dev_ref(g.get(), DType::f32, {1}, {1});
  rmsnorm_quant(a, nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());
}

// Same inputs, same bits: a second run, with PDL, and replayed from a CUDA graph.
TEST(NormGpu, DeterministicPdlAndGraphs) {
  FMOE_SKIP_WITHOUT_GPU();
  for (NormOutForm f : kForms) {
    Case c;
    c.T = 300;
    c.H = 7168;
    c.form = f;
    c.residual = true;
    const uint64_t seed = seed_of({300, int(f)});
    const Inputs in = make_inputs(c, seed);
    NormRun first, again, pdl;
    run_case(c, seed, in, true, &first);
    run_case(c, seed, in, false, &again);
    EXPECT_EQ(again.out, first.out);
    EXPECT_EQ(again.scale, first.scale);
    EXPECT_EQ(again.inv, first.inv);
    c.pdl = true;
    run_case(c, seed, in, true, &pdl);
    EXPECT_EQ(pdl.out, first.out) << "PDL run differs";
  }
  // Graph capture on a non-blocking stream, replayed twice (the residual is read and written:
  // use none, so both replays see the same input).
  const int T = 64, H = 2048;
  const std::vector<float> xf = ref::random_bf16(T * H, 5, 1, 1.0f), wf = ref::random_bf16(H, 5, 2, 1.0f);
  DeviceBuffer x = DeviceBuffer::from(to_bf16_bits(xf)), w = DeviceBuffer::from(to_bf16_bits(wf));
  DeviceBuffer out(size_t(T) * H), scale(size_t(T) * (H / 128) * 4), inv(size_t(T) * 4);
  out.fill(0xFF);
  RmsNormQuantArgs a;
  a.x = dev_ref(x.get(), DType::bf16, {T, H}, {H, 1});
  a.weight = dev_ref(w.get(), DType::bf16, {H}, {1});
  a.out = dev_ref(out.get(), DType::e4m3, {T, H}, {H, 1});
  a.out_scale = dev_ref(scale.get(), DType::f32, {T, H / 128}, {H / 128, 1});
  a.inv_rms = dev_ref(inv.get(), DType::f32, {T}, {1});
  cudaStream_t s;
  FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FMOE_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  rmsnorm_quant(a, s);
  FMOE_CUDA(cudaStreamEndCapture(s, &graph));
  FMOE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  FMOE_CUDA(cudaGraphLaunch(exec, s));
  FMOE_CUDA(cudaGraphLaunch(exec, s));
  FMOE_CUDA(cudaStreamSynchronize(s));
  const std::vector<float> inv_k = inv.to_host<float>();
  const auto want = ref::rmsnorm_quant(xf.data(), nullptr, wf.data(), T, H, 1e-6f, NormOutForm::fp8, 1.0f, inv_k.data());
  EXPECT_EQ(out.to_host<uint8_t>(), want.q) << "graph replay codes";
  EXPECT_EQ(scale.to_host<float>(), want.fp8_scale) << "graph replay scales";
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

// Small shapes for scripts/gpu_check.sh's compute-sanitizer runs: both kernels, every form, with
// and without the residual, padded and odd strides, a partial fp8 block.
TEST(NormGpu, SanitizerSmall) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int H : {48, 2048, 200})
    for (NormOutForm f : kForms)
      for (bool r : {false, true})
        for (int pad : {0, 1, 8}) {
          if (f == NormOutForm::nvfp4 && H % 16) continue;
          Case c;
          c.T = 3;
          c.H = H;
          c.form = f;
          c.residual = r;
          c.x_pad = c.res_pad = c.out_pad = c.scale_pad = pad;
          const uint64_t seed = seed_of({H, int(f), r, pad, 3});
          run_case(c, seed, make_inputs(c, seed));
        }
}

// Every class of bad argument. Runs without a GPU too: each call throws while validating, before
// anything touches a device (the pointers are never dereferenced).
TEST(NormGpu, RejectsBadArguments) {
  const int T = 4, H = 64;
  void* p = reinterpret_cast<void*>(uintptr_t(1) << 20);  // 16-byte aligned, never read
  auto good = [&](NormOutForm f) {
    RmsNormQuantArgs a;
    a.x = dev_ref(p, DType::bf16, {T, H}, {H, 1});
    a.weight = dev_ref(p, DType::bf16, {H}, {1});
    if (f == NormOutForm::bf16) a.out = dev_ref(p, DType::bf16, {T, H}, {H, 1});
    if (f == NormOutForm::fp8) {
      a.out = dev_ref(p, DType::e4m3, {T, H}, {H, 1});
      a.out_scale = dev_ref(p, DType::f32, {T, 1}, {1, 1});
    }
    if (f == NormOutForm::nvfp4) {
      a.out = dev_ref(p, DType::e2m1x2, {T, H / 2}, {H / 2, 1});
      a.out_scale = dev_ref(p, DType::e4m3, {T, H / 16}, {H / 16, 1});
      a.global_scale = dev_ref(p, DType::f32, {1}, {1});
    }
    return a;
  };
  struct Bad {
    NormOutForm form;
    void (*edit)(RmsNormQuantArgs&);
    const char* needle;
  };
  const Bad cases[] = {
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.dtype = DType::f32; }, "x must be bf16"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.ndim = 1; }, "x must be [T, H] (2-d)"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.shape[1] = 0; }, "H = x.shape[1] must be >= 1"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.device = Device::cpu; }, "x must be in CUDA device memory"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.stride[1] = 2; }, "x must have unit stride in its last dimension"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.stride[0] = -64; }, "x has a negative stride"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.data = static_cast<char*>(a.x.data) + 1; }, "x must be 2-byte aligned"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.x.data = nullptr; }, "x has a null data pointer"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.out.dtype = DType::f32; }, "out must be bf16, e4m3 or e2m1x2"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.out.shape[0] = 5; }, "out must have shape [4, 64]"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.out.stride[0] = 10; }, "its rows must not overlap"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.out.device_index = 1; }, "out is on cuda:1 but the call runs on cuda:0"},
      {NormOutForm::nvfp4, [](RmsNormQuantArgs& a) {
         a.x.shape[1] = 24;
         a.weight.shape[0] = 24;
         a.out.shape[1] = 12;
       }, "needs H to be a multiple of 16"},
      {NormOutForm::nvfp4, [](RmsNormQuantArgs& a) { a.out.shape[1] = 64; }, "out must have shape [4, 32]"},
      {NormOutForm::fp8, [](RmsNormQuantArgs& a) { a.out_scale = TensorRef(); }, "out_scale is required"},
      {NormOutForm::fp8, [](RmsNormQuantArgs& a) { a.out_scale.shape[1] = 2; }, "out_scale must have shape [4, 1]"},
      {NormOutForm::fp8, [](RmsNormQuantArgs& a) { a.out_scale.dtype = DType::e4m3; }, "out_scale must be f32"},
      {NormOutForm::nvfp4, [](RmsNormQuantArgs& a) { a.out_scale.dtype = DType::f32; }, "out_scale must be e4m3"},
      {NormOutForm::nvfp4, [](RmsNormQuantArgs& a) { a.out_scale.shape[1] = 8; }, "out_scale must have shape [4, 4]"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.out_scale = a.x; }, "out_scale must be empty"},
      {NormOutForm::nvfp4, [](RmsNormQuantArgs& a) { a.global_scale = TensorRef(); }, "global_scale ([1] f32) is required"},
      {NormOutForm::nvfp4, [](RmsNormQuantArgs& a) { a.global_scale.shape[0] = 2; }, "global_scale must hold one f32"},
      {NormOutForm::nvfp4, [](RmsNormQuantArgs& a) { a.global_scale.dtype = DType::bf16; }, "global_scale must be f32"},
      {NormOutForm::fp8, [](RmsNormQuantArgs& a) { a.global_scale = a.x; }, "global_scale is for an e2m1x2 (NVFP4) out only"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) {
         a.residual = a.x;
         a.residual.shape[1] = 32;
       }, "residual must have shape [4, 64]"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) {
         a.residual = a.x;
         a.residual.dtype = DType::f16;
       }, "residual must be bf16"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) {
         a.residual = a.x;
         a.residual.stride[0] = 0;
       }, "residual is written, so its rows must not overlap"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.weight.shape[0] = 65; }, "weight must have shape [64]"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.weight.dtype = DType::f32; }, "weight must be bf16"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.weight.stride[0] = 2; }, "weight must have unit stride"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.eps = 0.0f; }, "eps must be positive and finite, got 0"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.eps = -1e-6f; }, "eps must be positive and finite"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.eps = NAN; }, "eps must be positive and finite, got nan"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.eps = INFINITY; }, "eps must be positive and finite, got inf"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.inv_rms = dev_ref(a.x.data, DType::f32, {5}, {1}); }, "inv_rms must have shape [4]"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.inv_rms = dev_ref(a.x.data, DType::bf16, {4}, {1}); }, "inv_rms must be f32"},
      {NormOutForm::bf16, [](RmsNormQuantArgs& a) { a.inv_rms = dev_ref(a.x.data, DType::f32, {4}, {0}); }, "inv_rms is written, so its stride must be >= 1"},
  };
  for (const Bad& b : cases) {
    RmsNormQuantArgs a = good(b.form);
    b.edit(a);
    SCOPED_TRACE(b.needle);
    test::expect_error([&] { rmsnorm_quant(a, nullptr); }, b.needle);
  }
}
