// The reference layer and grouped GEMM against an independent, straightforward float64
// computation: whole-tensor dequantization (fmt::dequantize_*), per-route loops in token order,
// no grouping, no blocking.
#include <algorithm>
#include <cmath>

#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;

namespace {

// Whole weight tensor [E, N, K] as floats through the public dequantizers.
std::vector<float> dequant_all(const ref::WeightSet& w) {
  std::vector<float> out(size_t(w.E) * w.N * w.K);
  const size_t per = size_t(w.N) * w.K;
  for (int e = 0; e < w.E; ++e) {
    float* o = out.data() + e * per;
    switch (w.precision) {
      case Precision::bf16:
        for (size_t i = 0; i < per; ++i) o[i] = fmt::bf16_to_float(w.bf16[e * per + i]);
        break;
      case Precision::fp8_block: {
        const size_t ns = size_t((w.N + 127) / 128) * ((w.K + 127) / 128);
        fmt::dequantize_fp8_block_128x128(w.q.data() + e * per, w.scale.data() + e * ns, w.N, w.K, o);
        break;
      }
      case Precision::nvfp4:
        fmt::dequantize_nvfp4(w.q.data() + e * per / 2, w.block_scale.data() + e * per / 16,
                              w.global_scale[size_t(e)], w.N, w.K, o);
        break;
      case Precision::mxfp4:
        fmt::dequantize_mxfp4(w.q.data() + e * per / 2, w.block_scale.data() + e * per / 32, w.N,
                              w.K, o);
        break;
    }
  }
  return out;
}

// Activation rows quantized and dequantized with the public codecs; nvfp4 uses one global
// scale for all rows (the amax of all of them), as the layer does.
// fp8 scales per `fp8_block` columns (128 for the layer input, 64 for the intermediate).
std::vector<float> quant_dequant_rows(Precision p, const std::vector<float>& a, int rows, int K,
                                      int fp8_block = 128) {
  std::vector<float> out(a.size());
  switch (p) {
    case Precision::bf16:
      for (size_t i = 0; i < a.size(); ++i) out[i] = fmt::round_to_bf16(a[i]);
      break;
    case Precision::fp8_block: {
      std::vector<uint8_t> q(a.size());
      const int64_t nblk = (K + fp8_block - 1) / fp8_block;
      std::vector<float> s(size_t(rows * nblk));
      fmt::quantize_fp8_per_token(a.data(), rows, K, fp8_block, q.data(), s.data());
      for (int64_t r = 0; r < rows; ++r)  // written out here: an independent dequantizer
        for (int64_t c = 0; c < K; ++c)
          out[size_t(r * K + c)] = fmt::e4m3_to_float(q[size_t(r * K + c)]) * s[size_t(r * nblk + c / fp8_block)];
      break;
    }
    case Precision::nvfp4: {
      const float g = fmt::nvfp4_global_scale(fmt::abs_max(a.data(), int64_t(a.size())));
      std::vector<uint8_t> q(a.size() / 2), s(a.size() / 16);
      fmt::quantize_nvfp4(a.data(), rows, K, g, q.data(), s.data());
      fmt::dequantize_nvfp4(q.data(), s.data(), g, rows, K, out.data());
      break;
    }
    case Precision::mxfp4:
      ADD_FAILURE() << "mxfp4 is a weight format (activations bf16)";
      break;
  }
  return out;
}

double act_fn(const ActivationConfig& c, double g, double u) {
  if (c.fn == ActivationFn::swiglu) return g / (1 + std::exp(-g)) * u;
  g = std::min(g, double(c.limit));
  u = std::max(std::min(u, double(c.limit)), -double(c.limit));
  return (u + 1) * g / (1 + std::exp(-double(c.alpha) * g));
}

// rows [R, H] through one expert MLP each (expert_of[r]); returns [R, H] double.
std::vector<double> naive_mlps(const MoeConfig& cfg, const ref::WeightSet& w13s,
                               const ref::WeightSet& w2s, const std::vector<float>& b13,
                               const std::vector<float>& b2, const std::vector<float>& rows,
                               const std::vector<int>& expert_of) {
  const int R = int(expert_of.size()), H = w13s.K, I = w13s.N / 2;
  const std::vector<float> w13 = dequant_all(w13s), w2 = dequant_all(w2s);
  const std::vector<float> a = quant_dequant_rows(cfg.activation_precision, rows, R, H);
  std::vector<float> h(size_t(R) * I);
  for (int r = 0; r < R; ++r) {
    const int e = expert_of[size_t(r)];
    std::vector<float> gu(static_cast<size_t>(2 * I));
    for (int n = 0; n < 2 * I; ++n) {
      double s = 0;
      for (int k = 0; k < H; ++k)
        s += double(a[size_t(r) * H + k]) * double(w13[(size_t(e) * 2 * I + n) * H + k]);
      gu[size_t(n)] = float(s + (b13.empty() ? 0.0 : double(b13[size_t(e) * 2 * I + n])));
    }
    for (int i = 0; i < I; ++i) {
      const bool inter = cfg.activation.fn == ActivationFn::swiglu_clamped;
      const double g = gu[size_t(inter ? 2 * i : i)], u = gu[size_t(inter ? 2 * i + 1 : I + i)];
      // fp8: quantized per 64 straight from fp32 (the GPU epilogue); else rounded to bf16.
      const float v = float(act_fn(cfg.activation, g, u));
      h[size_t(r) * I + i] = cfg.activation_precision == Precision::fp8_block ? v : fmt::round_to_bf16(v);
    }
  }
  const std::vector<float> hq = quant_dequant_rows(cfg.activation_precision, h, R, I, 64);
  std::vector<double> out(size_t(R) * H);
  for (int r = 0; r < R; ++r) {
    const int e = expert_of[size_t(r)];
    for (int n = 0; n < H; ++n) {
      double s = 0;
      for (int i = 0; i < I; ++i)
        s += double(hq[size_t(r) * I + i]) * double(w2[(size_t(e) * H + n) * I + i]);
      out[size_t(r) * H + n] = s + (b2.empty() ? 0.0 : double(b2[size_t(e) * H + n]));
    }
  }
  return out;
}

std::vector<double> naive_layer(const ref::LayerWeights& lw, const std::vector<float>& x,
                                const ref::Routing& routing, int T) {
  const MoeConfig& c = lw.cfg;
  const int H = c.hidden, k = c.top_k;
  const bool on_input = c.routing.fn == RoutingFn::sigmoid_top1_on_input;
  std::vector<float> rows(size_t(T) * k * H);
  std::vector<int> expert_of(size_t(T) * k);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      expert_of[size_t(t * k + j)] = routing.ids[size_t(t * k + j)];
      for (int h = 0; h < H; ++h) {
        const float v = x[size_t(t) * H + h];
        rows[(size_t(t) * k + j) * H + h] =
            on_input ? fmt::round_to_bf16(v * routing.weights[size_t(t * k + j)]) : v;
      }
    }
  const std::vector<double> o = naive_mlps(c, lw.w13, lw.w2, lw.b13, lw.b2, rows, expert_of);
  std::vector<double> y(size_t(T) * H, 0.0);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j)
      for (int h = 0; h < H; ++h)
        y[size_t(t) * H + h] += (on_input ? 1.0 : double(routing.weights[size_t(t * k + j)])) *
                                o[(size_t(t) * k + j) * H + h];
  if (c.num_shared_experts > 0) {
    const std::vector<double> s =
        naive_mlps(c, lw.shared_w13, lw.shared_w2, {}, {}, x, std::vector<int>(size_t(T), 0));
    for (int t = 0; t < T; ++t) {
      double gate = 1;
      if (c.shared_expert_gate) {
        double d = 0;
        for (int h = 0; h < H; ++h) d += double(x[size_t(t) * H + h]) * lw.shared_gate[size_t(h)];
        gate = 1 / (1 + std::exp(-d));
      }
      for (int h = 0; h < H; ++h) y[size_t(t) * H + h] += gate * double(float(s[size_t(t) * H + h]));
    }
  }
  return y;
}

MoeConfig small_config(const char* name, RoutingFn fn, ActivationFn act, Precision w, Precision a) {
  MoeConfig c;
  c.name = name;
  // Two 128-blocks and a partial one; multiples of 16 for nvfp4, of 32 for mxfp4.
  const bool mx = w == Precision::mxfp4;
  c.hidden = mx ? 288 : 272;
  c.intermediate = mx ? 96 : 80;  // one partial 128-block
  c.num_experts = 8;
  c.top_k = fn == RoutingFn::sigmoid_top1_on_input ? 1 : 3;
  c.routing.fn = fn;
  c.activation.fn = act;
  c.weight_precision = w;
  c.activation_precision = a;
  if (fn == RoutingFn::sigmoid_grouped_topk) {
    c.routing.num_groups = 4;
    c.routing.topk_groups = 2;
    c.routing.correction_bias = true;
    c.routing.routed_scaling_factor = 2.5f;
  }
  if (fn == RoutingFn::topk_softmax) c.routing.router_bias = true;
  if (act == ActivationFn::swiglu_clamped) c.expert_bias = true;
  if (fn != RoutingFn::topk_softmax) {
    c.num_shared_experts = 1;
    c.shared_intermediate = mx ? 64 : 48;
    c.shared_expert_gate = fn == RoutingFn::softmax_topk;
  }
  return c;
}

}  // namespace

TEST(LayerRef, MatchesStraightforwardFloat64) {
  struct P { Precision w, a; };
  const P precisions[] = {{Precision::bf16, Precision::bf16},
                          {Precision::fp8_block, Precision::fp8_block},
                          {Precision::nvfp4, Precision::bf16},
                          {Precision::nvfp4, Precision::nvfp4},
                          {Precision::mxfp4, Precision::bf16}};
  const RoutingFn fns[] = {RoutingFn::softmax_topk, RoutingFn::sigmoid_grouped_topk,
                           RoutingFn::sigmoid_top1_on_input, RoutingFn::topk_softmax};
  for (const P p : precisions)
    for (RoutingFn fn : fns)
      for (ActivationFn act : {ActivationFn::swiglu, ActivationFn::swiglu_clamped})
        for (int T : {0, 1, 6, 17}) {
          const MoeConfig cfg = small_config("small", fn, act, p.w, p.a);
          const uint64_t seed = test::seeds_for(test::hash_ints({int(p.w), int(p.a), int(fn), int(act), T}))[2];
          SCOPED_TRACE(cfg.summary() + " T=" + std::to_string(T) + " seed " + std::to_string(seed));
          const ref::LayerWeights lw = ref::make_random_layer(cfg, seed);
          const std::vector<float> x = ref::random_bf16(int64_t(T) * cfg.hidden, seed, 7, 1.0f);
          const std::vector<float> logits = ref::tie_free_logits(T, cfg.num_experts, seed);
          const ref::LayerResult got = ref::moe_layer(lw, x.data(), logits.data(), T);
          ASSERT_EQ(int(got.y.size()), T * cfg.hidden);
          const std::vector<double> want = naive_layer(lw, x, got.routing, T);
          double err2 = 0, ref2 = 0, rms = 0;
          for (double v : want) rms += v * v;
          rms = std::sqrt(rms / std::max<size_t>(want.size(), 1));
          size_t loose = 0;
          for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_TRUE(std::isfinite(got.y[i])) << i;
            // Both paths quantize the same inputs, so mostly only the final bf16 rounding (half
            // an ulp, 2^-9 relative) and double summation order separate them. But the two GEMM1
            // sums round the intermediate to bf16 from different summation orders: at a rounding
            // boundary one intermediate element lands one bf16 ulp apart, its FP8/NVFP4 code can
            // flip (one step is 1/16 to 1/2 relative), and that token's whole output row moves
            // by ~1% of its rms (single elements up to 4%: FMOE_SEED=3961713529, topk_softmax
            // fp8 T=17, 0.0058 at rms ~0.14; an e4m3 step is up to 1/8 of the value). Such rows
            // may use the loose bound of 10% of the rms; a real bug (wrong expert, scale or
            // block) moves elements by far more, and the count and global L2 checks below stay.
            const double tight = std::ldexp(std::fabs(want[i]), -8) + 1e-4 * rms + 1e-9;
            const double err = std::fabs(got.y[i] - want[i]);
            if (err > tight) {
              ++loose;
              ASSERT_LE(err, tight + 1e-1 * rms) << "element " << i << " got " << got.y[i]
                                                 << " want " << want[i];
            }
            err2 += (got.y[i] - want[i]) * (got.y[i] - want[i]);
            ref2 += want[i] * want[i];
          }
          // One flipped code moves a whole token row, so one row's worth is allowed on top of
          // a tenth of the elements (at T=1 that row is the whole output).
          EXPECT_LE(loose, want.size() / 10 + size_t(T > 0 ? cfg.hidden : 0))
              << "elements beyond the tight bound";
          // Quantized intermediates (fp8 per 64, nvfp4 per 16) can also flip a block's scale
          // when its amax element lands one bf16 ulp apart, moving every code of the block:
          // measured 6.6e-3 at FMOE_SEED=3961713529 (topk_softmax fp8 T=17). A wrong expert,
          // scale or block gives O(1).
          const double l2_bound = p.a == Precision::bf16 ? 3e-3 : 1e-2;
          if (ref2 > 0) {
            EXPECT_LT(std::sqrt(err2 / ref2), l2_bound);
          }
        }
}

TEST(GemmRef, IntegerInputsAreExact) {
  // bf16 and E4M3 hold small integers exactly, so every dot product is exact in double.
  for (uint64_t seed : test::seeds_for(0x6E)) {
    ref::Rng rng(seed);
    const int E = 5, N = 24, K = 160;
    const std::vector<int32_t> offsets = {0, 3, 3, 10, 11, 19};  // expert 1 is empty
    const int M = offsets.back();
    for (Precision p : {Precision::bf16, Precision::fp8_block}) {
      std::vector<float> w(size_t(E) * N * K), a(size_t(M) * K);
      for (float& v : w) v = float(rng.below(9) - 4);
      for (float& v : a) v = float(rng.below(9) - 4);
      ref::WeightSet ws = ref::make_weights(p, w.data(), E, N, K);
      ref::ActRows as = ref::make_acts(p, a.data(), M, K);
      if (p == Precision::fp8_block) {  // codes of the integers themselves, unit scales
        for (size_t i = 0; i < w.size(); ++i) ws.q[i] = fmt::e4m3_from_float(w[i]);
        for (float& s : ws.scale) s = 1.0f;
        for (size_t i = 0; i < a.size(); ++i) as.q[i] = fmt::e4m3_from_float(a[i]);
        for (float& s : as.scale) s = 1.0f;
      }
      const ref::GemmResult r = ref::grouped_gemm(as, ws, offsets.data(), true);
      for (int e = 0; e < E; ++e)
        for (int m = offsets[size_t(e)]; m < offsets[size_t(e) + 1]; ++m)
          for (int n = 0; n < N; ++n) {
            long long dot = 0, abs_dot = 0;
            for (int k = 0; k < K; ++k) {
              const long long prod = (long long)a[size_t(m) * K + k] * (long long)w[(size_t(e) * N + n) * K + k];
              dot += prod;
              abs_dot += prod < 0 ? -prod : prod;
            }
            ASSERT_EQ(r.value[size_t(m) * N + n], double(dot)) << precision_name(p);
            ASSERT_EQ(r.abs_sum[size_t(m) * N + n], double(abs_dot));
          }
    }
  }
}

TEST(GemmRef, RejectsMismatchedShapes) {
  std::vector<float> w(2 * 16 * 32, 1.0f), a(3 * 16, 1.0f);
  const ref::WeightSet ws = ref::make_weights(Precision::bf16, w.data(), 2, 16, 32);
  const ref::ActRows as = ref::make_acts(Precision::bf16, a.data(), 3, 16);
  const std::vector<int32_t> offsets = {0, 1, 3};
  test::expect_error([&] { ref::grouped_gemm(as, ws, offsets.data(), false); }, "K=16");
}
