// `fusedmoe bench --op rope`: RoPE in place on DeepSeek-V3's q (128 heads of 192, the last 64
// rotated) and Llama's q + k (32 + 8 heads of 128, all rotated), or an explicit shape, cold L2.
//
// Bytes counted (the floor): the rope parts of q and k, read and written once (2 * T * heads *
// rope_dim * 2 bytes for bf16), plus one cos/sin row (rope_dim * 4 bytes) and one i64 position per
// token. The values of a head outside its rope part (DeepSeek: 128 of 192) are neither moved nor
// counted. Two ceilings in the same run: the harness's 1 GiB copy bandwidth, and a copy of the
// same bytes (src -> dst of the rope parts' size, the best of two copy kernels and
// cudaMemcpyAsync, rotated as cold as the rope launches), which has the same launch and latency
// costs at small sizes and is the fair yardstick there.
//
// In place: each graph replay rotates the data again (positions rotate by their angle once more);
// the values stay bounded (rotations keep norms) and the work per launch is the same, so this is
// fine for timing. Each shape is first checked against the CPU reference on sampled tokens.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/env.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/rope.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "rope/rope_launch.hpp"

namespace fusedmoe::bench {
namespace {

struct RopeShape {
  std::string name;
  int Hq = 0, Hk = 0, D = 0, R = 0;
};

TensorRef dref(void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorRef::contiguous(p, t, shape, Device::cuda, 0);
}

// Verifies one rope call on (q, k) against the reference on up to 16 sampled tokens; throws on a
// mismatch (never times a wrong kernel).
void verify(const Context& ctx, const RopeShape& s, int64_t T, RopeArgs args, const std::vector<uint16_t>& hq,
            const std::vector<uint16_t>& hk, const std::vector<int64_t>& pos, const std::vector<float>& cache,
            int64_t max_position, DeviceBuffer& dq, DeviceBuffer& dk) {
  dq.upload(hq.data(), hq.size() * 2);
  if (s.Hk) dk.upload(hk.data(), hk.size() * 2);
  rope(args, ctx.stream);
  FMOE_CUDA(cudaStreamSynchronize(ctx.stream));
  const std::vector<uint16_t> gq = dq.to_host<uint16_t>();
  const std::vector<uint16_t> gk = s.Hk ? dk.to_host<uint16_t>() : std::vector<uint16_t>();
  const ref::RopeStyle st = args.style == RopeStyle::gptj ? ref::RopeStyle::gptj_interleaved : ref::RopeStyle::neox;
  for (int i = 0; i < 16 && i < T; ++i) {
    const int64_t t = (int64_t(i) * 7919) % T;
    auto check = [&](const char* name, const std::vector<uint16_t>& in, const std::vector<uint16_t>& got, int H) {
      const size_t row = size_t(H) * s.D;
      std::vector<float> x(row);
      for (size_t j = 0; j < row; ++j) x[j] = fmt::bf16_to_float(in[size_t(t) * row + j]);
      const auto r = ref::rope_from_cache(x.data(), 1, H, s.D, s.R, &pos[size_t(t)], cache.data(), max_position, st, args.inverse);
      for (size_t j = 0; j < row; ++j) {
        const double g = fmt::bf16_to_float(got[size_t(t) * row + j]), w = r.value[j];
        // one bf16 ulp (<= 2^-7 |w|) plus the fp32 rounding before it (tests/rope explains)
        const double bound = 0x1p-7 * std::fabs(w) + 4 * 0x1p-24 * r.abs_terms[j] + 1e-30;
        FMOE_REQUIRE(std::fabs(g - w) <= bound, "bench rope: %s %s[t=%lld, %zu]: got %.9g, want %.9g: the kernel "
                     "is wrong, not timing it", s.name.c_str(), name, (long long)t, j, g, w);
      }
    };
    check("q", hq, gq, s.Hq);
    if (s.Hk) check("k", hk, gk, s.Hk);
  }
}

// The same-bytes copy: `bytes` from rotating sources to rotating destinations, the fastest way.
Stats time_copy(const Context& ctx, size_t bytes, int copies, int per_graph) {
  bytes = (bytes + 15) / 16 * 16;
  std::vector<DeviceBuffer> src, dst;
  for (int c = 0; c < copies; ++c) {
    src.emplace_back(bytes);
    dst.emplace_back(bytes);
    src.back().fill(0x3C);
  }
  Stats best;
  for (int way = 0; way < 3; ++way) {
    const Stats st = time_graph([&](cudaStream_t s, int i) {
      const int c = i % copies;
      if (way == 2)
        FMOE_CUDA(cudaMemcpyAsync(dst[size_t(c)].get(), src[size_t(c)].get(), bytes, cudaMemcpyDeviceToDevice, s));
      else
        launch_stream_kernel(way == 0 ? StreamKernel::copy_cs4 : StreamKernel::copy_nc8, src[size_t(c)].get(),
                             dst[size_t(c)].get(), bytes, s);
    }, ctx.stream, per_graph);
    if (best.samples == 0 || st.median_us < best.median_us) best = st;
  }
  return best;
}

void bench_shape(const Context& ctx, const RopeShape& s, int64_t T, RopeStyle style,
                 const std::vector<bool>& pdls) {
  const Ceilings& c = *ctx.ceil;
  const int64_t max_position = std::max<int64_t>(32768, T);
  const size_t q_elems = size_t(T) * s.Hq * s.D, k_elems = size_t(T) * s.Hk * s.D;
  const double rope_bytes = double(T) * (s.Hq + s.Hk) * s.R * 2.0;  // the rope parts, bf16
  // Rotating copies of q and k so that consecutive launches touch more than twice the L2; the
  // graph holds one launch per copy (at least 20), so every replay is cold too.
  const int copies = int(std::min<double>(8192, std::max(2.0, std::ceil(2.0 * c.l2_bytes / rope_bytes))));
  const int per_graph = std::max(20, copies);
  std::vector<uint16_t> hq(q_elems), hk(k_elems);
  {
    const std::vector<float> v = ref::random_bf16(int64_t(q_elems + k_elems), 51, uint64_t(T), 1.0f);
    for (size_t i = 0; i < q_elems; ++i) hq[i] = fmt::bf16_from_float(v[i]);
    for (size_t i = 0; i < k_elems; ++i) hk[i] = fmt::bf16_from_float(v[q_elems + i]);
  }
  std::vector<DeviceBuffer> dq, dk;
  for (int r = 0; r < copies; ++r) {
    dq.push_back(DeviceBuffer::from(hq));
    if (s.Hk) dk.push_back(DeviceBuffer::from(hk));
  }
  std::vector<int64_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = t;  // a prefill: positions 0 .. T-1
  const std::vector<float> cache = ref::rope_cos_sin_cache(int(max_position), s.R, 10000.0);
  DeviceBuffer dpos = DeviceBuffer::from(pos), dcache = DeviceBuffer::from(cache);
  auto make_args = [&](int r, bool pdl) {
    RopeArgs a;
    a.q = dref(dq[size_t(r)].get(), DType::bf16, {T, s.Hq, s.D});
    if (s.Hk) a.k = dref(dk[size_t(r)].get(), DType::bf16, {T, s.Hk, s.D});
    a.positions = dref(dpos.get(), DType::i64, {T});
    a.cos_sin_cache = dref(dcache.get(), DType::f32, {max_position, s.R});
    a.rope_dim = s.R;
    a.style = style;
    a.pdl = pdl;
    return a;
  };
  verify(ctx, s, T, make_args(0, false), hq, hk, pos, cache, max_position, dq[0], s.Hk ? dk[0] : dq[0]);
  const detail::RopeChoice ch = detail::plan_rope(make_args(0, false));
  const Stats copy = time_copy(ctx, size_t(rope_bytes), copies, per_graph);
  const double copy_gbps = 2.0 * rope_bytes / (copy.median_us * 1e-6) / 1e9;
  for (bool pdl : pdls) {
    Row r;
    r.op = "rope";
    r.shape = strf("%s %s", s.name.c_str(), rope_style_name(style));
    r.tokens = int(T);
    r.config = detail::rope_config_info(ch.id).name;
    r.mode = pdl ? "cold+pdl" : "cold";
    r.t = time_graph([&](cudaStream_t st, int i) { rope(make_args(i % copies, pdl), st); }, ctx.stream, per_graph);
    r.bytes = 2.0 * rope_bytes + double(T) * (s.R * 4.0 + 8.0);
    set_floor(r, c, "bf16");
    const double gbps = r.bytes / (r.t.median_us * 1e-6) / 1e9;
    r.note = strf("%.1f%% of copy bw (1 GiB); same-bytes copy %.2f us (p10 %.2f, p90 %.2f) = %.0f GB/s, rope at "
                  "%.1f%% of it (auto: %s)",
                  100.0 * r.floor_us / r.t.median_us, copy.median_us, copy.p10_us, copy.p90_us, copy_gbps,
                  100.0 * gbps / copy_gbps, ch.reason.c_str());
    print_row(r, c);
    ctx.rows->push_back(r);
  }
}

void run(const Context& ctx, const cli::Args& args) {
  std::vector<RopeShape> shapes;
  const bool explicit_shape = args.has("heads") || args.has("kv-heads") || args.has("head-dim") || args.has("rope-dim");
  if (explicit_shape) {
    FMOE_REQUIRE(!args.has("shape"), "bench rope: give --shape or the explicit --heads/--kv-heads/--head-dim/--rope-dim, not both");
    RopeShape s;
    s.Hq = int(args.integer("heads", 32, 1, 1024));
    s.Hk = int(args.integer("kv-heads", 0, 0, 1024));
    s.D = int(args.integer("head-dim", 128, 2, 4096));
    s.R = int(args.integer("rope-dim", s.D, 2, 4096));
    FMOE_REQUIRE(s.R % 2 == 0 && s.R <= s.D, "bench rope: --rope-dim %d must be even and at most --head-dim %d", s.R, s.D);
    s.name = s.Hk ? strf("q[%d,%d]+k[%d] r%d", s.Hq, s.D, s.Hk, s.R) : strf("q[%d,%d] r%d", s.Hq, s.D, s.R);
    shapes.push_back(s);
  } else {
    const std::string which = args.choice("shape", "both", {"deepseek", "llama", "both"});
    if (which != "llama") shapes.push_back({"deepseek q[128,192] r64", 128, 0, 192, 64});
    if (which != "deepseek") shapes.push_back({"llama q[32,128]+k[8] r128", 32, 8, 128, 128});
  }
  const std::string st = args.choice("style", "neox", {"neox", "gptj", "both"});
  std::vector<RopeStyle> styles;
  if (st != "gptj") styles.push_back(RopeStyle::neox);
  if (st != "neox") styles.push_back(RopeStyle::gptj);
  const std::string p = args.choice("pdl", "off", {"off", "on", "both"});
  std::vector<bool> pdls;
  if (p != "on") pdls.push_back(false);
  if (p != "off") pdls.push_back(true);
  for (const RopeShape& s : shapes)
    for (RopeStyle style : styles)
      for (long long T : args.int_list("tokens", {1, 16, 128, 1024, 4096, 16384}, 1, 1 << 20))
        bench_shape(ctx, s, T, style, pdls);
}

using Kind = BenchOption::Kind;
const Register kRegister({"rope",
                          "RoPE in place: DeepSeek-V3 q (rope 64 of 192) and Llama q + k, vs the "
                          "same-bytes copy",
                          {{"shape", "deepseek|llama|both", "model shapes (default both)", Kind::choice,
                            {"deepseek", "llama", "both"}},
                           {"heads", "N", "explicit shape: q heads (instead of --shape)", Kind::integer, {}, 1, 1024},
                           {"kv-heads", "N", "explicit shape: k heads, 0 for none (default 0)", Kind::integer, {}, 0, 1024},
                           {"head-dim", "N", "explicit shape: head_dim (default 128)", Kind::integer, {}, 2, 4096},
                           {"rope-dim", "N", "explicit shape: rope_dim, even, <= head_dim (default head_dim)",
                            Kind::integer, {}, 2, 4096},
                           {"tokens", "LIST", "token counts (default 1,16,128,1024,4096,16384)", Kind::int_list,
                            {}, 1, 1 << 20},
                           {"style", "neox|gptj|both", "pairing (default neox)", Kind::choice, {"neox", "gptj", "both"}},
                           {"pdl", "off|on|both", "programmatic dependent launch (default off)", Kind::choice,
                            {"off", "on", "both"}}},
                          run});

}  // namespace
}  // namespace fusedmoe::bench
