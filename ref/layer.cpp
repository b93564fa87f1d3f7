// The whole MoE layer, chained from the per-stage references.
#include <cmath>

#include "common/parallel.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {
namespace {

// Stream ids of the random tensors of a layer.
enum Stream : uint64_t {
  kW13 = 1, kW2, kB13, kB2, kRouteBias, kSharedW13, kSharedW2, kSharedGate
};

// `progress` counts elements across all the tensors of the layer: `done_before` precede these.
WeightSet random_weights(Precision p, int E, int N, int K, uint64_t seed, uint64_t stream,
                         const ProgressFn& progress, int64_t& done_before, int64_t total) {
  const float scale = std::sqrt(3.0f / float(K));  // unit-variance dot products for unit inputs
  const int64_t per = int64_t(N) * K;
  ProgressFn per_expert;
  if (progress)
    per_expert = [&, start = done_before](int64_t experts, int64_t) {
      progress(start + experts * per, total);
    };
  WeightSet w = make_weights(p, E, N, K, [&](int e, float* out) {
    detail::parallel_for(per, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) out[i] = scale * uniform_pm1(seed, stream, uint64_t(e * per + i));
    }, 1 << 16);
  }, per_expert);
  done_before += E * per;
  return w;
}

}  // namespace

// Rows of `a` (already in expert-sorted order), grouped by `offsets`, through
// GEMM1 -> bias -> activation -> bf16 -> quantize -> GEMM2 -> bias: double [rows, H].
std::vector<double> expert_mlp(const MoeConfig& cfg, const WeightSet& w13, const WeightSet& w2,
                               const float* b13, const float* b2, const std::vector<float>& a,
                               const std::vector<int32_t>& offsets, int h_block) {
  FMOE_REQUIRE(h_block == 64 || h_block == 128, "ref::expert_mlp: h_block=%d must be 64 or 128", h_block);
  const int rows = int(offsets.back());
  const int H = w13.K, I2 = w13.N, I = I2 / 2;
  const ActRows acts1 = make_acts(cfg.activation_precision, a.data(), rows, H);
  const GemmResult g1 = grouped_gemm(acts1, w13, offsets.data(), false);
  std::vector<float> gate_up(size_t(rows) * I2), h(size_t(rows) * I);
  for (int e = 0; e < w13.E; ++e)
    for (int r = offsets[size_t(e)]; r < offsets[size_t(e) + 1]; ++r)
      for (int n = 0; n < I2; ++n)
        gate_up[size_t(r) * I2 + n] =
            float(g1.value[size_t(r) * I2 + n] + (b13 ? double(b13[int64_t(e) * I2 + n]) : 0.0));
  activation(cfg.activation, gate_up.data(), rows, I, h.data());
  // The intermediate: fp8 is quantized from the fp32 activation per h_block columns (GEMM 1's
  // epilogue holds 64, or with two-wave tiles 128, intermediate values of a route per tile and
  // quantizes them in registers); bf16 (and nvfp4's bf16 activations) is rounded to bf16.
  if (cfg.activation_precision != Precision::fp8_block)
    for (float& v : h) v = fmt::round_to_bf16(v);
  const ActRows acts2 = make_acts(cfg.activation_precision, h.data(), rows, I, 0.0f, h_block);
  const GemmResult g2 = grouped_gemm(acts2, w2, offsets.data(), false);
  std::vector<double> out(g2.value);
  if (b2)
    for (int e = 0; e < w2.E; ++e)
      for (int r = offsets[size_t(e)]; r < offsets[size_t(e) + 1]; ++r)
        for (int n = 0; n < H; ++n) out[size_t(r) * H + n] += double(b2[int64_t(e) * H + n]);
  return out;
}

LayerWeights make_random_layer(const MoeConfig& cfg, uint64_t seed, const ProgressFn& progress) {
  cfg.validate();
  LayerWeights lw;
  lw.cfg = cfg;
  const int H = cfg.hidden, I = cfg.intermediate, E = cfg.num_experts;
  const int64_t shared_i = cfg.num_shared_experts > 0 ? cfg.shared_intermediate : 0;
  const int64_t total = 3 * int64_t(H) * (int64_t(E) * I + shared_i);  // w13, w2, shared pair
  int64_t done = 0;
  lw.w13 = random_weights(cfg.weight_precision, E, 2 * I, H, seed, kW13, progress, done, total);
  lw.w2 = random_weights(cfg.weight_precision, E, H, I, seed, kW2, progress, done, total);
  if (cfg.expert_bias) {
    lw.b13 = random_bf16(int64_t(E) * 2 * I, seed, kB13, 0.1f);
    lw.b2 = random_bf16(int64_t(E) * H, seed, kB2, 0.1f);
  }
  if (cfg.routing.correction_bias) lw.route_bias = random_bf16(E, seed, kRouteBias, 0.05f);
  if (cfg.routing.router_bias) lw.route_bias = random_bf16(E, seed, kRouteBias, 0.5f);
  if (cfg.num_shared_experts > 0) {
    const int S = cfg.shared_intermediate;
    lw.shared_w13 =
        random_weights(cfg.weight_precision, 1, 2 * S, H, seed, kSharedW13, progress, done, total);
    lw.shared_w2 =
        random_weights(cfg.weight_precision, 1, H, S, seed, kSharedW2, progress, done, total);
    if (cfg.shared_expert_gate)
      lw.shared_gate = random_bf16(H, seed, kSharedGate, std::sqrt(3.0f / float(H)));
  }
  return lw;
}

void mlp(const MoeConfig& cfg, const WeightSet& w13, const WeightSet& w2, const float* b13,
         const float* b2, const float* x, int T, std::vector<float>& out, int h_block) {
  const std::vector<float> a(x, x + int64_t(T) * w13.K);
  const std::vector<double> o = expert_mlp(cfg, w13, w2, b13, b2, a, {0, T}, h_block);
  out.assign(o.begin(), o.end());
}

LayerResult moe_layer(const LayerWeights& lw, const float* x, const float* logits, int T, int h_block) {
  const MoeConfig& cfg = lw.cfg;
  const int H = cfg.hidden, E = cfg.num_experts, k = cfg.top_k;
  FMOE_REQUIRE(T >= 0, "ref::moe_layer: T=%d", T);
  LayerResult res;
  res.routing = route(cfg.routing, logits, T, E, k,
                      lw.route_bias.empty() ? nullptr : lw.route_bias.data());
  const Permutation perm = permute(res.routing.ids.data(), T, k, E);
  const bool on_input = cfg.routing.fn == RoutingFn::sigmoid_top1_on_input;

  // Gather the routed rows in expert-sorted order (weights on the input: bf16(x * w)).
  const int R = T * k;
  std::vector<float> a(size_t(R) * H);
  for (int s = 0; s < R; ++s) {
    const int route = perm.sorted_route_ids[size_t(s)], t = route / k;
    const float w = res.routing.weights[size_t(route)];
    for (int h = 0; h < H; ++h) {
      const float v = x[int64_t(t) * H + h];
      a[size_t(s) * H + h] = on_input ? fmt::round_to_bf16(v * w) : v;
    }
  }
  const std::vector<double> o =
      expert_mlp(cfg, lw.w13, lw.w2, lw.b13.empty() ? nullptr : lw.b13.data(),
                 lw.b2.empty() ? nullptr : lw.b2.data(), a, perm.offsets, h_block);

  // Weighted combine in route order, then the shared MLP, then one bf16 rounding.
  std::vector<double> y(size_t(T) * H, 0.0);
  combine(o.data(), perm.route_slot.data(), on_input ? nullptr : res.routing.weights.data(), T, k,
          H, y.data());
  if (cfg.num_shared_experts > 0) {
    std::vector<float> shared;
    mlp(cfg, lw.shared_w13, lw.shared_w2, nullptr, nullptr, x, T, shared, h_block);
    for (int t = 0; t < T; ++t) {
      double gate = 1.0;
      if (cfg.shared_expert_gate) {
        double d = 0;
        for (int h = 0; h < H; ++h) d += double(x[int64_t(t) * H + h]) * double(lw.shared_gate[size_t(h)]);
        gate = 1.0 / (1.0 + std::exp(-d));
      }
      for (int h = 0; h < H; ++h) y[size_t(t) * H + h] += gate * double(shared[size_t(t) * H + h]);
    }
  }
  res.y.resize(y.size());
  for (size_t i = 0; i < y.size(); ++i) res.y[i] = fmt::round_to_bf16(float(y[i]));
  return res;
}

}  // namespace fusedmoe::ref
