// The routed expert projection: the reference of the fused FP8 pipeline (src/moe).
#include <cmath>

#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {

ProjectionResult moe_projection(const RoutingConfig& cfg, const float* x, const float* logits,
                                const float* bias, int T, int k, const WeightSet& w,
                                const Routing* given) {
  const int E = w.E, N = w.N, K = w.K;
  ProjectionResult res;
  res.routing = given ? *given : route(cfg, logits, T, E, k, bias);
  const bool on_input = cfg.fn == RoutingFn::sigmoid_top1_on_input;
  const Permutation perm = permute(res.routing.ids.data(), T, k, E);

  // One activation row per route, in expert-sorted order. Each row is quantized on its own, so a
  // token's codes are the same in every row that repeats it (as the kernel's per-token copy).
  const int R = T * k;
  std::vector<float> a(size_t(R) * K);
  for (int s = 0; s < R; ++s) {
    const int route = perm.sorted_route_ids[size_t(s)], t = route / k;
    const float wt = res.routing.weights[size_t(route)];
    for (int c = 0; c < K; ++c) {
      const float v = x[int64_t(t) * K + c];
      a[size_t(s) * K + c] = on_input ? fmt::round_to_bf16(v * wt) : v;
    }
  }
  const ActRows acts = make_acts(Precision::fp8_block, a.data(), R, K);
  const GemmResult g = grouped_gemm(acts, w, perm.offsets.data(), true);

  res.y.assign(size_t(T) * N, 0.0);
  res.abs_sum.assign(size_t(T) * N, 0.0);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int route = t * k + j, slot = perm.route_slot[size_t(route)];
      const double wt = on_input ? 1.0 : double(res.routing.weights[size_t(route)]);
      for (int n = 0; n < N; ++n) {
        res.y[size_t(t) * N + n] += wt * g.value[size_t(slot) * N + n];
        res.abs_sum[size_t(t) * N + n] += std::fabs(wt) * g.abs_sum[size_t(slot) * N + n];
      }
    }
  return res;
}

}  // namespace fusedmoe::ref
