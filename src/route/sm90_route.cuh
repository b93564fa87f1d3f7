// Routing on the GPU: one warp turns one token's router logits [E] into its top-k (expert id,
// weight) pairs, for every routing function of ref/route.cpp.
//
// Contract: ids best first, ties (and NaN, ranked as -inf) go to the lower expert id, so the ids
// equal the reference's on any input whose choice scores are distinct; weights carry the
// routed_scaling_factor. The arithmetic runs in double, as the reference's does: a bias added to a
// sigmoid score breaks monotonicity, and float rounding could otherwise swap two close experts.
// Lane l holds experts l, l + 32, ... (coalesced loads; E <= 32 * kMaxPerLane).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fusedmoe/config.hpp"
#include "route/route.hpp"

namespace fusedmoe::detail {

namespace route_detail {

// (value, expert) ordered by value, then by the lower expert; NaN never reaches here.
__device__ __forceinline__ bool better(double v, int e, double bv, int be) {
  return v > bv || (v == bv && e < be);
}

// Warp-wide best (value, expert) of the lanes' candidates; every lane gets the result.
__device__ __forceinline__ void warp_best(double& v, int& e) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const double ov = __shfl_xor_sync(0xffffffffu, v, off);
    const int oe = __shfl_xor_sync(0xffffffffu, e, off);
    if (better(ov, oe, v, e)) {
      v = ov;
      e = oe;
    }
  }
}

__device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

}  // namespace route_detail

/// Routes one token. `logits` points at the token's [E] row; every lane of the warp calls this.
/// Lane j < k ends with ids_out/weights_out of choice j (lane-distributed results: the caller
/// stores them, or broadcasts with __shfl_sync).
__device__ __forceinline__ void route_token_warp(const RouteDeviceParams& p, const float* logits,
                                                 int lane, int& id_out, float& weight_out) {
  using namespace route_detail;
  constexpr int kPer = kRouteMaxPerLane;
  const RoutingFn fn = RoutingFn(p.fn);
  const bool has_bias = p.bias != nullptr;
  // choice: the value experts are selected on; score: the value the weight is made of.
  double choice[kPer], score[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int e = lane + 32 * i;
    choice[i] = -INFINITY;
    score[i] = 0.0;
    if (e < p.E) {
      const double l = double(__ldg(logits + e));
      double c = l, s = l;
      switch (fn) {
        case RoutingFn::softmax_topk:
          if (p.softcap > 0.0f) c = double(p.softcap) * tanh(l / double(p.softcap));
          s = c;
          break;
        case RoutingFn::sigmoid_grouped_topk:
          s = sigmoid(l);
          c = s + (has_bias ? double(__ldg(p.bias + e)) : 0.0);
          break;
        case RoutingFn::sigmoid_top1_on_input:
          break;
        case RoutingFn::topk_softmax:
          c = l + (has_bias ? double(__ldg(p.bias + e)) : 0.0);
          s = c;
          break;
      }
      choice[i] = isnan(c) ? -INFINITY : c;
      score[i] = s;
    }
  }

  // Grouped top-k: keep the topk_groups groups with the best sum of their two best choices.
  uint32_t allowed_groups = 0xffffffffu;
  int per_group = p.E;
  if (fn == RoutingFn::sigmoid_grouped_topk && p.num_groups > 1) {
    per_group = p.E / p.num_groups;
    double gscore = -INFINITY;  // lane g holds group g's score
    for (int g = 0; g < p.num_groups; ++g) {
      double b1 = -INFINITY, b2 = -INFINITY;
      int e1 = 1 << 30, e2 = 1 << 30;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int e = lane + 32 * i;
        if (e < p.E && e / per_group == g) {
          if (better(choice[i], e, b1, e1)) {
            b2 = b1; e2 = e1; b1 = choice[i]; e1 = e;
          } else if (better(choice[i], e, b2, e2)) {
            b2 = choice[i]; e2 = e;
          }
        }
      }
      // Merge the lanes' best pairs: the group's best, then its second best.
      double v = b1;
      int ve = e1;
      warp_best(v, ve);
      double s = v;
      if (ve == e1) { b1 = b2; e1 = e2; }  // the lane that held the best offers its second
      double v2 = b1;
      int ve2 = e1;
      warp_best(v2, ve2);
      if (per_group > 1) s += v2;
      if (lane == g) gscore = s;
    }
    allowed_groups = 0;
    for (int j = 0; j < p.topk_groups; ++j) {
      double v = -INFINITY;
      int g = 1 << 30;
      if (lane < p.num_groups && !((allowed_groups >> lane) & 1u)) {
        v = gscore;
        g = lane;
      }
      warp_best(v, g);
      allowed_groups |= 1u << g;
    }
  }

  // Top-k by repeated warp argmax; `taken` marks this lane's chosen experts. Lane j keeps
  // choice j: its id, its choice value and its score.
  uint32_t taken = 0;
  int my_id = -1;
  double my_choice = -INFINITY, my_score = 0.0;
  for (int j = 0; j < p.k; ++j) {
    double v = -INFINITY, v_score = 0.0;  // this lane's best candidate and its score
    int e_best = 1 << 30;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      const bool ok = e < p.E && !((taken >> i) & 1u) && ((allowed_groups >> (e / per_group)) & 1u);
      if (ok && better(choice[i], e, v, e_best)) {
        v = choice[i];
        v_score = score[i];
        e_best = e;
      }
    }
    const int lane_best = e_best;
    warp_best(v, e_best);
    // The owner lane's own best is the winner: no run-time index into the register arrays.
    const bool owner = lane_best == e_best;
    if (owner) taken |= 1u << (e_best >> 5);
    const double owner_score = owner ? v_score : 0.0;
    const double s = __shfl_sync(0xffffffffu, owner_score, e_best & 31);
    if (lane == j) {
      my_id = e_best;
      my_choice = v;
      my_score = s;
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
          if (lane + 32 * i < p.E) total += exp(score[i] - mx);  // a NaN logit poisons the sum
      }
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
      w = mine / total;
      break;
    }
    case RoutingFn::sigmoid_grouped_topk: {
      double mine = lane < p.k ? my_score : 0.0;
      double total = mine;
#pragma unroll
      for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
      w = p.renormalize ? mine / (total + 1e-20) : mine;
      break;
    }
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

}  // namespace fusedmoe::detail
