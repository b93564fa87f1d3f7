// `fusedmoe bench --op gemv`: the NVFP4 batched GEMV on the GPUMODE nvfp4_gemv shapes (both forms
// of b) and the MoE decode form on DeepSeek-V3's gate/up projection, cold L2.
//
// Floors: batched, every byte of A (K/2 + K/16 per row, + the globals), b and c once; MoE, the
// bytes of the distinct experts a launch reads (averaged over the rotated routings), x, y and the
// routing. Cold L2: A copies (batched) or the experts picked (MoE) rotate so that consecutive
// launches read more than twice the L2. Each timed configuration is first checked on sampled
// outputs against a float64 computation of the same codes.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/gemv.hpp"
#include "gemv/gemv_launch.hpp"
#include "ref/random.hpp"

namespace fusedmoe::bench {
namespace {

TensorRef dref(const void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorRef::contiguous(const_cast<void*>(p), t, shape, Device::cuda, 0);
}

// Random NVFP4 codes on the host: any byte is a valid pair of E2M1 codes; block scales in
// 2^-4 .. 2^5 (never NaN); globals near 1/64.
void random_nvfp4_host(std::vector<uint8_t>& q, std::vector<uint8_t>& s, uint64_t seed) {
  for (size_t i = 0; i < q.size(); i += 8) {
    const uint64_t h = ref::hash3(seed, 1, i / 8);
    for (size_t j = 0; j < 8 && i + j < q.size(); ++j) q[i + j] = uint8_t(h >> (8 * j));
  }
  for (size_t i = 0; i < s.size(); ++i) s[i] = uint8_t(0x18 + ref::hash3(seed, 2, i) % 0x48);
}

double nvfp4_at(const uint8_t* q, const uint8_t* s, int64_t k) {
  const uint8_t byte = q[k / 2];
  return double(fmt::e2m1_to_float(k % 2 ? byte >> 4 : byte & 0xF)) * double(fmt::e4m3_to_float(s[k / 16]));
}

double out_at(const std::vector<uint16_t>& y, int64_t i) { return double(fmt::f16_to_float(y[size_t(i)])); }

// |got - want| within fp16 output rounding plus an fp32-accumulation allowance.
void expect_close(double got, double want, double abs_sum, const std::string& what) {
  const double tol = 0x1p-10 * std::fabs(want) + 64 * 0x1p-24 * abs_sum + 1e-30;
  FMOE_REQUIRE(std::fabs(got - want) <= tol, "bench gemv: %s: got %.9g, want %.9g (abs_sum %.6g): the "
               "kernel is wrong, not timing it", what.c_str(), got, want, abs_sum);
}

std::string pct_note(const Row& r) {
  return strf("%.1f%% of copy bw", r.floor_us > 0 ? 100.0 * r.floor_us / r.t.median_us : 0.0);
}

struct ConfigScope : detail::ScopedKnob<std::string> {  // a forced config for one measurement
  explicit ConfigScope(const std::string& name) : ScopedKnob(&detail::Knobs::force_config, name) {}
};

// The configs to time: the automatic choice ("") and, with --configs all, every other one of
// the same mode that can run the problem.
std::vector<std::string> configs_to_time(const cli::Args& args, detail::GemvMode mode) {
  std::vector<std::string> out = {""};
  if (args.str("configs", "auto") == "all")
    for (int i = 0; i < int(detail::GemvConfigId::count); ++i) {
      const detail::GemvConfigInfo c = detail::gemv_config_info(detail::GemvConfigId(i));
      if (c.mode == mode && !c.generic) out.push_back(c.name);
    }
  return out;
}

std::vector<bool> pdl_modes(const cli::Args& args) {
  if (args.str("time", "on") == "off") return {};  // verify only (one launch per config, for ncu)
  const std::string m = args.str("pdl", "off");
  FMOE_REQUIRE(m == "off" || m == "on" || m == "both", "bench gemv: --pdl must be off, on or both, got %s", m.c_str());
  if (m == "both") return {false, true};
  return {m == "on"};
}

// ---- batched ----------------------------------------------------------------------------------
void bench_batched(const Context& ctx, const cli::Args& args, int M, int K, int L, bool b_nvfp4) {
  const Ceilings& c = *ctx.ceil;
  const int64_t a_bytes_per_mat = int64_t(M) * (K / 2) + int64_t(M) * (K / 16);
  const int64_t a_bytes = a_bytes_per_mat * L;
  // Enough A copies that a rotation reads more than twice the L2.
  const int copies = int(std::max<int64_t>(2, int64_t(std::ceil(2.0 * c.l2_bytes / double(a_bytes)))));
  std::vector<uint8_t> hq(size_t(L) * M * (K / 2)), hs(size_t(L) * M * (K / 16));
  random_nvfp4_host(hq, hs, 11);
  std::vector<float> hg(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) hg[size_t(l)] = (1.0f + 0.25f * float(l % 3)) / 64.0f;
  std::vector<uint8_t> hbq(size_t(L) * (K / 2)), hbs(size_t(L) * (K / 16));
  random_nvfp4_host(hbq, hbs, 12);
  std::vector<float> hbg(static_cast<size_t>(L), 1.0f / 32);
  const std::vector<float> bx = ref::random_bf16(int64_t(L) * K, 13, 1, 1.0f);
  std::vector<uint16_t> hbh(bx.size());
  for (size_t i = 0; i < bx.size(); ++i) hbh[i] = fmt::bf16_from_float(bx[i]);

  std::vector<DeviceBuffer> dq, ds;
  for (int r = 0; r < copies; ++r) {
    dq.push_back(DeviceBuffer::from(hq));
    ds.push_back(DeviceBuffer::from(hs));
  }
  DeviceBuffer dg = DeviceBuffer::from(hg), dbq = DeviceBuffer::from(hbq), dbs = DeviceBuffer::from(hbs),
               dbg = DeviceBuffer::from(hbg), dbh = DeviceBuffer::from(hbh), dc(size_t(L) * M * 2);
  auto make_args = [&](int r, bool pdl) {
    GemvNvfp4Args a;
    a.a = dref(dq[size_t(r)].get(), DType::e2m1x2, {L, M, K / 2});
    a.a_scale = dref(ds[size_t(r)].get(), DType::e4m3, {L, M, K / 16});
    a.a_global = dref(dg.get(), DType::f32, {L});
    if (b_nvfp4) {
      a.b = dref(dbq.get(), DType::e2m1x2, {L, K / 2});
      a.b_scale = dref(dbs.get(), DType::e4m3, {L, K / 16});
      a.b_global = dref(dbg.get(), DType::f32, {L});
    } else {
      a.b = dref(dbh.get(), DType::bf16, {L, K});
    }
    a.c = dref(dc.get(), DType::f16, {L, M});
    a.pdl = pdl;
    return a;
  };
  // Sampled check of copy 0: 48 rows per matrix.
  auto verify = [&](const std::string& what) {
    dc.fill(0xFF);
    gemv_nvfp4(make_args(0, false), ctx.stream);
    FMOE_CUDA(cudaStreamSynchronize(ctx.stream));
    const std::vector<uint16_t> y = dc.to_host<uint16_t>();
    for (int l = 0; l < L; ++l)
      for (int i = 0; i < 48; ++i) {
        const int m = int((int64_t(i) * 7919) % M);
        const uint8_t* qa = hq.data() + (size_t(l) * M + m) * (K / 2);
        const uint8_t* sa = hs.data() + (size_t(l) * M + m) * (K / 16);
        double v = 0, s = 0;
        for (int64_t k = 0; k < K; ++k) {
          const double bv = b_nvfp4 ? nvfp4_at(hbq.data() + size_t(l) * (K / 2), hbs.data() + size_t(l) * (K / 16), k) *
                                          double(hbg[size_t(l)])
                                    : double(bx[size_t(l) * K + k]);
          const double p = nvfp4_at(qa, sa, k) * double(hg[size_t(l)]) * bv;
          v += p;
          s += std::fabs(p);
        }
        expect_close(out_at(y, int64_t(l) * M + m), v, s, strf("%s l=%d m=%d", what.c_str(), l, m));
      }
  };
  const std::string shape = strf("m%d k%d L%d b=%s", M, K, L, b_nvfp4 ? "nvfp4" : "bf16");
  for (const std::string& forced : configs_to_time(args, detail::GemvMode::batched)) {
    ConfigScope scope(forced);
    const detail::GemvChoice ch = detail::plan_gemv_nvfp4(make_args(0, false));
    const std::string name = detail::gemv_config_info(ch.id).name;
    if (!forced.empty() && forced != name) continue;
    verify(shape + " " + name);
    for (bool pdl : pdl_modes(args)) {
      Row r;
      r.op = "gemv";
      r.shape = shape;
      r.config = name + (forced.empty() ? "" : "*");
      r.mode = pdl ? "cold+pdl" : "cold";
      r.t = time_graph([&](cudaStream_t s, int i) { gemv_nvfp4(make_args(i % copies, pdl), s); }, ctx.stream);
      r.flops = 2.0 * double(M) * K * L;
      r.weight_bytes = double(a_bytes) + 4.0 * L;
      r.bytes = r.weight_bytes + (b_nvfp4 ? double(L) * (K / 2 + K / 16 + 4) : double(L) * K * 2) + double(L) * M * 2;
      set_floor(r, c, "bf16");
      r.note = pct_note(r) + (forced.empty() ? " (auto: " + ch.reason + ")" : "");
      print_row(r, c);
      ctx.rows->push_back(r);
    }
  }
}

// ---- MoE decode (DeepSeek-V3 gate/up: E = 256 experts of [4096, 7168], top-8) ------------------
void bench_moe(const Context& ctx, const cli::Args& args, const std::vector<long long>& tokens) {
  const Ceilings& c = *ctx.ceil;
  const int E = 256, N = 4096, K = 7168, top_k = 8;
  const int64_t q_per = int64_t(N) * (K / 2), s_per = int64_t(N) * (K / 16);
  const int kDistinct = 8;  // distinct host experts, tiled over the 256 device slots
  std::vector<uint8_t> hq(size_t(kDistinct * q_per)), hs(size_t(kDistinct * s_per));
  random_nvfp4_host(hq, hs, 21);
  DeviceBuffer dq(size_t(E) * size_t(q_per)), ds(size_t(E) * size_t(s_per));
  dq.upload(hq.data(), hq.size());
  ds.upload(hs.data(), hs.size());
  for (int e = kDistinct; e < E; ++e) {  // same codes, other addresses: still cold in L2
    FMOE_CUDA(cudaMemcpy(dq.get<uint8_t>() + e * q_per, dq.get<uint8_t>() + (e % kDistinct) * q_per,
                         size_t(q_per), cudaMemcpyDeviceToDevice));
    FMOE_CUDA(cudaMemcpy(ds.get<uint8_t>() + e * s_per, ds.get<uint8_t>() + (e % kDistinct) * s_per,
                         size_t(s_per), cudaMemcpyDeviceToDevice));
  }
  // (cudaMemcpy between device buffers returns before the copy is done, on the legacy stream,
  // which the bench's non-blocking stream does not wait for)
  FMOE_CUDA(cudaDeviceSynchronize());
  std::vector<float> hg(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) hg[size_t(e)] = (1.0f + 0.25f * float(e % 5)) / 64.0f;
  DeviceBuffer dg = DeviceBuffer::from(hg);
  const double expert_bytes = double(q_per + s_per) + 4.0;

  for (long long T : tokens) {
    // 16 routings (distinct experts within a token), rotated so consecutive launches read
    // different experts: each launch streams its experts from HBM.
    const int kRoutings = 16;
    std::vector<DeviceBuffer> d_ids, d_w;
    std::vector<std::vector<int32_t>> h_ids;
    std::vector<std::vector<float>> h_w;
    double distinct_sum = 0;
    for (int r = 0; r < kRoutings; ++r) {
      ref::Rng rng(ref::hash3(31, uint64_t(T), uint64_t(r)));
      std::vector<int32_t> ids;
      std::vector<float> w;
      std::vector<char> used(size_t(E), 0);
      int distinct = 0;
      for (long long t = 0; t < T; ++t) {
        std::vector<char> mine(size_t(E), 0);
        for (int j = 0; j < top_k; ++j) {
          int e;
          do e = rng.below(E); while (mine[size_t(e)]);
          mine[size_t(e)] = 1;
          if (!used[size_t(e)]) { used[size_t(e)] = 1; ++distinct; }
          ids.push_back(e);
          w.push_back(0.05f + 0.2f * rng.uniform());
        }
      }
      distinct_sum += distinct;
      d_ids.push_back(DeviceBuffer::from(ids));
      d_w.push_back(DeviceBuffer::from(w));
      h_ids.push_back(std::move(ids));
      h_w.push_back(std::move(w));
    }
    const std::vector<float> xf = ref::random_bf16(T * K, 41, uint64_t(T), 1.0f);
    std::vector<uint16_t> hx(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) hx[i] = fmt::bf16_from_float(xf[i]);
    DeviceBuffer dx = DeviceBuffer::from(hx), dy(size_t(T) * N * 2);
    auto make_args = [&](int r, bool pdl) {
      MoeGemvNvfp4Args a;
      a.w = dref(dq.get(), DType::e2m1x2, {E, N, K / 2});
      a.w_scale = dref(ds.get(), DType::e4m3, {E, N, K / 16});
      a.w_global = dref(dg.get(), DType::f32, {E});
      a.x = dref(dx.get(), DType::bf16, {T, K});
      a.topk_ids = dref(d_ids[size_t(r)].get(), DType::i32, {T, top_k});
      a.topk_weights = dref(d_w[size_t(r)].get(), DType::f32, {T, top_k});
      a.y = dref(dy.get(), DType::f16, {T, N});
      a.pdl = pdl;
      return a;
    };
    auto verify = [&](const std::string& what) {
      dy.fill(0xFF);
      moe_gemv_nvfp4(make_args(0, false), ctx.stream);
      FMOE_CUDA(cudaStreamSynchronize(ctx.stream));
      const std::vector<uint16_t> y = dy.to_host<uint16_t>();
      for (long long t = 0; t < T; ++t)
        for (int i = 0; i < 24; ++i) {
          const int n = int((int64_t(i) * 7919 + t * 131) % N);
          double v = 0, s = 0;
          for (int j = 0; j < top_k; ++j) {
            const int e = h_ids[0][size_t(t * top_k + j)];
            const uint8_t* qa = hq.data() + (e % kDistinct) * q_per + int64_t(n) * (K / 2);
            const uint8_t* sa = hs.data() + (e % kDistinct) * s_per + int64_t(n) * (K / 16);
            double d = 0, ds_ = 0;
            for (int64_t k = 0; k < K; ++k) {
              const double p = nvfp4_at(qa, sa, k) * double(hg[size_t(e)]) * double(xf[size_t(t * K + k)]);
              d += p;
              ds_ += std::fabs(p);
            }
            const double wt = double(h_w[0][size_t(t * top_k + j)]);
            v += wt * d;
            s += std::fabs(wt) * ds_;
          }
          expect_close(out_at(y, t * N + n), v, s, strf("%s t=%lld n=%d", what.c_str(), T, n));
        }
    };
    const std::string shape = strf("E%d n%d k%d top%d", E, N, K, top_k);
    for (const std::string& forced : configs_to_time(args, detail::GemvMode::grouped)) {
      ConfigScope scope(forced);
      const detail::GemvChoice ch = detail::plan_moe_gemv_nvfp4(make_args(0, false));
      const std::string name = detail::gemv_config_info(ch.id).name;
      if (!forced.empty() && forced != name) continue;
      verify(shape + " " + name);
      for (bool pdl : pdl_modes(args)) {
        Row r;
        r.op = "moe_gemv";
        r.shape = shape;
        r.tokens = int(T);
        r.config = name + (forced.empty() ? "" : "*");
        r.mode = pdl ? "cold+pdl" : "cold";
        r.t = time_graph([&](cudaStream_t s, int i) { moe_gemv_nvfp4(make_args(i % kRoutings, pdl), s); },
                         ctx.stream);
        r.flops = 2.0 * double(T) * top_k * N * K;
        r.weight_bytes = distinct_sum / kRoutings * expert_bytes;
        r.bytes = r.weight_bytes + double(T) * K * 2 + double(T) * N * 2 + double(T) * top_k * 8;
        set_floor(r, c, "bf16");
        r.note = pct_note(r) + strf(" (%.1f distinct experts)", distinct_sum / kRoutings) +
                 (forced.empty() ? " (auto: " + ch.reason + ")" : "");
        print_row(r, c);
        ctx.rows->push_back(r);
      }
    }
  }
}

void run(const Context& ctx, const cli::Args& args) {
  const std::string which = args.str("shapes", "all");
  FMOE_REQUIRE(which == "all" || which == "contest" || which == "moe",
               "bench gemv: --shapes must be all, contest or moe, got %s", which.c_str());
  if (which != "moe")
    for (const auto& [M, K, L] : std::vector<std::tuple<int, int, int>>{{7168, 16384, 1}, {4096, 7168, 8}, {7168, 2048, 4}})
      for (bool nv : {true, false}) bench_batched(ctx, args, M, K, L, nv);
  if (which != "contest") bench_moe(ctx, args, args.int_list("tokens", {1, 4}, 1, 64));
}

using Kind = BenchOption::Kind;
const Register kRegister({"gemv",
                          "NVFP4 GEMV: GPUMODE nvfp4_gemv shapes (b NVFP4 and bf16), MoE decode "
                          "on DeepSeek-V3 gate/up",
                          {{"tokens", "LIST", "MoE decode token counts in [1, 64] (default 1,4)",
                            Kind::int_list, {}, 1, 64},
                           {"configs", "auto|all", "time the automatic config only, or every "
                            "config of the mode (default auto)", Kind::choice, {"auto", "all"}},
                           {"pdl", "off|on|both", "programmatic dependent launch (default off)",
                            Kind::choice, {"off", "on", "both"}},
                           {"shapes", "all|contest|moe", "which shapes (default all)",
                            Kind::choice, {"all", "contest", "moe"}},
                           {"time", "on|off", "off: verify only, one launch per config (for "
                            "ncu; default on)", Kind::choice, {"on", "off"}}},
                          run});

}  // namespace
}  // namespace fusedmoe::bench
