// The expert-parallel plan (src/dist/ep_plan.hpp) and the EP reference layer (ref/ep.cpp), on the
// CPU. The plan is checked against an independent oracle (expert sets, owner table built by
// counting), by its invariants (counts add up, inverse maps compose to the identity) and by an
// integer payload moved through dispatch -> receive -> return -> combine, where every sum is
// exact. The EP reference is checked against ref::moe_layer on the concatenated tokens.
#include <algorithm>
#include <climits>
#include <cmath>
#include <set>

#include "dist/ep_plan.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using detail::DispatchPlan;
using detail::ep_check_config;
using detail::ExpertPartition;
using detail::ReceivePlan;

namespace {

// The partition rule written as counting: ranks take their E/R (+1 for the first E%R) experts in
// turn. Independent of ExpertPartition's arithmetic.
struct OwnerTable {
  std::vector<int> owner, local, first, count;
  OwnerTable(int E, int R) : owner(size_t(E)), local(size_t(E)), first(size_t(R)), count(size_t(R)) {
    int e = 0;
    for (int r = 0; r < R; ++r) {
      first[size_t(r)] = e;
      count[size_t(r)] = E / R + (r < E % R ? 1 : 0);
      for (int c = 0; c < count[size_t(r)]; ++c, ++e) {
        owner[size_t(e)] = r;
        local[size_t(e)] = c;
      }
    }
  }
};

// The dispatch of one source, computed the obvious way: per token the set of experts seen so far
// (a repeat or an id outside [0, E) is dropped), then per destination its tokens in order.
void expect_plan_matches_oracle(const DispatchPlan& p, const std::vector<int32_t>& ids,
                                const std::vector<float>& w, int T, int k, int E, int R, int cap) {
  const OwnerTable own(E, R);
  int64_t dropped = 0, overflow_rows = 0, overflow_routes = 0;
  std::vector<std::vector<int>> rows_of(static_cast<size_t>(R));  // tokens with a row per destination
  std::vector<std::vector<int>> kept(static_cast<size_t>(T));      // kept choice indices per token
  for (int t = 0; t < T; ++t) {
    std::set<int> seen;
    std::set<int> dests;
    for (int j = 0; j < k; ++j) {
      const int e = ids[size_t(t) * k + j];
      if (e < 0 || e >= E || !seen.insert(e).second) {
        ++dropped;
        continue;
      }
      kept[size_t(t)].push_back(j);
      dests.insert(own.owner[size_t(e)]);
    }
    for (int d : dests) rows_of[size_t(d)].push_back(t);
  }
  ASSERT_EQ(p.dropped_routes, dropped);
  std::vector<int32_t> token_row(size_t(T) * R, -1), route_row(size_t(T) * k, -1);
  for (int d = 0; d < R; ++d) {
    const std::vector<int>& toks = rows_of[size_t(d)];
    ASSERT_EQ(p.send_counts[size_t(d)], std::min<int>(int(toks.size()), cap)) << "rank " << d;
    for (int i = 0; i < int(toks.size()); ++i) {
      const int t = toks[size_t(i)];
      int n_here = 0;
      for (int j : kept[size_t(t)]) n_here += own.owner[size_t(ids[size_t(t) * k + j])] == d;
      if (i >= cap) {
        ++overflow_rows;
        overflow_routes += n_here;
        continue;
      }
      const size_t slot = size_t(d) * cap + size_t(i);
      token_row[size_t(t) * R + d] = i;
      ASSERT_EQ(p.row_token[slot], t) << "rank " << d << " row " << i;
      for (int j = 0; j < k; ++j) {
        const int e = ids[size_t(t) * k + j];
        const bool here = std::find(kept[size_t(t)].begin(), kept[size_t(t)].end(), j) !=
                              kept[size_t(t)].end() && own.owner[size_t(e)] == d;
        ASSERT_EQ(p.row_local_ids[slot * k + j], here ? own.local[size_t(e)] : -1)
            << "token " << t << " choice " << j << " rank " << d;
        ASSERT_EQ(p.row_weights[slot * k + j], here ? w[size_t(t) * k + j] : 0.0f);
        if (here) route_row[size_t(t) * k + j] = int32_t(slot);
      }
    }
    for (int i = p.send_counts[size_t(d)]; i < cap; ++i) {  // unused rows carry nothing
      ASSERT_EQ(p.row_token[size_t(d) * cap + i], -1);
      for (int j = 0; j < k; ++j) ASSERT_EQ(p.row_local_ids[(size_t(d) * cap + i) * k + j], -1);
    }
  }
  EXPECT_EQ(p.token_row, token_row);
  EXPECT_EQ(p.route_row, route_row);
  EXPECT_EQ(p.overflow_rows, overflow_rows);
  EXPECT_EQ(p.overflow_routes, overflow_routes);
}

// Counts that must add up on one source, whatever the ids.
void expect_counts_add_up(const DispatchPlan& p, int T, int k) {
  const int R = p.num_ranks;
  int64_t pairs = 0, sent = 0, kept = 0;
  for (int t = 0; t < T; ++t)
    for (int d = 0; d < R; ++d) pairs += p.token_row[size_t(t) * R + d] >= 0;
  for (int d = 0; d < R; ++d) sent += p.send_counts[size_t(d)];
  for (int32_t r : p.route_row) kept += r >= 0;
  EXPECT_EQ(sent, pairs) << "every sent row is one (token, rank) pair";
  EXPECT_EQ(kept + p.dropped_routes + p.overflow_routes, int64_t(T) * k) << "every route accounted";
  EXPECT_EQ(p.remote_rows(), sent - p.send_counts[size_t(p.source_rank)]);
  // A row holds exactly the routes that point at it.
  std::vector<int> routes_of_row(p.row_token.size(), 0);
  for (int32_t r : p.route_row)
    if (r >= 0) ++routes_of_row[size_t(r)];
  for (size_t slot = 0; slot < p.row_token.size(); ++slot) {
    int n = 0;
    for (int j = 0; j < k; ++j) n += p.row_local_ids[slot * k + j] >= 0;
    ASSERT_EQ(n, routes_of_row[slot]) << "slot " << slot;
    ASSERT_EQ(p.row_token[slot] >= 0, n > 0) << "slot " << slot << ": a row without routes";
  }
}

// All R ranks: each source's ids/weights [T_s, k] (global ids); the plans, the exchanged receive
// buffers and the receive plans, as the device will hold them.
struct EpSim {
  std::vector<DispatchPlan> send;
  std::vector<ReceivePlan> recv;
};
EpSim simulate(const std::vector<std::vector<int32_t>>& ids, const std::vector<std::vector<float>>& w,
               const std::vector<int>& T, int k, const ExpertPartition& part, int cap) {
  const int R = part.num_ranks();
  EpSim sim;
  for (int s = 0; s < R; ++s)
    sim.send.push_back(detail::plan_dispatch(ids[size_t(s)].data(), w[size_t(s)].data(),
                                             T[size_t(s)], k, part, s, cap));
  for (int d = 0; d < R; ++d) {
    std::vector<int32_t> counts(static_cast<size_t>(R)), rid(size_t(R) * cap * k, -7);  // -7: never read
    std::vector<float> rw(size_t(R) * cap * k, NAN);
    for (int s = 0; s < R; ++s) {
      const DispatchPlan& p = sim.send[size_t(s)];
      counts[size_t(s)] = p.send_counts[size_t(d)];
      for (int i = 0; i < counts[size_t(s)]; ++i)
        for (int j = 0; j < k; ++j) {
          rid[(size_t(s) * cap + i) * k + j] = p.row_local_ids[(size_t(d) * cap + i) * k + j];
          rw[(size_t(s) * cap + i) * k + j] = p.row_weights[(size_t(d) * cap + i) * k + j];
        }
    }
    sim.recv.push_back(detail::plan_receive(counts.data(), rid.data(), rw.data(), k, part, d, cap));
  }
  return sim;
}

// Receive offsets, the local routing, and the inverse maps composed both ways:
// (source s, token t, rank d) -> row i -> compact row on d -> slot s*cap + i -> back to t.
void expect_round_trip(const EpSim& sim, const std::vector<int>& T, int k, int cap) {
  const int R = int(sim.send.size());
  int64_t sent = 0, received = 0;
  for (int d = 0; d < R; ++d) {
    const ReceivePlan& rp = sim.recv[size_t(d)];
    ASSERT_EQ(rp.recv_offsets[0], 0);
    ASSERT_EQ(rp.clamped_counts, 0);
    ASSERT_EQ(rp.dropped_routes, 0);
    std::vector<int32_t> hist(size_t(rp.num_local_experts), 0);
    for (int s = 0; s < R; ++s) {
      ASSERT_EQ(rp.recv_counts[size_t(s)], sim.send[size_t(s)].send_counts[size_t(d)]);
      ASSERT_EQ(rp.recv_offsets[size_t(s) + 1] - rp.recv_offsets[size_t(s)], rp.recv_counts[size_t(s)]);
    }
    received += rp.num_rows();
    for (int r = 0; r < rp.num_rows(); ++r) {
      const int s = rp.row_slot[size_t(r)] / cap, i = rp.row_slot[size_t(r)] % cap;
      ASSERT_EQ(r, rp.recv_offsets[size_t(s)] + i) << "compact order is source-major";
      const DispatchPlan& p = sim.send[size_t(s)];
      const int t = p.row_token[size_t(d) * cap + i];
      ASSERT_GE(t, 0);
      ASSERT_EQ(p.token_row[size_t(t) * R + d], i) << "back to the token's row";
      for (int j = 0; j < k; ++j) {
        const int e = rp.local_ids[size_t(r) * k + j];
        ASSERT_EQ(e, p.row_local_ids[(size_t(d) * cap + i) * k + j]);
        if (e >= 0) {
          ++hist[size_t(e)];
          ASSERT_EQ(p.route_row[size_t(t) * k + j], d * cap + i) << "the route points at its row";
        }
      }
    }
    EXPECT_EQ(rp.expert_counts, hist);
  }
  for (int s = 0; s < R; ++s) {
    const DispatchPlan& p = sim.send[size_t(s)];
    for (int d = 0; d < R; ++d) sent += p.send_counts[size_t(d)];
    for (int t = 0; t < T[size_t(s)]; ++t)
      for (int d = 0; d < R; ++d) {
        const int i = p.token_row[size_t(t) * R + d];
        if (i < 0) continue;
        const ReceivePlan& rp = sim.recv[size_t(d)];
        const int r = rp.recv_offsets[size_t(s)] + i;
        ASSERT_LT(r, rp.recv_offsets[size_t(s) + 1]);
        ASSERT_EQ(rp.row_slot[size_t(r)], s * cap + i) << "token " << t << " of rank " << s;
      }
  }
  EXPECT_EQ(sent, received);
}

// An exact payload through the whole EP path. Destination d "computes" for route (row, j) of
// local expert e the value w * (global e + 1) in column 0 and w * (source token + 1) in column 1
// (integers and integer weights: every sum exact), returns it (rank order: summed per row), and
// each source combines. The result must be the sum over the token's delivered routes.
void expect_payload_round_trip(const EpSim& sim, const std::vector<std::vector<int32_t>>& ids,
                               const std::vector<std::vector<float>>& w, const std::vector<int>& T,
                               int k, const ExpertPartition& part, int cap) {
  const int R = part.num_ranks(), H = 2;
  for (bool by_route : {false, true}) {
    const int per = by_route ? k : 1;
    std::vector<std::vector<double>> back(size_t(R), std::vector<double>(size_t(R) * cap * per * H, NAN));
    for (int d = 0; d < R; ++d) {
      const ReceivePlan& rp = sim.recv[size_t(d)];
      for (int r = 0; r < rp.num_rows(); ++r) {
        const int s = rp.row_slot[size_t(r)] / cap, i = rp.row_slot[size_t(r)] % cap;
        // The token id stands for the row's activations: what arrived with it.
        const int t = sim.send[size_t(s)].row_token[size_t(d) * cap + i];
        double sum[2] = {0, 0};
        for (int j = 0; j < k; ++j) {
          const int e = rp.local_ids[size_t(r) * k + j];
          if (e < 0) continue;
          const double wt = rp.local_weights[size_t(r) * k + j];
          const double v[2] = {wt * (part.first(d) + e + 1), wt * (t + 1)};
          for (int h = 0; h < H; ++h) {
            if (by_route) back[size_t(s)][((size_t(d) * cap + i) * k + j) * H + h] = v[h];
            sum[h] += v[h];
          }
        }
        if (!by_route)
          for (int h = 0; h < H; ++h) back[size_t(s)][(size_t(d) * cap + i) * H + h] = sum[h];
      }
    }
    for (int s = 0; s < R; ++s) {
      const DispatchPlan& p = sim.send[size_t(s)];
      std::vector<double> y(size_t(T[size_t(s)]) * H, NAN);
      if (by_route)
        detail::combine_choice_order(p, back[size_t(s)].data(), H, y.data());
      else
        detail::combine_rank_order(p, back[size_t(s)].data(), H, y.data());
      for (int t = 0; t < T[size_t(s)]; ++t) {
        double want[2] = {0, 0};
        for (int j = 0; j < k; ++j)
          if (p.route_row[size_t(t) * k + j] >= 0) {
            const double wt = w[size_t(s)][size_t(t) * k + j];
            want[0] += wt * (ids[size_t(s)][size_t(t) * k + j] + 1);
            want[1] += wt * (t + 1);
          }
        ASSERT_EQ(y[size_t(t) * H], want[0]) << "rank " << s << " token " << t << " by_route " << by_route;
        ASSERT_EQ(y[size_t(t) * H + 1], want[1]) << "rank " << s << " token " << t;
      }
    }
  }
}

// Random ids [T, k] over E experts: mostly distinct valid ids, with bad ids and repeats mixed
// in at `bad_rate`. Weights small integers (exact payload sums).
void random_routes(ref::Rng& rng, int T, int k, int E, float bad_rate, std::vector<int32_t>& ids,
                   std::vector<float>& w) {
  ids.assign(size_t(T) * k, 0);
  w.assign(size_t(T) * k, 0.0f);
  const int32_t bad[] = {-1, E, E + 5, INT32_MIN, INT32_MAX};
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      int32_t e;
      if (rng.uniform() < bad_rate) {
        e = j > 0 && rng.below(2) ? ids[size_t(t) * k + size_t(rng.below(j))] : bad[rng.below(5)];
      } else {
        do {
          e = rng.below(E);
        } while (std::find(ids.begin() + ptrdiff_t(t) * k, ids.begin() + ptrdiff_t(t) * k + j, e) !=
                 ids.begin() + ptrdiff_t(t) * k + j);
      }
      ids[size_t(t) * k + j] = e;
      w[size_t(t) * k + j] = float(1 + rng.below(7));
    }
}

}  // namespace

// ---- partition ---------------------------------------------------------------------------------

TEST(EpPartition, FirstRanksOwnTheRemainder) {
  const ExpertPartition p(10, 4);
  const int first[] = {0, 3, 6, 8}, count[] = {3, 3, 2, 2};
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(p.first(r), first[r]);
    EXPECT_EQ(p.count(r), count[r]);
  }
  const int owner[] = {0, 0, 0, 1, 1, 1, 2, 2, 3, 3};
  for (int e = 0; e < 10; ++e) EXPECT_EQ(p.owner(e), owner[e]) << e;
}

TEST(EpPartition, EveryShapeAgainstCounting) {
  for (int E = 1; E <= 80; ++E)
    for (int R = 1; R <= E; ++R) {
      const ExpertPartition p(E, R);
      const OwnerTable own(E, R);
      for (int r = 0; r < R; ++r) {
        ASSERT_EQ(p.first(r), own.first[size_t(r)]) << "E=" << E << " R=" << R << " rank " << r;
        ASSERT_EQ(p.count(r), own.count[size_t(r)]) << "E=" << E << " R=" << R << " rank " << r;
        ASSERT_GE(p.count(r), 1);
      }
      ASSERT_EQ(p.first(R - 1) + p.count(R - 1), E);
      for (int e = 0; e < E; ++e) ASSERT_EQ(p.owner(e), own.owner[size_t(e)]) << "E=" << E << " R=" << R;
    }
  // The extremes named in the rule: one rank owns all, and one expert per rank.
  const ExpertPartition one(256, 1);
  EXPECT_EQ(one.count(0), 256);
  EXPECT_EQ(one.owner(255), 0);
  const ExpertPartition each(256, 256);
  for (int e = 0; e < 256; ++e) {
    EXPECT_EQ(each.owner(e), e);
    EXPECT_EQ(each.count(e), 1);
  }
  // The largest expert count a config allows, over 3 ranks (uneven: 1366, 1365, 1365).
  const ExpertPartition big(ConfigLimits::kMaxExperts, 3);
  EXPECT_EQ(big.count(0), 1366);
  EXPECT_EQ(big.first(2), 2731);
  EXPECT_EQ(big.owner(ConfigLimits::kMaxExperts - 1), 2);
}

TEST(EpPartition, RejectsRanksWithoutExperts) {
  test::expect_error([] { ExpertPartition(8, 9); },
                     "9 ranks for 8 experts: every rank must own at least one expert");
  test::expect_error([] { ExpertPartition(8, 0); }, "num_ranks=0 must be at least 1");
  test::expect_error([] { ExpertPartition(0, 1); }, "num_experts=0 must be at least 1");
}

// ---- dispatch ----------------------------------------------------------------------------------

TEST(EpDispatch, BadIdsAndRepeatsDroppedAsTheLayerDrops) {
  // E = 8 over 2 ranks (0-3, 4-7), k = 4. Token 0: 3, a repeat of 3, -1, 9 -> only 3 stays.
  // Token 1: 5, 2, 5, 2 -> 5 and 2 (first occurrences). Token 2: 7, 0, 8, 7 -> 7 and 0.
  // Dropped: 3 + 2 + 2. Rank 1's chunk starts at row cap = 4.
  const int k = 4, R = 2, cap = 4;
  const std::vector<int32_t> ids = {3, 3, -1, 9, 5, 2, 5, 2, 7, 0, 8, 7};
  const std::vector<float> w = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const ExpertPartition part(8, R);
  const DispatchPlan p = detail::plan_dispatch(ids.data(), w.data(), 3, k, part, 0, cap);
  EXPECT_EQ(p.dropped_routes, 7);
  EXPECT_EQ(p.send_counts, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(p.token_row, (std::vector<int32_t>{0, -1, 1, 0, 2, 1}));
  // Rank 0 rows: token 0 (choice 0: local 3), token 1 (choice 1: local 2), token 2 (choice 1: 0).
  EXPECT_EQ(std::vector<int32_t>(p.row_local_ids.begin(), p.row_local_ids.begin() + 12),
            (std::vector<int32_t>{3, -1, -1, -1, -1, 2, -1, -1, -1, 0, -1, -1}));
  // Rank 1 rows: token 1 (choice 0: local 1), token 2 (choice 0: local 3).
  EXPECT_EQ(std::vector<int32_t>(p.row_local_ids.begin() + 16, p.row_local_ids.begin() + 24),
            (std::vector<int32_t>{1, -1, -1, -1, 3, -1, -1, -1}));
  EXPECT_EQ(p.row_weights[size_t(1 * k + 1)], 6.0f);
  EXPECT_EQ(p.route_row, (std::vector<int32_t>{0, -1, -1, -1, 4, 1, -1, -1, 5, 2, -1, -1}));
  expect_plan_matches_oracle(p, ids, w, 3, k, 8, R, cap);
  expect_counts_add_up(p, 3, k);
}

TEST(EpDispatch, RandomCasesAgainstOracle) {
  for (int R : {1, 2, 4, 8})
    for (uint64_t seed : test::seeds_for(test::hash_ints({R, 0xE9})))
      for (int rep = 0; rep < 40; ++rep) {
        ref::Rng rng(seed + uint64_t(rep));
        const int E = R + rng.below(64), k = 1 + rng.below(std::min(8, E)), T = rng.below(50);
        const int cap = rng.below(T + 3), src = rng.below(R);
        const float bad_rate = rng.below(3) == 0 ? 0.2f : 0.0f;
        SCOPED_TRACE(strf("seed %llu rep %d: R=%d E=%d k=%d T=%d cap=%d source %d bad %.1f",
                          (unsigned long long)seed, rep, R, E, k, T, cap, src, double(bad_rate)));
        std::vector<int32_t> ids;
        std::vector<float> w;
        random_routes(rng, T, k, E, bad_rate, ids, w);
        const DispatchPlan p = detail::plan_dispatch(ids.data(), w.data(), T, k, ExpertPartition(E, R), src, cap);
        expect_plan_matches_oracle(p, ids, w, T, k, E, R, cap);
        expect_counts_add_up(p, T, k);
        if (HasFatalFailure() || HasNonfatalFailure()) return;
      }
}

TEST(EpDispatch, HotExpertOverflowsItsRank) {
  // Every token picks experts 0..k-1, all on rank 0 of 4 (E = 32: 8 per rank).
  const int T = 20, k = 4, R = 4, E = 32;
  std::vector<int32_t> ids(size_t(T) * k);
  std::vector<float> w(ids.size(), 0.5f);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) ids[size_t(t) * k + j] = (j + t) % k;
  const ExpertPartition part(E, R);
  for (int cap : {T, T + 3, 7, 1, 0}) {
    SCOPED_TRACE("cap " + std::to_string(cap));
    const DispatchPlan p = detail::plan_dispatch(ids.data(), w.data(), T, k, part, 2, cap);
    const int fit = std::min(T, cap);
    EXPECT_EQ(p.send_counts, (std::vector<int32_t>{fit, 0, 0, 0}));
    EXPECT_EQ(p.overflow_rows, T - fit);
    EXPECT_EQ(p.overflow_routes, int64_t(T - fit) * k);
    EXPECT_EQ(p.remote_rows(), fit);
    for (int t = 0; t < T; ++t)  // the first `fit` tokens keep their rows: a stable order
      EXPECT_EQ(p.token_row[size_t(t) * R], t < fit ? t : -1) << t;
    expect_plan_matches_oracle(p, ids, w, T, k, E, R, cap);
    expect_counts_add_up(p, T, k);
    const EpSim sim = simulate({{}, {}, ids, {}}, {{}, {}, w, {}}, {0, 0, T, 0}, k, part, cap);
    EXPECT_EQ(sim.recv[0].num_rows(), fit);
    EXPECT_EQ(sim.recv[0].recv_offsets, (std::vector<int32_t>{0, 0, 0, fit, fit}));
    EXPECT_EQ(sim.recv[0].num_routes, int64_t(fit) * k);
    for (int d = 1; d < R; ++d) EXPECT_EQ(sim.recv[size_t(d)].num_rows(), 0);
    expect_round_trip(sim, {0, 0, T, 0}, k, cap);
  }
}

TEST(EpDispatch, ZeroAndOneToken) {
  const ExpertPartition part(16, 4);
  const DispatchPlan none = detail::plan_dispatch(nullptr, nullptr, 0, 8, part, 3, 5);
  EXPECT_EQ(none.send_counts, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_TRUE(none.token_row.empty());
  EXPECT_EQ(none.row_token, std::vector<int32_t>(20, -1));
  std::vector<double> y;  // no tokens: the combines write nothing
  detail::combine_rank_order(none, nullptr, 4, y.data());
  detail::combine_choice_order(none, nullptr, 4, y.data());

  // One token over three of the four ranks: experts 15 (rank 3), 1 and 2 (rank 0), 9 (rank 2).
  const std::vector<int32_t> ids = {15, 1, 9, 2};
  const std::vector<float> w = {4, 3, 2, 1};
  const DispatchPlan one = detail::plan_dispatch(ids.data(), w.data(), 1, 4, part, 1, 1);
  EXPECT_EQ(one.send_counts, (std::vector<int32_t>{1, 0, 1, 1}));
  EXPECT_EQ(one.token_row, (std::vector<int32_t>{0, -1, 0, 0}));
  EXPECT_EQ(one.route_row, (std::vector<int32_t>{3, 0, 2, 0}));
  EXPECT_EQ(one.remote_rows(), 3);
  // Rank 0's row holds choices 1 and 3 (local 1 and 2) in choice order.
  EXPECT_EQ(std::vector<int32_t>(one.row_local_ids.begin(), one.row_local_ids.begin() + 4),
            (std::vector<int32_t>{-1, 1, -1, 2}));
  expect_plan_matches_oracle(one, ids, w, 1, 4, 16, 4, 1);
}

TEST(EpDispatch, RejectsBadArguments) {
  const ExpertPartition part(8, 2);
  const std::vector<int32_t> ids = {0, 1};
  const std::vector<float> w = {1, 1};
  test::expect_error([&] { detail::plan_dispatch(ids.data(), w.data(), 1, 2, part, 2, 4); },
                     "source_rank=2 must be in [0, 2)");
  test::expect_error([&] { detail::plan_dispatch(ids.data(), w.data(), 1, 0, part, 0, 4); },
                     "top_k=0 must be in [1, 32]");
  test::expect_error([&] { detail::plan_dispatch(ids.data(), w.data(), 1, 2, part, 0, -1); },
                     "max_tokens_per_rank=-1 must be >= 0");
  test::expect_error([&] { detail::plan_dispatch(ids.data(), w.data(), -1, 2, part, 0, 4); },
                     "T=-1 must be >= 0");
  test::expect_error([&] { detail::plan_dispatch(ids.data(), nullptr, 1, 2, part, 0, 4); },
                     "topk_ids and topk_weights [1, 2] must not be null");
  // Refused before any buffer is sized: 2 x 2^30 x 2 slots do not fit int32 indices.
  test::expect_error([&] { detail::plan_dispatch(ids.data(), w.data(), 1, 2, part, 0, 1 << 30); },
                     "exceed the int32 indices");
}

// ---- receive and the round trip ----------------------------------------------------------------

TEST(EpReceive, RandomRoundTripsComposeToIdentity) {
  for (int R : {1, 2, 4, 8})
    for (uint64_t seed : test::seeds_for(test::hash_ints({R, 0x7E})))
      for (int rep = 0; rep < 12; ++rep) {
        ref::Rng rng(seed + uint64_t(rep));
        const int E = R + rng.below(40), k = 1 + rng.below(std::min(8, E));
        std::vector<int> T(static_cast<size_t>(R));
        int T_max = 0;
        for (int& t : T) T_max = std::max(T_max, t = rng.below(3) == 0 ? rng.below(2) : rng.below(40));
        // Half the cases have room for every row; the others overflow some chunks.
        const int cap = rng.below(2) ? T_max : std::max(1, rng.below(T_max + 1));
        const float bad_rate = rng.below(3) == 0 ? 0.15f : 0.0f;
        SCOPED_TRACE(strf("seed %llu rep %d: R=%d E=%d k=%d T_max=%d cap=%d bad %.2f",
                          (unsigned long long)seed, rep, R, E, k, T_max, cap, double(bad_rate)));
        std::vector<std::vector<int32_t>> ids(static_cast<size_t>(R));
        std::vector<std::vector<float>> w(static_cast<size_t>(R));
        for (int s = 0; s < R; ++s) random_routes(rng, T[size_t(s)], k, E, bad_rate, ids[size_t(s)], w[size_t(s)]);
        const ExpertPartition part(E, R);
        const EpSim sim = simulate(ids, w, T, k, part, cap);
        expect_round_trip(sim, T, k, cap);
        expect_payload_round_trip(sim, ids, w, T, k, part, cap);
        if (HasFatalFailure() || HasNonfatalFailure()) return;
      }
}

TEST(EpReceive, CorruptCountsAndSlotsAreClampedAndDropped) {
  // 3 ranks over 6 experts (2 each); destination 1; cap 2; k 3.
  const ExpertPartition part(6, 3);
  const int cap = 2, k = 3;
  const std::vector<int32_t> counts = {5, -3, 1};  // 5 > cap and -3 < 0: clamped to 2 and 0
  std::vector<int32_t> ids(size_t(3) * cap * k, -1);
  std::vector<float> w(ids.size(), 1.0f);
  // Source 0, row 0: local 0, then a repeat of 0 (dropped), then 1. Row 1: local 2 (rank 1 owns
  // only 2 experts: dropped) and -2 (dropped). Source 2, row 0: local 1.
  const int32_t src0[] = {0, 0, 1, 2, -2, -1};
  std::copy(src0, src0 + 6, ids.begin());
  ids[size_t(2) * cap * k] = 1;
  const ReceivePlan p = detail::plan_receive(counts.data(), ids.data(), w.data(), k, part, 1, cap);
  EXPECT_EQ(p.clamped_counts, 2);
  EXPECT_EQ(p.recv_counts, (std::vector<int32_t>{2, 0, 1}));
  EXPECT_EQ(p.recv_offsets, (std::vector<int32_t>{0, 2, 2, 3}));
  EXPECT_EQ(p.row_slot, (std::vector<int32_t>{0, 1, 4}));
  EXPECT_EQ(p.dropped_routes, 3);
  EXPECT_EQ(p.local_ids, (std::vector<int32_t>{0, -1, 1, -1, -1, -1, 1, -1, -1}));
  EXPECT_EQ(p.expert_counts, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(p.num_routes, 3);

  test::expect_error([&] { detail::plan_receive(counts.data(), ids.data(), w.data(), k, part, 3, cap); },
                     "dest_rank=3 must be in [0, 3)");
  test::expect_error([&] { detail::plan_receive(nullptr, ids.data(), w.data(), k, part, 0, cap); },
                     "recv_counts [3] must not be null");
}

TEST(EpCombine, ChoiceOrderIsRefCombineAndRankOrderIsByRank) {
  // Route outputs spread over 2^-40 .. 2^40 with both signs, so every change of association shows
  // in the double sums (the layer test's bf16 outputs would almost never show one).
  for (uint64_t seed : test::seeds_for(0xC0B)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    ref::Rng rng(seed);
    const int R = 4, E = 16, k = 6, T = 40, cap = T;
    std::vector<int32_t> ids;
    std::vector<float> w;
    random_routes(rng, T, k, E, 0.0f, ids, w);
    for (float& v : w) v = rng.uniform() + 0.01f;
    std::vector<double> o(size_t(T) * k);
    for (double& v : o) v = std::ldexp(rng.uniform() - 0.5, rng.below(81) - 40);
    const ExpertPartition part(E, R);
    const DispatchPlan p = detail::plan_dispatch(ids.data(), w.data(), T, k, part, 1, cap);
    // What the destinations return: each route's weighted row at route_row * k + j, and each
    // row's partial summed in choice order, at its row.
    std::vector<double> route_rows(size_t(R) * cap * k, NAN), partials(size_t(R) * cap, 0.0);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) {
        const int32_t row = p.route_row[size_t(t) * k + j];
        ASSERT_GE(row, 0);
        const double v = double(w[size_t(t) * k + j]) * o[size_t(t) * k + j];
        route_rows[size_t(row) * k + j] = v;
        partials[size_t(row)] += v;
      }
    std::vector<double> by_choice(static_cast<size_t>(T)), by_rank(by_choice), want(by_choice);
    detail::combine_choice_order(p, route_rows.data(), 1, by_choice.data());
    detail::combine_rank_order(p, partials.data(), 1, by_rank.data());
    ref::combine(o.data(), nullptr, w.data(), T, k, 1, want.data());
    int differ = 0;
    for (int t = 0; t < T; ++t) {
      ASSERT_EQ(by_choice[size_t(t)], want[size_t(t)]) << "token " << t;
      double s = 0;  // the documented rank order, written out
      for (int d = 0; d < R; ++d) {
        double part_sum = 0;
        bool any = false;
        for (int j = 0; j < k; ++j)
          if (part.owner(ids[size_t(t) * k + j]) == d) {
            part_sum += double(w[size_t(t) * k + j]) * o[size_t(t) * k + j];
            any = true;
          }
        if (any) s += part_sum;
      }
      ASSERT_EQ(by_rank[size_t(t)], s) << "token " << t;
      bool one_rank = true;
      for (int j = 1; j < k; ++j)
        one_rank &= part.owner(ids[size_t(t) * k + j]) == part.owner(ids[size_t(t) * k]);
      if (one_rank) {
        EXPECT_EQ(by_rank[size_t(t)], want[size_t(t)]) << "token " << t << " on one rank";
      }
      differ += by_rank[size_t(t)] != want[size_t(t)];
    }
    // Why choice order exists: rank order is another association (40 tokens over 4 ranks).
    EXPECT_GT(differ, 0);
  }
}

TEST(EpBytes, RowSizes) {
  // DeepSeek-V3 (H 7168, top-8), fp8: 7168 codes + 56 fp32 scales + 8 x (id, weight).
  const detail::EpRowBytes ds = detail::ep_row_bytes(Precision::fp8_block, 7168, 8);
  EXPECT_EQ(ds.dispatch, 7168 + 56 * 4 + 64);
  EXPECT_EQ(ds.combine_partial, 2 * 7168);
  EXPECT_EQ(ds.combine_route, 4 * 7168);
  // Qwen3.5-35B-A3B (H 2048, top-8), bf16; a partial scale block (H 2064 = 16 blocks + 16).
  EXPECT_EQ(detail::ep_row_bytes(Precision::bf16, 2048, 8).dispatch, 4096 + 64);
  EXPECT_EQ(detail::ep_row_bytes(Precision::fp8_block, 2064, 1).dispatch, 2064 + 17 * 4 + 8);
  test::expect_error([] { detail::ep_row_bytes(Precision::nvfp4, 2048, 8); },
                     "nvfp4 activations are not planned");
}

// ---- the EP reference layer --------------------------------------------------------------------

namespace {

// A preset shrunk to test size, keeping its routing, activation, shared expert and biases (as
// tests/layer's GPU tests shrink them): E 16 so that 4 ranks own 4 experts each and DeepSeek's 8
// groups still divide it.
MoeConfig scaled_preset(const char* name, Precision p) {
  MoeConfig c = find_preset(name);
  c.hidden = 256;
  c.intermediate = 128;
  c.num_experts = 16;
  if (c.num_shared_experts > 0) c.shared_intermediate = 128 * c.num_shared_experts;
  c.weight_precision = p;
  c.activation_precision = p == Precision::fp8_block ? p : Precision::bf16;
  c.validate();
  return c;
}

struct EpCase {
  const char* preset;
  Precision precision;
};

}  // namespace

TEST(EpLayerRef, EqualsSingleRankLayer) {
  const EpCase cases[] = {{"qwen3.5-35b-a3b", Precision::fp8_block},
                          {"deepseek-v3", Precision::fp8_block},
                          {"gpt-oss-120b", Precision::mxfp4},
                          {"llama4-maverick", Precision::bf16},
                          {"mixtral-8x7b", Precision::nvfp4}};
  // Uneven tokens per rank, a rank with none and one with a single token.
  const std::vector<std::vector<int>> splits = {{13}, {9, 4}, {7, 0, 1, 11}};
  for (const EpCase& c : cases) {
    const MoeConfig cfg = scaled_preset(c.preset, c.precision);
    const int H = cfg.hidden, E = cfg.num_experts, k = cfg.top_k;
    const uint64_t seed = test::seeds_for(test::hash_ints({int(c.precision), k, E, 0xE1}))[2];
    const ref::LayerWeights lw = ref::make_random_layer(cfg, seed);
    for (const std::vector<int>& split : splits)
      for (bool hot : {false, true}) {
        const int R = int(split.size());
        int T = 0, T_max = 0;
        for (int t : split) T += t, T_max = std::max(T_max, t);
        SCOPED_TRACE(strf("%s R=%d T=%d hot %d seed %llu", cfg.summary().c_str(), R, T, int(hot),
                          (unsigned long long)seed));
        const std::vector<float> x = ref::random_bf16(int64_t(T) * H, seed, 0x78, 1.0f);
        const std::vector<float> logits = ref::tie_free_logits(T, E, seed, 8.0f, hot ? 5 : -1);
        const ref::LayerResult want = ref::moe_layer(lw, x.data(), logits.data(), T);
        std::vector<ref::EpRankTokens> ranks;
        int t0 = 0;
        for (int t : split) {
          ranks.push_back({x.data() + int64_t(t0) * H, logits.data() + int64_t(t0) * E, t});
          t0 += t;
        }
        for (ref::EpCombine mode : {ref::EpCombine::choice_order, ref::EpCombine::rank_order}) {
          const bool choice = mode == ref::EpCombine::choice_order;
          SCOPED_TRACE(choice ? "choice order" : "rank order");
          const ref::EpLayerResult got = ref::moe_layer_ep(lw, ranks, T_max, mode);
          ASSERT_EQ(got.overflow_rows, 0);
          // Bitwise where the association of each token's sum is moe_layer's: choice order always;
          // rank order when one rank holds everything or each token has one route. This pins
          // every route's output (expert, local id, weight, bias, scales); the order of the double
          // sum almost never reaches the bf16 output, so EpCombine.ChoiceOrderIsRefCombine... pins
          // that on adversarial doubles.
          const bool bitwise = choice || R == 1 || k == 1;
          size_t ulp_off = 0;
          t0 = 0;
          for (int s = 0; s < R; ++s) {
            const ref::LayerResult& r = got.rank[size_t(s)];
            ASSERT_EQ(r.y.size(), size_t(split[size_t(s)]) * H);
            for (int i = 0; i < split[size_t(s)] * k; ++i) {
              ASSERT_EQ(r.routing.ids[size_t(i)], want.routing.ids[size_t(t0) * k + i]);
              ASSERT_EQ(r.routing.weights[size_t(i)], want.routing.weights[size_t(t0) * k + i]);
            }
            for (size_t i = 0; i < r.y.size(); ++i) {
              const float g = r.y[i], w = want.y[size_t(t0) * H + i];
              ASSERT_TRUE(std::isfinite(g)) << "rank " << s << " element " << i;
              if (bitwise) {
                ASSERT_EQ(fmt::bf16_from_float(g), fmt::bf16_from_float(w))
                    << "rank " << s << " element " << i << " got " << g << " want " << w;
              } else if (g != w) {
                // Another association of the same doubles: at most the final bf16 rounding
                // lands one step apart (one bf16 ulp is at most 2^-7 of the value).
                ++ulp_off;
                ASSERT_LE(std::fabs(double(g) - double(w)), std::ldexp(std::fabs(double(w)), -7))
                    << "rank " << s << " element " << i << " got " << g << " want " << w;
              }
            }
            t0 += split[size_t(s)];
          }
          // A rounding tie is rare: a few elements in a thousand would be a wrong sum.
          EXPECT_LE(ulp_off, size_t(T) * H / 1000 + 1) << "elements one bf16 ulp off";
        }
      }
  }
}

TEST(EpLayerRef, OverflowDropsOnlyTheOverflowedRows) {
  // Too small a chunk: the tokens whose rows all fit are bitwise unchanged (choice order), each
  // token with an overflowed row loses exactly those routes' contributions.
  const MoeConfig cfg = scaled_preset("qwen3.5-35b-a3b", Precision::bf16);
  const int H = cfg.hidden, E = cfg.num_experts, k = cfg.top_k, R = 2;
  for (uint64_t seed : test::seeds_for(test::hash_ints({0x0F, R}))) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const ref::LayerWeights lw = ref::make_random_layer(cfg, seed);
    const std::vector<int> split = {10, 6};
    const int T = 16, cap = 4;
    const std::vector<float> x = ref::random_bf16(int64_t(T) * H, seed, 0x78, 1.0f);
    const std::vector<float> logits = ref::tie_free_logits(T, E, seed);
    const std::vector<ref::EpRankTokens> ranks = {{x.data(), logits.data(), 10},
                                                  {x.data() + 10 * H, logits.data() + 10 * E, 6}};
    const ref::EpLayerResult full = ref::moe_layer_ep(lw, ranks, 10, ref::EpCombine::choice_order);
    const ref::EpLayerResult cut = ref::moe_layer_ep(lw, ranks, cap, ref::EpCombine::choice_order);
    ASSERT_EQ(full.overflow_rows, 0);
    // qwen's top-8 of 16 experts reaches both ranks from nearly every token: 10 and 6 tokens
    // over chunks of 4 must overflow.
    ASSERT_GT(cut.overflow_rows, 0);
    const ExpertPartition part(E, R);
    int64_t rows = 0, routes = 0, changed_tokens = 0;
    for (int s = 0; s < R; ++s) {
      const ref::Routing& rt = cut.rank[size_t(s)].routing;
      const DispatchPlan p = detail::plan_dispatch(rt.ids.data(), rt.weights.data(), split[size_t(s)],
                                                   k, part, s, cap);
      rows += p.overflow_rows;
      routes += p.overflow_routes;
      for (int t = 0; t < split[size_t(s)]; ++t) {
        bool lost = false;
        for (int j = 0; j < k; ++j) lost |= p.route_row[size_t(t) * k + j] < 0;
        bool same = true;
        for (int h = 0; h < H; ++h)
          same &= cut.rank[size_t(s)].y[size_t(t) * H + h] == full.rank[size_t(s)].y[size_t(t) * H + h];
        EXPECT_EQ(same, !lost) << "rank " << s << " token " << t << (lost ? " lost routes" : " lost nothing");
        changed_tokens += !same;
      }
    }
    EXPECT_EQ(cut.overflow_rows, rows);
    EXPECT_EQ(cut.overflow_routes, routes);
    EXPECT_GT(changed_tokens, 0);
  }
}

TEST(EpLayerRef, RejectsWhatItCannotSplit) {
  const MoeConfig fp8 = scaled_preset("qwen3-30b-a3b", Precision::fp8_block);
  const ref::LayerWeights lw = ref::make_random_layer(fp8, 1);
  test::expect_error([&] { ref::moe_layer_ep(lw, std::vector<ref::EpRankTokens>(17), 1, ref::EpCombine::rank_order); },
                     "17 ranks for 16 experts");
  test::expect_error([&] { ref::moe_layer_ep(lw, {}, 1, ref::EpCombine::rank_order); },
                     "needs at least one rank");
  test::expect_error([&] { ref::moe_layer_ep(lw, {{nullptr, nullptr, 3}}, 3, ref::EpCombine::rank_order); },
                     "rank 0 has T=3 and x / logits null");
  MoeConfig w4a4 = scaled_preset("qwen3-30b-a3b", Precision::nvfp4);
  w4a4.activation_precision = Precision::nvfp4;
  const ref::LayerWeights lw4 = ref::make_random_layer(w4a4, 1);
  test::expect_error([&] { ref::moe_layer_ep(lw4, {{nullptr, nullptr, 0}}, 1, ref::EpCombine::rank_order); },
                     "nvfp4 activations are not planned for expert parallelism");
}

// What `run --ep R` checks in its parent process and EpMoeLayer's constructor refuses: the same
// function, on the host (tools/run_ep.cpp, src/dist/ep_layer.cpp).
TEST(EpConfig, RefusesWhatTheEpLayerCannotRun) {
  const MoeConfig qwen3 = find_preset("qwen3-30b-a3b");  // E=128, top-8, no shared experts
  for (int R : {1, 2, 8, 16}) EXPECT_NO_THROW(ep_check_config(qwen3, R)) << "R=" << R;
  // 128 experts over 17 ranks leave 7 on the last rank, fewer than top_k=8.
  test::expect_error([&] { ep_check_config(qwen3, 17); },
               "128 experts over 17 ranks leave 7 on the last rank, fewer than top_k=8");
  test::expect_error([&] { ep_check_config(qwen3, 129); }, "129 ranks for 128 experts");
  test::expect_error([&] { ep_check_config(qwen3, 0); }, "num_ranks=0 must be at least 1");
  // Shared experts run on every rank (on its own tokens): no refusal of their own.
  for (int R : {1, 4, 32}) EXPECT_NO_THROW(ep_check_config(find_preset("qwen3.5-35b-a3b"), R)) << "R=" << R;
  EXPECT_NO_THROW(ep_check_config(find_preset("deepseek-v3"), 8));
}
