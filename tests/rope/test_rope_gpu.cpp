// RoPE on the GPU against the CPU reference (ref::rope_from_cache): DeepSeek-V3 and Llama shapes,
// both styles, forward and inverse, bf16 / f16 / f32, i32 and i64 positions, with and without k,
// q and k as slices of a fused qkv buffer, misaligned layouts (narrower vectors), every compiled
// config forced once, bad positions, T = 0, graphs and PDL, every bad argument, and small
// *Sanitizer* cases for scripts/gpu_check.sh.
//
// Every case runs on one device allocation whose bytes are all known: q / k heads (and v heads
// in the fused layout) hold random values, everything else is poison (0xFF bytes: NaN). After
// the call the rope parts of tokens with a good position must match the reference; every other
// byte of the allocation (the leading head_dim - rope_dim values, v, the padding, the poison,
// the heads of tokens with a bad position) must be exactly what it was.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/env.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/rope.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "rope/rope_launch.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;

namespace {

// Print every config choice (stderr), so the logs say which kernel each case ran.
[[maybe_unused]] const int kPrintConfig = (detail::knobs().print_config = true, 0);

using test::dev_ref;

// ---- storage values ------------------------------------------------------------------------------
void put(uint8_t* dst, DType t, float v) {
  if (t == DType::f32) {
    std::memcpy(dst, &v, 4);
  } else {
    const uint16_t b = t == DType::bf16 ? fmt::bf16_from_float(v) : fmt::f16_from_float(v);
    std::memcpy(dst, &b, 2);
  }
}

double get(const uint8_t* src, DType t) {
  if (t == DType::f32) {
    float f;
    std::memcpy(&f, src, 4);
    return f;
  }
  uint16_t b;
  std::memcpy(&b, src, 2);
  return t == DType::bf16 ? fmt::bf16_to_float(b) : fmt::f16_to_float(b);
}

// Spacing of the storage type's values at |w| (the ulp of the binade holding w).
double ulp_at(DType t, double w) {
  const int mant = t == DType::bf16 ? 7 : t == DType::f16 ? 10 : 23;
  const double min_spacing = t == DType::bf16 ? 0x1p-133 : t == DType::f16 ? 0x1p-24 : 0x1p-149;
  if (w == 0) return min_spacing;
  int e = 0;
  std::frexp(std::fabs(w), &e);  // |w| in [2^(e-1), 2^e)
  return std::max(std::ldexp(1.0, e - 1 - mant), min_spacing);
}

// Bound on |kernel - exact| for one rotated element: one ulp of the storage type, plus the fp32
// error before that rounding. Why one ulp: the kernel computes x*c - y*s with one fp32 product
// and one FMA (|error| <= 2^-24 * (|y*s| + |result|) <= 2^-23 * abs_terms) and then rounds once
// (<= half an ulp). A result within that fp32 error of a midpoint between two storage values may
// round to either, so the kernel can be a full ulp away from the exact value, never more; under
// cancellation (|result| << abs_terms) the fp32 term dominates and is allowed for explicitly.
double rotate_bound(DType t, double want, double abs_terms) {
  return ulp_at(t, want) + 4 * 0x1p-24 * abs_terms;
}

// Unit roundoff of the storage type (forward-then-inverse bound).
double unit_roundoff(DType t) { return t == DType::bf16 ? 0x1p-8 : t == DType::f16 ? 0x1p-11 : 0x1p-24; }

const char* style_of(RopeStyle s) { return rope_style_name(s); }
ref::RopeStyle ref_style(RopeStyle s) { return s == RopeStyle::gptj ? ref::RopeStyle::gptj_interleaved : ref::RopeStyle::neox; }

// ---- one case -------------------------------------------------------------------------------------
struct Case {
  int T = 1, Hq = 1, Hk = 0, D = 64, R = 64;
  DType dtype = DType::bf16;
  RopeStyle style = RopeStyle::neox;
  bool inverse = false;
  bool pos_i64 = false;
  bool fused = false;     // q, k, v: head slices of one [T, Hq + 2 Hk + 1, D] buffer (+ tok_pad)
  int64_t offset = 0;     // elements before q (and between q and k): misaligns the rope parts
  int64_t tok_pad = 0;    // extra elements per token row
  int bad = 0;            // tokens whose position is outside [0, max_position)
  int max_position = 2048;
  bool count = true;      // pass bad_position_count
  bool pdl = false;
};

std::string describe(const Case& c, uint64_t seed) {
  return strf("T=%d q[%d,%d] k[%d] R=%d %s %s%s pos=%s%s offset=%lld pad=%lld bad=%d%s seed=%llu", c.T,
              c.Hq, c.D, c.Hk, c.R, dtype_name(c.dtype), style_of(c.style), c.inverse ? " inverse" : "",
              c.pos_i64 ? "i64" : "i32", c.fused ? " fused-qkv" : "", (long long)c.offset,
              (long long)c.tok_pad, c.bad, c.pdl ? " pdl" : "", (unsigned long long)seed);
}

struct Layout {
  int64_t q_off = 0, q_ts = 0, k_off = 0, k_ts = 0, v_off = 0, total = 0;  // elements
};

Layout layout_of(const Case& c) {
  Layout L;
  if (c.fused) {
    const int64_t row = int64_t(c.Hq + 2 * c.Hk + 1) * c.D + c.tok_pad;  // q | k | v | one poison head
    L.q_off = c.offset;
    L.q_ts = L.k_ts = row;
    L.k_off = c.offset + int64_t(c.Hq) * c.D;
    L.v_off = L.k_off + int64_t(c.Hk) * c.D;
    L.total = c.offset + int64_t(c.T) * row + 64;
  } else {
    L.q_off = c.offset;
    L.q_ts = int64_t(c.Hq) * c.D + c.tok_pad;
    L.k_off = L.q_off + int64_t(c.T) * L.q_ts + 32 + c.offset;  // a poisoned gap between q and k
    L.k_ts = int64_t(c.Hk) * c.D + c.tok_pad;
    L.total = L.k_off + int64_t(c.T) * L.k_ts + 64;
  }
  return L;
}

struct Inputs {
  Layout L;
  std::vector<uint8_t> image;      // the allocation's bytes before the call
  std::vector<int64_t> positions;  // as given (the i32 ones widened)
  std::vector<float> cache;
};

const std::vector<float>& cache_for(int max_position, int R) {
  static std::vector<std::pair<std::pair<int, int>, std::vector<float>>> memo;
  for (const auto& [k, v] : memo)
    if (k == std::make_pair(max_position, R)) return v;
  memo.push_back({{max_position, R}, ref::rope_cos_sin_cache(max_position, R, 10000.0)});
  return memo.back().second;
}

Inputs make_inputs(const Case& c, uint64_t seed) {
  Inputs in;
  in.L = layout_of(c);
  const size_t eb = dtype_bytes(c.dtype);
  in.image.assign(size_t(in.L.total) * eb, 0xFF);
  std::vector<float> vals(size_t(c.T) * size_t(c.Hq + 2 * c.Hk) * size_t(c.D));
  ref::fill_uniform(vals.data(), int64_t(vals.size()), seed, 7, 2.0f);
  size_t n = 0;
  auto fill_heads = [&](int64_t off, int64_t ts, int H) {
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < c.D; ++j)
          put(in.image.data() + size_t(off + t * ts + int64_t(h) * c.D + j) * eb, c.dtype, vals[n++]);
  };
  fill_heads(in.L.q_off, in.L.q_ts, c.Hq);
  fill_heads(in.L.k_off, in.L.k_ts, c.Hk);
  if (c.fused) fill_heads(in.L.v_off, in.L.k_ts, c.Hk);  // v: must come back untouched
  // Positions: random rows, and `bad` tokens outside the cache, including values that are in
  // range after a truncation to 32 bits (the kernel must compare all 64).
  ref::Rng rng(seed ^ 0x9051);
  in.positions.resize(size_t(c.T));
  for (auto& p : in.positions) p = rng.below(c.max_position);
  const std::vector<int64_t> bad32 = {-1, c.max_position, c.max_position + 12345, INT32_MIN, INT32_MAX};
  const std::vector<int64_t> bad64 = {-1, c.max_position, int64_t(1) << 40, (int64_t(1) << 32) + 5, INT64_MIN};
  for (int i = 0; i < c.bad && c.T > 0; ++i) {
    const std::vector<int64_t>& pool = c.pos_i64 ? bad64 : bad32;
    in.positions[size_t(rng.below(c.T))] = pool[size_t(i) % pool.size()];
  }
  in.cache = cache_for(c.max_position, c.R);
  return in;
}

int64_t count_bad(const Case& c, const std::vector<int64_t>& pos) {
  int64_t n = 0;
  for (int64_t p : pos) n += p < 0 || p >= c.max_position;
  return n;
}

// The device side of one case: the allocation, positions, cache, counter and the call's args.
struct DevCase {
  DeviceBuffer buf, pos, cache, counter;
  RopeArgs args;
  DevCase(const Case& c, const Inputs& in) {
    buf = DeviceBuffer::from(in.image);
    if (c.pos_i64) {
      pos = DeviceBuffer::from(in.positions);
    } else {
      std::vector<int32_t> p32(in.positions.begin(), in.positions.end());
      pos = DeviceBuffer::from(p32);
    }
    cache = DeviceBuffer::from(in.cache);
    counter = DeviceBuffer::from(std::vector<int32_t>{5});  // added to, never reset
    const size_t eb = dtype_bytes(c.dtype);
    uint8_t* base = buf.get<uint8_t>();
    args.q = dev_ref(base + in.L.q_off * eb, c.dtype, {c.T, c.Hq, c.D}, {in.L.q_ts, c.D, 1});
    if (c.Hk > 0) args.k = dev_ref(base + in.L.k_off * eb, c.dtype, {c.T, c.Hk, c.D}, {in.L.k_ts, c.D, 1});
    args.positions = dev_ref(pos.get(), c.pos_i64 ? DType::i64 : DType::i32, {c.T}, {1});
    args.cos_sin_cache = dev_ref(cache.get(), DType::f32, {c.max_position, c.R}, {c.R, 1});
    args.rope_dim = c.R;
    args.style = c.style;
    args.inverse = c.inverse;
    if (c.count) args.bad_position_count = dev_ref(counter.get(), DType::i32, {1}, {1});
    args.pdl = c.pdl;
  }
};

// Checks the allocation after one rotation of `in` against the reference. Reports the first
// mismatching element (tensor, token, head, index, got, want, bound) and the number of them.
void check_result(const Case& c, const Inputs& in, const std::vector<uint8_t>& out, const std::string& ctx) {
  const size_t eb = dtype_bytes(c.dtype);
  ASSERT_EQ(out.size(), in.image.size());
  std::vector<uint8_t> checked(size_t(in.L.total), 0);
  size_t bad = 0;
  std::string first;
  auto fail = [&](const std::string& what) {
    if (bad++ == 0) first = what;
  };
  auto check_tensor = [&](const char* name, int64_t off, int64_t ts, int H) {
    if (H == 0 || c.T == 0) return;
    std::vector<float> x(size_t(c.T) * H * c.D);
    for (int t = 0; t < c.T; ++t)
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < c.D; ++j)
          x[(size_t(t) * H + h) * c.D + j] = float(get(in.image.data() + size_t(off + t * ts + int64_t(h) * c.D + j) * eb, c.dtype));
    const ref::RopeFromCacheResult r = ref::rope_from_cache(x.data(), c.T, H, c.D, c.R, in.positions.data(),
                                                            in.cache.data(), c.max_position, ref_style(c.style), c.inverse);
    for (int t = 0; t < c.T; ++t) {
      const bool good = in.positions[size_t(t)] >= 0 && in.positions[size_t(t)] < c.max_position;
      if (!good) continue;  // the whole token is compared bytewise below
      for (int h = 0; h < H; ++h)
        for (int j = c.D - c.R; j < c.D; ++j) {
          const int64_t e = off + t * ts + int64_t(h) * c.D + j;
          checked[size_t(e)] = 1;
          const size_t i = (size_t(t) * H + h) * c.D + j;
          const double got = get(out.data() + size_t(e) * eb, c.dtype), want = r.value[i];
          const double bound = rotate_bound(c.dtype, want, r.abs_terms[i]);
          if (!(std::fabs(got - want) <= bound))
            fail(strf("%s[t=%d, h=%d, %d] (element %lld): got %.9g, want %.9g (input %.9g, bound %.3g, position %lld)",
                      name, t, h, j, (long long)e, got, want, double(x[i]), bound, (long long)in.positions[size_t(t)]));
        }
    }
  };
  check_tensor("q", in.L.q_off, in.L.q_ts, c.Hq);
  check_tensor("k", in.L.k_off, in.L.k_ts, c.Hk);
  // Every other byte: exactly as before (non-rope values, v, padding, poison, bad tokens).
  for (int64_t e = 0; e < in.L.total; ++e) {
    if (checked[size_t(e)]) continue;
    if (std::memcmp(out.data() + size_t(e) * eb, in.image.data() + size_t(e) * eb, eb) != 0)
      fail(strf("element %lld outside the rotated values changed: got %.9g, was %.9g", (long long)e,
                get(out.data() + size_t(e) * eb, c.dtype), get(in.image.data() + size_t(e) * eb, c.dtype)));
  }
  EXPECT_EQ(bad, 0u) << ctx << ": " << bad << " wrong elements; first: " << first;
}

// Runs one case (seeded) and checks it. Returns the allocation after the call.
std::vector<uint8_t> run_case(const Case& c, uint64_t seed, bool check = true) {
  const Inputs in = make_inputs(c, seed);
  DevCase dev(c, in);
  rope(dev.args, nullptr);
  FMOE_CUDA(cudaGetLastError());
  FMOE_CUDA(cudaDeviceSynchronize());
  std::vector<uint8_t> out = dev.buf.to_host<uint8_t>();
  const std::string ctx = describe(c, seed);
  if (check) {
    check_result(c, in, out, ctx);
    const int32_t counter = dev.counter.to_host<int32_t>()[0];
    EXPECT_EQ(counter, c.count ? 5 + int32_t(count_bad(c, in.positions)) : 5) << ctx << ": bad_position_count";
  }
  return out;
}

void run_seeded(const Case& c) {
  for (uint64_t seed : test::seeds_for(test::hash_ints({c.T, c.Hq, c.Hk, c.D, c.R, int(c.dtype), int(c.style),
                                                        c.inverse, c.pos_i64, c.fused, c.offset, c.tok_pad, c.bad, c.pdl})))
    run_case(c, seed);
}

Case deepseek_q(int T, RopeStyle s) {  // q [T, 128, 192], the last 64 rotated
  Case c;
  c.T = T, c.Hq = 128, c.D = 192, c.R = 64, c.style = s, c.max_position = 4096;
  return c;
}

Case llama_qk(int T, RopeStyle s) {  // q [T, 32, 128] + k [T, 8, 128], all rotated
  Case c;
  c.T = T, c.Hq = 32, c.Hk = 8, c.D = 128, c.R = 128, c.style = s, c.max_position = 4096;
  return c;
}

}  // namespace

TEST(RopeGpu, ModelShapesMatchTheReference) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int T : {0, 1, 3, 128, 1000})
    for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj}) {
      run_seeded(deepseek_q(T, s));
      run_seeded(llama_qk(T, s));
    }
}

TEST(RopeGpu, DtypesPositionsInverseAndK) {
  FMOE_SKIP_WITHOUT_GPU();
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    for (bool i64 : {false, true})
      for (bool inv : {false, true})
        for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj})
          for (int Hk : {0, 2}) {
            Case c;
            c.T = 37, c.Hq = 4, c.Hk = Hk, c.D = 96, c.R = 32, c.dtype = t, c.pos_i64 = i64, c.inverse = inv, c.style = s;
            run_seeded(c);
          }
}

TEST(RopeGpu, HeadSizes) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Shape {
    int Hq, Hk, D, R;
  };
  // head_dim 64; partial rope; a head of one pair (R = 2: one element per vector); rope_dim/2
  // not a multiple of 8 (R = 8, 12: 8- and 4-byte vectors); one head per token (several tokens
  // per CTA); a wide rope part (R = 512, 64 items per head).
  for (const Shape& h : {Shape{8, 8, 64, 64}, Shape{16, 0, 64, 16}, Shape{3, 1, 2, 2}, Shape{5, 0, 8, 8},
                         Shape{2, 2, 12, 12}, Shape{1, 0, 128, 128}, Shape{0, 1, 64, 32}, Shape{2, 1, 576, 512}})
    for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj})
      for (int T : {1, 3, 128, 1000}) {
        Case c;
        c.T = T, c.Hq = h.Hq, c.Hk = h.Hk, c.D = h.D, c.R = h.R, c.style = s;
        run_seeded(c);
      }
}

TEST(RopeGpu, FusedQkvSlicesLeaveEverythingElseAlone) {
  FMOE_SKIP_WITHOUT_GPU();
  for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj}) {
    for (int T : {1, 3, 128}) {
      Case c = llama_qk(T, s);
      c.fused = true;
      c.tok_pad = 8;  // a padded token stride, still 16-byte aligned
      run_seeded(c);
      Case d = deepseek_q(T, s);  // q is a slice of a wider row (here: q | poison head)
      d.fused = true;
      run_seeded(d);
    }
  }
}

TEST(RopeGpu, MisalignedLayoutsTakeNarrowerVectors) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Variant {
    DType t;
    int64_t offset, pad;
    const char* config;  // what the plan must choose
  };
  const Variant vs[] = {
      {DType::bf16, 0, 0, "bf16_v16"}, {DType::bf16, 4, 0, "bf16_v8"}, {DType::bf16, 2, 0, "bf16_v4"},
      {DType::bf16, 1, 0, "bf16_v2"},  {DType::bf16, 0, 1, "bf16_v2"}, {DType::bf16, 0, 2, "bf16_v4"},
      {DType::f16, 1, 0, "f16_v2"},    {DType::f16, 0, 4, "f16_v8"},   {DType::f32, 1, 0, "f32_v4"},
      {DType::f32, 2, 0, "f32_v8"},    {DType::f32, 0, 0, "f32_v16"},
  };
  for (const Variant& v : vs)
    for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj}) {
      Case c = llama_qk(33, s);
      c.dtype = v.t, c.offset = v.offset, c.tok_pad = v.pad;
      const Inputs in = make_inputs(c, 1);
      DevCase dev(c, in);
      const detail::RopeChoice ch = detail::plan_rope(dev.args);
      EXPECT_STREQ(detail::rope_config_info(ch.id).name, v.config) << describe(c, 1) << ": " << ch.reason;
      run_seeded(c);
    }
}

TEST(RopeGpu, EveryConfigForced) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int i = 0; i < int(detail::RopeConfigId::count); ++i) {
    const detail::RopeConfigInfo info = detail::rope_config_info(detail::RopeConfigId(i));
    detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, info.name);
    for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj}) {
      Case c = llama_qk(45, s);
      c.Hq = 6, c.Hk = 2, c.dtype = info.dtype;
      const detail::RopeChoice ch = [&] {
        const Inputs in = make_inputs(c, 1);
        DevCase dev(c, in);
        return detail::plan_rope(dev.args);
      }();
      ASSERT_EQ(int(ch.id), i) << info.name;
      run_seeded(c);
      c.bad = 3;
      c.inverse = true;
      run_seeded(c);
    }
  }
}

TEST(RopeGpu, ForwardThenInverseReturnsTheInput) {
  FMOE_SKIP_WITHOUT_GPU();
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj})
      for (const Case& base : {deepseek_q(128, s), llama_qk(128, s)}) {
        Case c = base;
        c.dtype = t;
        for (uint64_t seed : test::seeds_for(test::hash_ints({int(t), int(s), c.Hq, 0x77}))) {
          const Inputs in = make_inputs(c, seed);
          DevCase dev(c, in);
          rope(dev.args, nullptr);
          dev.args.inverse = true;
          rope(dev.args, nullptr);
          FMOE_CUDA(cudaDeviceSynchronize());
          const std::vector<uint8_t> out = dev.buf.to_host<uint8_t>();
          // Forward rounds each output once (<= u |x'|), the inverse rotates those errors back
          // (<= u (|x'| + |y'|) <= sqrt(2) u (|x| + |y|) per element) and rounds once more
          // (<= u |x|): within 2.5 u (|x| + |y|) of the input, u the storage type's unit
          // roundoff (2^-8 for bf16); plus the fp32 noise and the float cache's
          // cos^2 + sin^2 = 1 +- 2^-23, which matter only for f32, and two roundings to the
          // smallest spacing (f16 subnormals).
          const size_t eb = dtype_bytes(t);
          size_t bad = 0;
          std::string first;
          auto check = [&](const char* name, int64_t off, int64_t ts, int H) {
            for (int tok = 0; tok < c.T; ++tok)
              for (int h = 0; h < H; ++h)
                for (int j = 0; j < c.D; ++j) {
                  const int64_t e = off + tok * ts + int64_t(h) * c.D + j;
                  const double x = get(in.image.data() + size_t(e) * eb, t), got = get(out.data() + size_t(e) * eb, t);
                  double bound = 0;  // leading values: untouched
                  if (j >= c.D - c.R) {
                    const int r = j - (c.D - c.R);
                    const int partner = s == RopeStyle::gptj ? (r ^ 1) : (r < c.R / 2 ? r + c.R / 2 : r - c.R / 2);
                    const double y = get(in.image.data() + size_t(e - r + partner) * eb, t);
                    bound = (2.5 * unit_roundoff(t) + 8 * 0x1p-24) * (std::fabs(x) + std::fabs(y)) + 2 * ulp_at(t, 0);
                  }
                  if (!(std::fabs(got - x) <= bound) && bad++ == 0)
                    first = strf("%s[t=%d, h=%d, %d]: got %.9g, input %.9g, bound %.3g", name, tok, h, j, got, x, bound);
                }
          };
          check("q", in.L.q_off, in.L.q_ts, c.Hq);
          check("k", in.L.k_off, in.L.k_ts, c.Hk);
          EXPECT_EQ(bad, 0u) << describe(c, seed) << ": forward then inverse: " << bad << " elements off; first: " << first;
        }
      }
}

TEST(RopeGpu, BadPositionsAreCountedAndLeftAlone) {
  FMOE_SKIP_WITHOUT_GPU();
  for (bool i64 : {false, true})
    for (bool count : {true, false})
      for (const Case& base : {deepseek_q(128, RopeStyle::neox), llama_qk(1000, RopeStyle::gptj)}) {
        Case c = base;
        c.pos_i64 = i64, c.count = count, c.bad = 17;
        run_seeded(c);
      }
  // every token bad: nothing is written at all
  Case all = llama_qk(9, RopeStyle::neox);
  all.max_position = 1;
  all.bad = 0;
  for (uint64_t seed : {uint64_t(3), test::run_seed()}) {
    Inputs in = make_inputs(all, seed);
    for (auto& p : in.positions) p = 1;  // == max_position: out of range
    DevCase dev(all, in);
    rope(dev.args, nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(dev.buf.to_host<uint8_t>(), in.image) << "seed " << seed;
    EXPECT_EQ(dev.counter.to_host<int32_t>()[0], 5 + all.T);
  }
}

TEST(RopeGpu, EmptyCallsTouchNothing) {
  FMOE_SKIP_WITHOUT_GPU();
  // T = 0 with real pointers, and with null pointers; no heads at all.
  for (bool null_data : {false, true}) {
    Case c = llama_qk(0, RopeStyle::neox);
    const Inputs in = make_inputs(c, 1);
    DevCase dev(c, in);
    DeviceBuffer poison(64);
    poison.fill(0xFF);
    dev.args.q = dev_ref(null_data ? nullptr : poison.get(), DType::bf16, {0, 32, 128}, {4096, 128, 1});
    dev.args.k = dev_ref(null_data ? nullptr : poison.get<uint8_t>() + 32, DType::bf16, {0, 8, 128}, {1024, 128, 1});
    dev.args.positions = dev_ref(null_data ? nullptr : dev.pos.get(), DType::i32, {0}, {1});
    rope(dev.args, nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(poison.to_host<uint8_t>(), std::vector<uint8_t>(64, 0xFF));
    EXPECT_EQ(dev.counter.to_host<int32_t>()[0], 5);
  }
  Case c = llama_qk(4, RopeStyle::neox);
  c.Hq = 0, c.Hk = 0;
  run_seeded(c);
}

TEST(RopeGpu, DeterministicCapturedAndPdl) {
  FMOE_SKIP_WITHOUT_GPU();
  cudaStream_t stream;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const Case& base : {deepseek_q(128, RopeStyle::gptj), llama_qk(77, RopeStyle::neox)}) {
    Case c = base;
    c.bad = 4;
    const uint64_t seed = test::run_seed() ^ 0xD7;
    const Inputs in = make_inputs(c, seed);
    // Eager, twice (a second rotation of the rotated data), on the legacy stream.
    DevCase eager(c, in);
    rope(eager.args, nullptr);
    rope(eager.args, nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
    const std::vector<uint8_t> want = eager.buf.to_host<uint8_t>();
    const int32_t want_count = eager.counter.to_host<int32_t>()[0];
    EXPECT_EQ(want_count, 5 + 2 * int32_t(count_bad(c, in.positions)));
    for (bool pdl : {false, true}) {
      DevCase dev(c, in);
      dev.args.pdl = pdl;
      cudaGraph_t graph;
      FMOE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      rope(dev.args, stream);
      rope(dev.args, stream);
      FMOE_CUDA(cudaStreamEndCapture(stream, &graph));
      cudaGraphExec_t exec;
      FMOE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
      FMOE_CUDA(cudaGraphLaunch(exec, stream));
      FMOE_CUDA(cudaStreamSynchronize(stream));
      EXPECT_EQ(dev.buf.to_host<uint8_t>(), want) << describe(c, seed) << ": graph replay" << (pdl ? " with PDL" : "")
                                                  << " differs from two eager calls";
      EXPECT_EQ(dev.counter.to_host<int32_t>()[0], want_count);
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  }
  cudaStreamDestroy(stream);
}

TEST(RopeGpu, RejectsEveryBadArgument) {
  FMOE_SKIP_WITHOUT_GPU();
  Case c = deepseek_q(4, RopeStyle::neox);
  c.Hk = 2;
  const Inputs in = make_inputs(c, 1);
  DevCase dev(c, in);
  DeviceBuffer i64buf(64);
  const RopeArgs good = dev.args;
  auto bad = [&](auto mutate, const std::string& needle) {
    RopeArgs a = good;
    mutate(a);
    test::expect_error([&] { rope(a, nullptr); }, needle);
  };
  uint8_t* q = static_cast<uint8_t*>(good.q.data);
  // q
  bad([](RopeArgs& a) { a.q.dtype = DType::i32; }, "rope: q must be bf16, f16 or f32, got [4, 128, 192] i32");
  bad([](RopeArgs& a) { a.q.dtype = DType::e4m3; }, "q must be bf16, f16 or f32");
  bad([](RopeArgs& a) { a.q.ndim = 2; }, "rope: q must be [T, num_q_heads, head_dim], got [4, 128] bf16");
  bad([](RopeArgs& a) { a.q.stride[2] = 2; }, "q must have unit stride in its last dimension, got stride 2");
  bad([](RopeArgs& a) { a.q.stride[0] = -a.q.stride[0]; }, "q has a negative stride");
  bad([&](RopeArgs& a) { a.q.data = q + 1; }, "q must be 2-byte aligned (its element size)");
  bad([](RopeArgs& a) { a.q.device = fusedmoe::Device::cpu; }, "q must be in CUDA device memory");
  bad([](RopeArgs& a) { a.q.data = nullptr; }, "q has a null data pointer");
  bad([](RopeArgs& a) { a.q.stride[1] = 0; }, "q strides {");
  bad([](RopeArgs& a) { a.q.stride[1] = 32; }, "make the rope parts (64 values) of its [4, 128] heads overlap");
  // rope_dim and style
  bad([](RopeArgs& a) { a.rope_dim = 63; }, "rope: rope_dim must be a positive even number, got 63");
  bad([](RopeArgs& a) { a.rope_dim = 0; }, "rope_dim must be a positive even number, got 0");
  bad([](RopeArgs& a) { a.rope_dim = -2; }, "rope_dim must be a positive even number, got -2");
  bad([](RopeArgs& a) { a.rope_dim = 194; }, "rope_dim = 194 is larger than head_dim = 192");
  bad([](RopeArgs& a) { a.style = RopeStyle(7); }, "style must be RopeStyle::neox or RopeStyle::gptj, got code 7");
  {
    RopeArgs a = good;
    a.q = dev_ref(q, DType::bf16, {1, 1, 8192}, {8192, 8192, 1});
    a.k = {};
    a.positions.shape[0] = 1;
    a.rope_dim = 8192;
    test::expect_error([&] { rope(a, nullptr); }, "rope_dim = 8192; at most 4096 is supported");
  }
  // k
  bad([](RopeArgs& a) { a.k.dtype = DType::f16; }, "rope: k must have q's dtype bf16, got [4, 2, 192] f16");
  bad([](RopeArgs& a) { a.k.shape[0] = 5; }, "k must be [4, num_k_heads, 192] (q's T and head_dim), got [5, 2, 192]");
  bad([](RopeArgs& a) { a.k.shape[2] = 128; }, "k must be [4, num_k_heads, 192]");
  bad([](RopeArgs& a) { a.k.ndim = 4; }, "k must be [4, num_k_heads, 192]");
  bad([](RopeArgs& a) { a.k.stride[2] = 3; }, "k must have unit stride in its last dimension");
  bad([](RopeArgs& a) { a.k.device = fusedmoe::Device::cpu; }, "k must be in CUDA device memory");
  bad([](RopeArgs& a) { a.k.device_index = 1; }, "rope: k is on cuda:1 but the call runs on cuda:0");
  bad([](RopeArgs& a) { a.k.data = a.q.data; }, "k and q are the same memory");
  bad([](RopeArgs& a) { a.k.stride[1] = 0; }, "k strides {");
  // positions
  bad([](RopeArgs& a) { a.positions.dtype = DType::f32; }, "rope: positions must be i32 or i64, got [4] f32");
  bad([](RopeArgs& a) { a.positions.shape[0] = 5; }, "rope: positions must have shape [4], got [5] i32");
  bad([](RopeArgs& a) { a.positions = dev_ref(a.positions.data, DType::i32, {4, 1}, {1, 1}); }, "positions must have shape [4]");
  bad([](RopeArgs& a) { a.positions.device = fusedmoe::Device::cpu; }, "positions must be in CUDA device memory");
  bad([](RopeArgs& a) { a.positions.device_index = 1; }, "positions is on cuda:1 but the call runs on cuda:0");
  bad([](RopeArgs& a) { a.positions.data = nullptr; }, "positions has a null data pointer");
  bad([](RopeArgs& a) { a.positions.stride[0] = -1; }, "positions has a negative stride -1");
  bad([&](RopeArgs& a) { a.positions = dev_ref(i64buf.get<uint8_t>() + 4, DType::i64, {4}, {1}); },
      "positions must be 8-byte aligned (its element size)");
  // cos_sin_cache
  bad([](RopeArgs& a) { a.cos_sin_cache.dtype = DType::bf16; }, "rope: cos_sin_cache must be f32");
  bad([](RopeArgs& a) { a.cos_sin_cache.shape[1] = 128; }, "cos_sin_cache must be [max_position, 64] (rope_dim columns: cos then sin), got [4096, 128]");
  bad([](RopeArgs& a) { a.cos_sin_cache.shape[0] = 0; }, "cos_sin_cache must be [max_position, 64]");
  bad([](RopeArgs& a) { a.cos_sin_cache.ndim = 1; }, "cos_sin_cache must be [max_position, 64]");
  bad([](RopeArgs& a) { a.cos_sin_cache.stride[0] = 128; }, "rope: cos_sin_cache must be contiguous (row-major)");
  bad([](RopeArgs& a) { a.cos_sin_cache.device = fusedmoe::Device::cpu; }, "cos_sin_cache must be in CUDA device memory");
  bad([](RopeArgs& a) { a.cos_sin_cache.device_index = 1; }, "cos_sin_cache is on cuda:1");
  bad([](RopeArgs& a) { a.cos_sin_cache.data = nullptr; }, "cos_sin_cache has a null data pointer");
  bad([](RopeArgs& a) { a.cos_sin_cache.data = static_cast<uint8_t*>(a.cos_sin_cache.data) + 2; }, "cos_sin_cache must be 4-byte aligned");
  // bad_position_count
  bad([](RopeArgs& a) { a.bad_position_count.dtype = DType::f32; }, "rope: bad_position_count must be i32");
  bad([](RopeArgs& a) { a.bad_position_count.shape[0] = 2; }, "bad_position_count must hold one i32, got [2] i32");
  bad([](RopeArgs& a) { a.bad_position_count.device = fusedmoe::Device::cpu; }, "bad_position_count must be in CUDA device memory");
  bad([](RopeArgs& a) { a.bad_position_count.device_index = 1; }, "bad_position_count is on cuda:1");
  bad([](RopeArgs& a) { a.bad_position_count.data = static_cast<uint8_t*>(a.bad_position_count.data) + 2; },
      "bad_position_count must be 4-byte aligned");
  // limits and the device
  bad([](RopeArgs& a) {
    a.q.shape[0] = int64_t(1) << 31;
    a.k = {};
    a.positions.shape[0] = int64_t(1) << 31;
  }, "at most 2^31 - 1 tokens and 2^24 rotated values per token");
  bad([](RopeArgs& a) {
    for (TensorRef* t : {&a.q, &a.k, &a.positions, &a.cos_sin_cache, &a.bad_position_count}) t->device_index = 1;
  }, "rope: the tensors are on cuda:1 but the current device is cuda:0");
  // and the unchanged arguments still run
  rope(good, nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());
}

// Small shapes that still reach every path (both styles, k, partial rope, inverse, several tokens
// per CTA, split tokens, narrow vectors, bad positions, i64, PDL), for compute-sanitizer's
// memcheck / racecheck / synccheck / initcheck (scripts/gpu_check.sh).
TEST(RopeGpuSanitizer, SmallShapes) {
  FMOE_SKIP_WITHOUT_GPU();
  std::vector<Case> cases;
  for (RopeStyle s : {RopeStyle::neox, RopeStyle::gptj}) {
    Case a = deepseek_q(3, s);  // one token over several item ranges (decode split)
    a.Hq = 64, a.bad = 1;
    cases.push_back(a);
    Case b = llama_qk(5, s);  // fused qkv, padded rows
    b.Hq = 4, b.Hk = 2, b.fused = true, b.tok_pad = 8, b.pos_i64 = true, b.bad = 2, b.inverse = true;
    cases.push_back(b);
    Case d;  // one small head: several tokens per CTA, more tokens than threads in a CTA
    d.T = 300, d.Hq = 1, d.D = 4, d.R = 2, d.style = s, d.bad = 5, d.max_position = 64;
    cases.push_back(d);
    Case e = llama_qk(7, s);  // narrow vectors, f16, PDL
    e.Hq = 3, e.Hk = 1, e.dtype = DType::f16, e.offset = 1, e.pdl = true;
    cases.push_back(e);
    Case f = llama_qk(2, s);  // f32
    f.Hq = 2, f.Hk = 1, f.dtype = DType::f32, f.R = 64;
    cases.push_back(f);
  }
  for (const Case& c : cases) run_case(c, 42);
}
