// Routing on the GPU: one warp turns one token's router logits [E] into its top-k (expert id,
// weight) pairs, for every routing function of ref/route.cpp.
//
// Contract: ids best first, ties (and NaN, ranked as -inf) go to the lower expert id, so the ids
// equal the reference's on any input whose choice scores are distinct; weights carry the
// routed_scaling_factor. Selection runs on V = float when the selection values are the fp32
// logits themselves (softmax without softcapping, Llama 4 top-1, gpt-oss without bias: exact),
// else on V = double, as the reference does: a bias added to a sigmoid score breaks monotonicity,
// and float rounding could otherwise swap two close experts. Weights are always formed in double.
// Lane l holds experts l, l + 32, ... (coalesced loads; E <= 32 * kPer).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "fusedmoe/config.hpp"
#include "route/route.hpp"

namespace fusedmoe::detail {

namespace route_detail {

// (value, expert) ordered by value, then by the lower expert; NaN never reaches here.
template <typename V>
__device__ __forceinline__ bool better(V v, int e, V bv, int be) {
  return v > bv || (v == bv && e < be);
}

// Warp-wide best (value, expert) of the lanes' candidates; every lane gets the result.
template <typename V>
__device__ __forceinline__ void warp_best(V& v, int& e) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const V ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oe = __shfl_xor_sync(0xffffffffu, e, off);
    if (better(ov, oe, v, e)) {
      v = ov;
      e = oe;
    }
  }
}

__device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// One level of the lane_best tree: candidate i meets candidate i + W (W compile-time, so the
// arrays stay in registers).
template <int W, typename V>
__device__ __forceinline__ void tree_level(V* tv, int* te, V* ts) {
#pragma unroll
  for (int i = 0; i < W; ++i)
    if (better(tv[i + W], te[i + W], tv[i], te[i])) {
      tv[i] = tv[i + W];
      te[i] = te[i + W];
      ts[i] = ts[i + W];
    }
}

// This lane's candidates as (value, expert), the ones not in `avail` as (-inf, 1 << 30): ranked
// last by `better`, whatever the others' values.
template <typename V, int kPer>
__device__ __forceinline__ void lane_candidates(const V (&choice)[kPer], uint32_t avail, int lane,
                                                V (&v)[kPer], int (&e)[kPer]) {
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const bool ok = (avail >> i) & 1u;
    v[i] = ok ? choice[i] : V(-INFINITY);
    e[i] = ok ? lane + 32 * i : (1 << 30);
  }
}

// The best (value, expert, score) of this lane's candidates in `avail`: a log2(kPer)-level tree,
// so the dependency chain is 2-4 comparisons, not 4-16.
template <typename V, int kPer>
__device__ __forceinline__ void lane_best(const V (&choice)[kPer], const V (&score)[kPer],
                                          uint32_t avail, int lane, V& v, int& e, V& s) {
  V tv[kPer], ts[kPer];
  int te[kPer];
  lane_candidates(choice, avail, lane, tv, te);
#pragma unroll
  for (int i = 0; i < kPer; ++i) ts[i] = score[i];
  static_assert(kPer == 4 || kPer == 8 || kPer == 16, "the tree below has 2, 3 or 4 levels");
  if constexpr (kPer == 16) tree_level<8>(tv, te, ts);
  if constexpr (kPer >= 8) tree_level<4>(tv, te, ts);
  tree_level<2>(tv, te, ts);
  tree_level<1>(tv, te, ts);
  v = tv[0];
  e = te[0];
  s = ts[0];
}

// Sorts a lane's candidates best first by `better` (a bitonic network: every index compile-time,
// so the arrays stay in registers), the score travelling with its value when kWithScore.
template <typename V, int kPer, bool kWithScore, int kS>
__device__ __forceinline__ void sort_best_first(V (&v)[kPer], int (&e)[kPer], V (&s)[kS]) {
#pragma unroll
  for (int k = 2; k <= kPer; k *= 2)
#pragma unroll
    for (int j = k / 2; j > 0; j /= 2)
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int l = i ^ j;
        if (l <= i) continue;
        // Runs whose bit k is clear end best first (all of them at the last merge, k = kPer).
        const bool swap = (i & k) == 0 ? better(v[l], e[l], v[i], e[i]) : better(v[i], e[i], v[l], e[l]);
        if (swap) {
          const V tv = v[i];
          const int te = e[i];
          v[i] = v[l], e[i] = e[l];
          v[l] = tv, e[l] = te;
          if constexpr (kWithScore) {
            const V ts = s[i];
            s[i] = s[l], s[l] = ts;
          }
        }
      }
}

// The kept groups of the grouped top-k when every group is whole lanes' slices: with
// per_group = 32 M, candidate i of every lane lies in group i / M, so each lane takes the top two
// of its M candidates of every group, and one butterfly over the lanes (all groups at once, no
// expert ids needed: a group's score is the sum of its two largest values) leaves every lane with
// every group's score. The kept groups are then ranked locally, ties to the lower group as the
// reference's top-k. (The general path below walks the groups one by one, two warp-wide argmax
// chains each: 16 of them for DeepSeek-V3, most of route_quant's ~10 us at T=1.)
template <typename V, int kPer, int M>
__device__ __forceinline__ uint32_t kept_groups_sliced(const V (&choice)[kPer], uint32_t avail,
                                                       int num_groups, int topk_groups) {
  constexpr int G = kPer / M;  // group slots (num_groups <= G)
  V b1[G], b2[G];              // each group's largest and second largest (a multiset)
#pragma unroll
  for (int g = 0; g < G; ++g) {
    b1[g] = V(-INFINITY);
    b2[g] = V(-INFINITY);
#pragma unroll
    for (int j = 0; j < M; ++j) {
      const int i = g * M + j;
      const V v = (avail >> i) & 1u ? choice[i] : V(-INFINITY);
      if (v > b1[g]) {
        b2[g] = b1[g];
        b1[g] = v;
      } else if (v > b2[g]) {
        b2[g] = v;
      }
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1)
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const V o1 = __shfl_xor_sync(0xffffffffu, b1[g], off);
      const V o2 = __shfl_xor_sync(0xffffffffu, b2[g], off);
      const V lo = b1[g] < o1 ? b1[g] : o1;  // the top two of {b1, b2, o1, o2}
      const V m2 = b2[g] > o2 ? b2[g] : o2;
      b1[g] = b1[g] < o1 ? o1 : b1[g];
      b2[g] = lo > m2 ? lo : m2;
    }
  V gs[G];
#pragma unroll
  for (int g = 0; g < G; ++g) gs[g] = b1[g] + b2[g];
  uint32_t kept = 0;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    int rank = 0;  // groups ranked before g
#pragma unroll
    for (int h = 0; h < G; ++h)
      rank += h != g && h < num_groups && better(gs[h], h, gs[g], g);
    if (g < num_groups && rank < topk_groups) kept |= 1u << g;
  }
  uint32_t out = avail;
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (!((kept >> (i / M)) & 1u)) out &= ~(1u << i);
  return out;
}

// The sigmoid_grouped_topk weights from lane j's choice j (lanes >= k hold nothing): the score,
// renormalized by the butterfly sum of the k scores when asked. Shared by both routing paths, so
// their weights are the same bits.
__device__ __forceinline__ double sigmoid_grouped_weight(const RouteDeviceParams& p, int lane,
                                                         double my_score) {
  const double mine = lane < p.k ? my_score : 0.0;
  double total = mine;
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
  return p.renormalize ? mine / (total + 1e-20) : mine;
}

}  // namespace route_detail

/// Routes one token. `logits` points at the token's [E] row; every lane of the warp calls this.
/// Lane j < k ends with ids_out/weights_out of choice j (lane-distributed results: the caller
/// stores them, or broadcasts with __shfl_sync).
template <typename V, int kPer>
__device__ __forceinline__ void route_token_warp(const RouteDeviceParams& p, const float* logits,
                                                 int lane, int& id_out, float& weight_out) {
  using namespace route_detail;
  const RoutingFn fn = RoutingFn(p.fn);
  // choice: the value experts are selected on; score: the value the weight is made of.
  // Candidate i of this lane is expert lane + 32 i; bit i of `avail` says it exists (and, after
  // group selection, lies in a kept group) and is not taken yet.
  V choice[kPer], score[kPer];
  uint32_t avail = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    const bool exists = e < p.E;
    const V l = exists ? V(__ldg(logits + e)) : V(0);
    choice[i] = l;
    score[i] = l;
    avail |= uint32_t(exists) << i;
  }
  // One uniform branch per routing function (no per-candidate switch).
  if (fn == RoutingFn::softmax_topk && p.softcap > 0.0f) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) choice[i] = score[i] = V(double(p.softcap) * tanh(double(choice[i]) / double(p.softcap)));
  } else if (fn == RoutingFn::sigmoid_grouped_topk) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      score[i] = V(sigmoid(double(choice[i])));
      choice[i] = V(double(score[i]) + (p.bias && e < p.E ? double(__ldg(p.bias + e)) : 0.0));
    }
  } else if (fn == RoutingFn::topk_softmax && p.bias) {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      choice[i] = score[i] = V(double(choice[i]) + (e < p.E ? double(__ldg(p.bias + e)) : 0.0));
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i)
    if (isnan(choice[i])) choice[i] = V(-INFINITY);  // NaN ranks last (its weight stays NaN)

  // Grouped top-k: keep the topk_groups groups with the best sum of their two best choices.
  const int per_group = p.num_groups > 1 ? p.E / p.num_groups : 0;
  const int slice = per_group % 32 == 0 ? per_group / 32 : 0;  // candidates per lane and group
  bool grouped = fn == RoutingFn::sigmoid_grouped_topk && p.num_groups > 1;
  // (E <= 256 only: with 16 candidates a lane the per-group arrays spill. With E <= 32 kPer,
  // num_groups = E / (32 slice) <= kPer / slice, the function's group slots.)
  if constexpr (kPer == 4 || kPer == 8) {
    if (grouped && (slice == 1 || slice == 2 || slice == 4) && p.num_groups * per_group == p.E) {
      if (slice == 1) avail = kept_groups_sliced<V, kPer, 1>(choice, avail, p.num_groups, p.topk_groups);
      else if (slice == 2) avail = kept_groups_sliced<V, kPer, 2>(choice, avail, p.num_groups, p.topk_groups);
      else avail = kept_groups_sliced<V, kPer, 4>(choice, avail, p.num_groups, p.topk_groups);
      grouped = false;
    }
  }
  if (grouped) {
    int gid[kPer];  // group of each candidate: one division each, once
#pragma unroll
    for (int i = 0; i < kPer; ++i) gid[i] = (lane + 32 * i) / per_group;
    V gscore = V(-INFINITY);  // lane g holds group g's score
    for (int g = 0; g < p.num_groups; ++g) {
      uint32_t in_g = 0;
#pragma unroll
      for (int i = 0; i < kPer; ++i) in_g |= uint32_t(gid[i] == g) << i;
      in_g &= avail;
      V v1, s_unused;
      int e1;
      lane_best(choice, score, in_g, lane, v1, e1, s_unused);
      V v = v1;
      int ve = e1;
      warp_best(v, ve);
      V gs = v;
      if (per_group > 1) {
        // The lane that held the group's best offers its second best.
        const uint32_t rest = ve == e1 ? in_g & ~(1u << (e1 >> 5)) : in_g;
        V v2;
        int e2;
        lane_best(choice, score, rest, lane, v2, e2, s_unused);
        warp_best(v2, e2);
        gs += v2;
      }
      if (lane == g) gscore = gs;
    }
    uint32_t kept = 0;
    for (int j = 0; j < p.topk_groups; ++j) {
      V v = V(-INFINITY);
      int g = 1 << 30;
      if (lane < p.num_groups && !((kept >> lane) & 1u)) {
        v = gscore;
        g = lane;
      }
      warp_best(v, g);
      kept |= 1u << g;
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (!((kept >> gid[i]) & 1u)) avail &= ~(1u << i);
  }

  // Lane j keeps choice j: its id, choice value and score.
  int my_id = -1;
  double my_choice = -INFINITY, my_score = 0.0;
  if constexpr (kPer <= 8) {
    // Top-k by repeated warp argmax over each lane's candidates, sorted best first once: a round
    // takes the lanes' heads, and only the winner's lane moves on (its list shifts by one), so no
    // lane searches its candidates again. (Searching them each round, the lane_best tree, was ~60%
    // of a round's warp instructions, and route_quant is bound by issue at large T: session 41.)
    // An unavailable candidate sorts last (lane_candidates), as lane_best ranks it.
    // With V = float the score is the choice (the launcher takes float only for such routing
    // functions), so no score travels with the sort.
    constexpr bool kOwnScore = !std::is_same_v<V, float>;
    V sv[kPer], ss[kOwnScore ? kPer : 1];
    int se[kPer];
    lane_candidates(choice, avail, lane, sv, se);
    if constexpr (kOwnScore) {
#pragma unroll
      for (int i = 0; i < kPer; ++i) ss[i] = score[i];
    }
    sort_best_first<V, kPer, kOwnScore>(sv, se, ss);
    for (int j = 0; j < p.k; ++j) {
      V v = sv[0];
      int e_best = se[0];
      warp_best(v, e_best);
      // The owner lane's head is the winner: no run-time index into the register arrays.
      const bool owner = se[0] == e_best;
      V s = v;
      if constexpr (kOwnScore) s = __shfl_sync(0xffffffffu, owner ? ss[0] : V(0), e_best & 31);
      if (owner) {
#pragma unroll
        for (int i = 0; i + 1 < kPer; ++i) {
          sv[i] = sv[i + 1];
          se[i] = se[i + 1];
          if constexpr (kOwnScore) ss[i] = ss[i + 1];
        }
        sv[kPer - 1] = V(-INFINITY);
        se[kPer - 1] = 1 << 30;
      }
      if (lane == j) {
        my_id = e_best;
        my_choice = double(v);
        my_score = double(s);
      }
    }
  } else {
    // 16 candidates a lane: the sorted lists spill (200 bytes of stack in the double kernel, 48
    // this way), so each round searches the lane's candidates again (lane_best).
    for (int j = 0; j < p.k; ++j) {
      V v, v_score;
      int e_best;
      lane_best(choice, score, avail, lane, v, e_best, v_score);
      const int lane_candidate = e_best;
      warp_best(v, e_best);
      // The owner lane's own best is the winner: no run-time index into the register arrays.
      const bool owner = lane_candidate == e_best;
      if (owner) avail &= ~(1u << (e_best >> 5));
      const V s = __shfl_sync(0xffffffffu, owner ? v_score : V(0), e_best & 31);
      if (lane == j) {
        my_id = e_best;
        my_choice = double(v);
        my_score = double(s);
      }
    }
  }

  double w = 0.0;
  switch (fn) {
    case RoutingFn::softmax_topk: {
      // Softmax over all experts (or only the k chosen when renormalising: the full sum cancels).
      const double mx = __shfl_sync(0xffffffffu, my_choice, 0);  // choice 0 is the maximum
      double mine = lane < p.k ? exp(my_choice - mx) : 0.0;
      double total = 0.0;
      if (p.renormalize) {
        total = mine;
      } else {
#pragma unroll
        for (int i = 0; i < kPer; ++i)
          if (lane + 32 * i < p.E) total += exp(double(score[i]) - mx);  // NaN logits poison it
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
      w = mine / total;
      break;
    }
    case RoutingFn::sigmoid_grouped_topk:
      w = sigmoid_grouped_weight(p, lane, my_score);
      break;
    case RoutingFn::sigmoid_top1_on_input:
      w = sigmoid(my_choice);
      break;
    case RoutingFn::topk_softmax: {
      const double mx = __shfl_sync(0xffffffffu, my_choice, 0);
      double mine = lane < p.k ? exp(my_choice - mx) : 0.0;
      double total = mine;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
      w = mine / total;
      break;
    }
  }
  id_out = my_id;
  weight_out = float(w * double(p.routed_scaling_factor));
}

// ---------------------------------------------------------------------------------------------
// Block routing: one token's sigmoid_grouped_topk (DeepSeek-V3, Kimi K2) by all kW warps of its
// group instead of one warp. The warp path above is a serial chain (per-group butterflies, a
// sort, k rounds of warp argmax, all in double): ~2800 dependent instructions of one warp, 8 µs
// of route_quant at deepseek-v3 T=1 on the decode critical path (ncu, session 55). Here every
// step is a count of independent comparisons:
//   1. each thread scores its kP experts (tid + 32 kW i) into shared memory;
//   2. each expert's rank inside its block of 32 (one warp's lanes: a __syncwarp apart) is the
//      number of block members better than it; ranks < max(k, 2) go to the block's sorted list;
//   3. a group (M whole blocks, per_group = 32 M) scores the sum of its two best, the top two of
//      its blocks' lists; every warp ranks the groups with a shuffle loop and keeps the best;
//   4. each listed candidate of a kept block ranks itself among the kept blocks' lists (the
//      top-k lies in their union: a block's (k+1)-th is behind k of its own); rank < k is its slot;
//   5. the leader warp reads the k slots, lane j choice j, and forms the weights as the warp path.
// `better` orders every step (value, then the lower expert or group), a total order, so the ids
// equal the warp path's and the reference's, ties included; the weights are the same bits.
// Launcher's conditions: V = double, no given routing, k <= kBlockRouteMaxK, and grouped
// routing only with per_group % 32 == 0 (otherwise the warp path).
constexpr int kBlockRouteMaxK = 16;

template <int kW, int kP>
struct BlockRouteShared {
  static constexpr int kExperts = 32 * kW * kP, kBlocks = kW * kP;
  double choice[kExperts];  // sigmoid + bias, NaN as -inf
  double score[kExperts];   // sigmoid
  double list_v[kBlocks][kBlockRouteMaxK];  // each block's best max(k, 2), best first
  int list_e[kBlocks][kBlockRouteMaxK];
  int slot[kBlockRouteMaxK];  // the token's choices, best first
};

template <int kW, int kP>
__device__ __forceinline__ void route_token_block(const RouteDeviceParams& p, const float* logits,
                                                  BlockRouteShared<kW, kP>& s, int tid,
                                                  int barrier_id, int& id_out, float& weight_out) {
  using namespace route_detail;
  constexpr int kThreads = 32 * kW;
  const int lane = tid % 32, E = p.E;
  const int blocks = (E + 31) / 32;
  const int listed = p.k > 2 ? p.k : 2;  // a group's score needs its blocks' two best
  // 1. Scores and choices.
  double c[kP];
#pragma unroll
  for (int i = 0; i < kP; ++i) {
    const int e = tid + kThreads * i;
    c[i] = -INFINITY;
    if (e < E) {
      const double sc = sigmoid(double(__ldg(logits + e)));
      const double ch = sc + (p.bias ? double(__ldg(p.bias + e)) : 0.0);
      c[i] = isnan(ch) ? -INFINITY : ch;
      s.choice[e] = c[i];
      s.score[e] = sc;
    }
  }
  __syncwarp();
  // 2. Ranks inside each block (block b = e / 32 lies in warp b % kW).
#pragma unroll
  for (int i = 0; i < kP; ++i) {
    const int e = tid + kThreads * i, base = e & ~31;
    if (base >= E) continue;  // warp-uniform
    const int n = E - base < 32 ? E - base : 32;
    const double2* row = reinterpret_cast<const double2*>(s.choice + base);
    int rank = 0;
#pragma unroll
    for (int j = 0; j < 32; j += 2) {
      const double2 o = row[j / 2];  // a broadcast: every lane reads the same 16 bytes
      rank += j < n && better(o.x, base + j, c[i], e);
      rank += j + 1 < n && better(o.y, base + j + 1, c[i], e);
    }
    if (e < E && rank < listed) {
      s.list_v[e / 32][rank] = c[i];
      s.list_e[e / 32][rank] = e;
    }
  }
  asm volatile("bar.sync %0, %1;" ::"r"(barrier_id), "r"(kThreads) : "memory");
  // 3. The kept blocks: all, or those of the topk_groups best groups.
  uint32_t kept = blocks >= 32 ? ~0u : (1u << blocks) - 1u;
  if (p.num_groups > 1) {
    const int G = p.num_groups, M = E / G / 32;  // blocks per group
    double gs = -INFINITY;
    if (lane < G) {
      double b1 = -INFINITY, b2 = -INFINITY;  // the multiset's two largest
      for (int b = lane * M; b < lane * M + M; ++b)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const double v = s.list_v[b][r];
          if (v > b1) {
            b2 = b1;
            b1 = v;
          } else if (v > b2) {
            b2 = v;
          }
        }
      gs = b1 + b2;
    }
    int rank = 0;
    for (int h = 0; h < G; ++h) rank += better(__shfl_sync(0xffffffffu, gs, h), h, gs, lane);
    const uint32_t groups = __ballot_sync(0xffffffffu, lane < G && rank < p.topk_groups);
    kept = 0;
    for (int b = 0; b < blocks; ++b) kept |= ((groups >> (b / M)) & 1u) << b;
  }
  // 4. Each kept block's best min(k, n) rank themselves among all kept lists.
  for (int q = tid; q < blocks * p.k; q += kThreads) {
    const int b = q / p.k, r = q % p.k;
    const int n = E - 32 * b < 32 ? E - 32 * b : 32;
    if (!((kept >> b) & 1u) || r >= n) continue;
    const double v = s.list_v[b][r];
    const int e = s.list_e[b][r];
    int rank = r;
    for (int b2 = 0; b2 < blocks; ++b2) {
      if (b2 == b || !((kept >> b2) & 1u)) continue;
      const int n2 = E - 32 * b2 < 32 ? E - 32 * b2 : 32;
      const int m = n2 < p.k ? n2 : p.k;
      for (int r2 = 0; r2 < m && better(s.list_v[b2][r2], s.list_e[b2][r2], v, e); ++r2) ++rank;
    }
    if (rank < p.k) s.slot[rank] = e;
  }
  asm volatile("bar.sync %0, %1;" ::"r"(barrier_id), "r"(kThreads) : "memory");
  // 5. Lane j: choice j (the caller keeps the leader warp's).
  const int id = lane < p.k ? s.slot[lane] : -1;
  const double my_score = lane < p.k ? s.score[id] : 0.0;
  id_out = id;
  weight_out = float(sigmoid_grouped_weight(p, lane, my_score) * double(p.routed_scaling_factor));
}

}  // namespace fusedmoe::detail
