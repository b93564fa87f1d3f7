// Routing reference against straightforward re-derivations, on tie-free logits.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;

namespace {

// Experts sorted by descending key (full sort: independent of the reference's partial_sort).
std::vector<int> sorted_by(const std::vector<double>& key) {
  std::vector<int> idx(key.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return key[size_t(a)] > key[size_t(b)]; });
  return idx;
}

struct Case {
  int T, E, k;
};

}  // namespace

TEST(RouteRef, SoftmaxTopkSelectionAndWeights) {
  for (const Case c : {Case{7, 8, 2}, Case{33, 128, 8}, Case{16, 256, 8}, Case{5, 512, 16}})
    for (bool renorm : {true, false})
      for (float softcap : {0.0f, 30.0f})
        for (uint64_t seed : test::seeds_for(test::hash_ints({c.T, c.E, c.k, renorm}))) {
          RoutingConfig cfg;
          cfg.renormalize = renorm;
          cfg.softcap = softcap;
          cfg.routed_scaling_factor = 1.5f;
          const std::vector<float> logits = ref::tie_free_logits(c.T, c.E, seed);
          const ref::Routing r = ref::route(cfg, logits.data(), c.T, c.E, c.k, nullptr);
          for (int t = 0; t < c.T; ++t) {
            std::vector<double> l(logits.begin() + t * c.E, logits.begin() + (t + 1) * c.E);
            if (softcap > 0) for (double& v : l) v = softcap * std::tanh(v / softcap);
            const std::vector<int> order = sorted_by(l);
            double z = 0;
            for (double v : l) z += std::exp(v);
            double sel_sum = 0;
            for (int j = 0; j < c.k; ++j) sel_sum += std::exp(l[size_t(order[size_t(j)])]) / z;
            for (int j = 0; j < c.k; ++j) {
              ASSERT_EQ(r.ids[size_t(t * c.k + j)], order[size_t(j)])
                  << "token " << t << " choice " << j << " seed " << seed;
              double w = std::exp(l[size_t(order[size_t(j)])]) / z;
              if (renorm) w /= sel_sum;
              ASSERT_NEAR(r.weights[size_t(t * c.k + j)], 1.5 * w, 1e-6 * 1.5 * w + 1e-12);
            }
          }
        }
}

TEST(RouteRef, HotExpertIsEveryTokensFirstChoice) {
  for (uint64_t seed : test::seeds_for(0x407)) {
    const int T = 50, E = 64, k = 4, hot = int(seed % E);
    RoutingConfig cfg;
    const std::vector<float> logits = ref::tie_free_logits(T, E, seed, 8.0f, hot);
    const ref::Routing r = ref::route(cfg, logits.data(), T, E, k, nullptr);
    for (int t = 0; t < T; ++t) ASSERT_EQ(r.ids[size_t(t * k)], hot) << "token " << t;
    const ref::Permutation p = ref::permute(r.ids.data(), T, k, E);
    EXPECT_EQ(p.counts[size_t(hot)], T);
  }
}

TEST(RouteRef, SigmoidGroupedTopk) {
  struct G { int E, groups, keep, k; };
  for (const G g : {G{256, 8, 4, 8}, G{384, 1, 1, 8}, G{64, 8, 2, 6}, G{16, 16, 4, 4}})
    for (uint64_t seed : test::seeds_for(test::hash_ints({g.E, g.groups, g.keep, g.k}))) {
      const int T = 19;
      RoutingConfig cfg;
      cfg.fn = RoutingFn::sigmoid_grouped_topk;
      cfg.num_groups = g.groups;
      cfg.topk_groups = g.keep;
      cfg.correction_bias = true;
      cfg.routed_scaling_factor = 2.5f;
      const std::vector<float> logits = ref::tie_free_logits(T, g.E, seed, 10.0f);
      // Bias on a coarse grid of its own: biased scores stay distinct.
      std::vector<float> bias(static_cast<size_t>(g.E));
      for (int e = 0; e < g.E; ++e) bias[size_t(e)] = float((e * 37) % 11) * 0.01f;
      const ref::Routing r = ref::route(cfg, logits.data(), T, g.E, g.k, bias.data());
      const int per = g.E / g.groups;
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(static_cast<size_t>(g.E)), choice(static_cast<size_t>(g.E));
        for (int e = 0; e < g.E; ++e) {
          s[size_t(e)] = 1.0 / (1.0 + std::exp(-double(logits[size_t(t * g.E + e)])));
          choice[size_t(e)] = s[size_t(e)] + bias[size_t(e)];
        }
        std::vector<double> gscore(static_cast<size_t>(g.groups));
        for (int gi = 0; gi < g.groups; ++gi) {
          std::vector<double> v(choice.begin() + gi * per, choice.begin() + (gi + 1) * per);
          std::sort(v.rbegin(), v.rend());
          gscore[size_t(gi)] = v[0] + (per > 1 ? v[1] : 0.0);
        }
        const std::vector<int> gorder = sorted_by(gscore);
        std::vector<double> masked(choice);
        for (int e = 0; e < g.E; ++e) {
          const int gi = e / per;
          if (std::find(gorder.begin(), gorder.begin() + g.keep, gi) == gorder.begin() + g.keep)
            masked[size_t(e)] = -1e30;
        }
        const std::vector<int> order = sorted_by(masked);
        double sum = 0;
        for (int j = 0; j < g.k; ++j) sum += s[size_t(order[size_t(j)])];
        for (int j = 0; j < g.k; ++j) {
          ASSERT_EQ(r.ids[size_t(t * g.k + j)], order[size_t(j)]) << "token " << t << " seed " << seed;
          const double w = 2.5 * s[size_t(order[size_t(j)])] / sum;
          ASSERT_NEAR(r.weights[size_t(t * g.k + j)], w, 1e-6 * w);
        }
      }
    }
}

TEST(RouteRef, Llama4Top1AndGptOss) {
  for (uint64_t seed : test::seeds_for(0x114)) {
    const int T = 11, E = 128;
    const std::vector<float> logits = ref::tie_free_logits(T, E, seed);
    RoutingConfig l4;
    l4.fn = RoutingFn::sigmoid_top1_on_input;
    const ref::Routing r = ref::route(l4, logits.data(), T, E, 1, nullptr);
    for (int t = 0; t < T; ++t) {
      const auto* row = logits.data() + t * E;
      const int best = int(std::max_element(row, row + E) - row);
      ASSERT_EQ(r.ids[size_t(t)], best);
      ASSERT_NEAR(r.weights[size_t(t)], 1.0 / (1.0 + std::exp(-double(row[best]))), 1e-7);
    }
    RoutingConfig oss;
    oss.fn = RoutingFn::topk_softmax;
    oss.router_bias = true;
    std::vector<float> bias(static_cast<size_t>(E));
    for (int e = 0; e < E; ++e) bias[size_t(e)] = float((e * 13) % 7) * 0.001f;
    const int k = 4;
    const ref::Routing o = ref::route(oss, logits.data(), T, E, k, bias.data());
    for (int t = 0; t < T; ++t) {
      std::vector<double> l(static_cast<size_t>(E));
      for (int e = 0; e < E; ++e) l[size_t(e)] = double(logits[size_t(t * E + e)]) + bias[size_t(e)];
      const std::vector<int> order = sorted_by(l);
      double z = 0;
      for (int j = 0; j < k; ++j) z += std::exp(l[size_t(order[size_t(j)])]);
      for (int j = 0; j < k; ++j) {
        ASSERT_EQ(o.ids[size_t(t * k + j)], order[size_t(j)]);
        ASSERT_NEAR(o.weights[size_t(t * k + j)], std::exp(l[size_t(order[size_t(j)])]) / z, 1e-6);
      }
    }
  }
}

TEST(RouteRef, RejectsMissingBiasAndBadK) {
  RoutingConfig cfg;
  cfg.fn = RoutingFn::sigmoid_grouped_topk;
  cfg.correction_bias = true;
  std::vector<float> logits(16, 0.0f);
  test::expect_error([&] { ref::route(cfg, logits.data(), 2, 8, 2, nullptr); }, "needs its bias");
  test::expect_error([&] { ref::route(RoutingConfig{}, logits.data(), 2, 8, 9, nullptr); }, "k=9");
}
