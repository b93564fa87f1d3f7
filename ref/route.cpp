// Routing reference. Selection is decided on monotone transforms of the logits, so it does not
// depend on how exp/sigmoid round; weights are computed in double.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "fusedmoe/error.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Indices of the k largest of score[0..n), best first; equal scores: lower index first.
std::vector<int> top_k_indices(const double* score, int n, int k,
                               const std::vector<char>* allowed = nullptr) {
  std::vector<int> idx;
  idx.reserve(size_t(n));
  for (int i = 0; i < n; ++i)
    if (!allowed || (*allowed)[size_t(i)]) idx.push_back(i);
  k = std::min<int>(k, int(idx.size()));
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  idx.resize(size_t(k));
  return idx;
}

}  // namespace

Routing route(const RoutingConfig& cfg, const float* logits, int T, int E, int k,
              const float* bias) {
  FMOE_REQUIRE(T >= 0 && E >= 1 && k >= 1 && k <= E, "ref::route: T=%d E=%d k=%d", T, E, k);
  const bool needs_bias = (cfg.fn == RoutingFn::sigmoid_grouped_topk && cfg.correction_bias) ||
                          (cfg.fn == RoutingFn::topk_softmax && cfg.router_bias);
  FMOE_REQUIRE(!needs_bias || bias, "ref::route: %s routing needs its bias vector [E]",
               routing_fn_name(cfg.fn));
  Routing r;
  r.num_tokens = T;
  r.top_k = k;
  r.ids.resize(size_t(T) * k);
  r.weights.resize(size_t(T) * k);
  std::vector<double> score(static_cast<size_t>(E)), choice(static_cast<size_t>(E));
  for (int t = 0; t < T; ++t) {
    const float* l = logits + size_t(t) * E;
    std::vector<int> sel;
    std::vector<double> w(static_cast<size_t>(k));
    switch (cfg.fn) {
      case RoutingFn::softmax_topk: {
        double mx = -INFINITY;
        for (int e = 0; e < E; ++e) {
          double v = l[e];
          if (cfg.softcap > 0) v = double(cfg.softcap) * std::tanh(v / double(cfg.softcap));
          choice[size_t(e)] = v;
          mx = std::max(mx, v);
        }
        double sum = 0;
        for (int e = 0; e < E; ++e) sum += (score[size_t(e)] = std::exp(choice[size_t(e)] - mx));
        sel = top_k_indices(choice.data(), E, k);
        for (int j = 0; j < k; ++j) w[size_t(j)] = score[size_t(sel[size_t(j)])] / sum;
        if (cfg.renormalize) {
          double s = 0;
          for (double v : w) s += v;
          for (double& v : w) v /= s;
        }
        break;
      }
      case RoutingFn::sigmoid_grouped_topk: {
        for (int e = 0; e < E; ++e) {
          score[size_t(e)] = sigmoid(double(l[e]));
          choice[size_t(e)] = score[size_t(e)] + (cfg.correction_bias ? double(bias[e]) : 0.0);
        }
        const int G = cfg.num_groups, per = E / G;
        std::vector<double> group_score(static_cast<size_t>(G));
        for (int g = 0; g < G; ++g) {
          // Group score: the sum of its two best choice scores (one if the group has one).
          const std::vector<int> best = top_k_indices(choice.data() + size_t(g) * per, per, 2);
          double s = 0;
          for (int i : best) s += choice[size_t(g) * per + size_t(i)];
          group_score[size_t(g)] = s;
        }
        const std::vector<int> groups = top_k_indices(group_score.data(), G, cfg.topk_groups);
        std::vector<char> allowed(size_t(E), 0);
        for (int g : groups) std::fill_n(allowed.begin() + size_t(g) * per, per, char(1));
        sel = top_k_indices(choice.data(), E, k, &allowed);
        for (int j = 0; j < k; ++j) w[size_t(j)] = score[size_t(sel[size_t(j)])];
        if (cfg.renormalize) {
          double s = 0;
          for (double v : w) s += v;
          for (double& v : w) v /= (s + 1e-20);  // DeepSeek-V3's guard against an all-zero sum
        }
        break;
      }
      case RoutingFn::sigmoid_top1_on_input: {
        FMOE_REQUIRE(k == 1, "ref::route: sigmoid_top1_on_input needs k=1, got %d", k);
        for (int e = 0; e < E; ++e) choice[size_t(e)] = l[e];
        sel = top_k_indices(choice.data(), E, 1);
        w[0] = sigmoid(double(l[sel[0]]));
        break;
      }
      case RoutingFn::topk_softmax: {
        for (int e = 0; e < E; ++e)
          choice[size_t(e)] = double(l[e]) + (cfg.router_bias ? double(bias[e]) : 0.0);
        sel = top_k_indices(choice.data(), E, k);
        const double mx = choice[size_t(sel[0])];
        double s = 0;
        for (int j = 0; j < k; ++j) s += (w[size_t(j)] = std::exp(choice[size_t(sel[size_t(j)])] - mx));
        for (double& v : w) v /= s;
        break;
      }
    }
    for (int j = 0; j < k; ++j) {
      r.ids[size_t(t) * k + j] = sel[size_t(j)];
      r.weights[size_t(t) * k + j] = float(w[size_t(j)] * double(cfg.routed_scaling_factor));
    }
  }
  return r;
}

Permutation permute(const int32_t* ids, int T, int k, int E) {
  Permutation p;
  p.counts.assign(size_t(E), 0);
  const int64_t R = int64_t(T) * k;
  for (int64_t r = 0; r < R; ++r) {
    FMOE_REQUIRE(ids[r] >= 0 && ids[r] < E, "ref::permute: route %lld has expert id %d, valid [0, %d)",
                 (long long)r, ids[r], E);
    ++p.counts[size_t(ids[r])];
  }
  p.offsets.assign(size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e) p.offsets[size_t(e) + 1] = p.offsets[size_t(e)] + p.counts[size_t(e)];
  std::vector<int32_t> cursor(p.offsets.begin(), p.offsets.end() - 1);
  p.sorted_route_ids.resize(size_t(R));
  p.route_slot.resize(size_t(R));
  for (int64_t r = 0; r < R; ++r) {
    const int32_t slot = cursor[size_t(ids[r])]++;
    p.sorted_route_ids[size_t(slot)] = int32_t(r);
    p.route_slot[size_t(r)] = slot;
  }
  return p;
}

}  // namespace fusedmoe::ref
