// The MoE layer split over R ranks by experts (ref.hpp: moe_layer_ep), simulated in one process:
// the plan is src/dist/ep_plan's, the transport is copies between the ranks' buffers at the
// positions the plan gives, and each rank's experts run through the same chain as moe_layer.
//
// Why it can be bitwise equal to moe_layer: a routed row's expert output depends only on its
// token's row, its expert and (weight on the input) its weight. fp8 activations are quantized per
// token per 128 (GEMM 1) and per 64 (GEMM 2) columns, bf16 per value, and ref::grouped_gemm sums
// each output in one fixed order whatever rows sit around it. So every route's weighted output
// here is the same double as in moe_layer, and only the order of the sum over a token's k routes
// is left:
//   choice_order sums them in j order starting from 0, as ref::combine does: bitwise equal;
//   rank_order sums each rank's routes in j order, then the ranks' sums in rank order: another
//   association of the same doubles wherever a token's routes span ranks, which moves the double
//   sum by a few double ulps and, rarely, the bf16 output by one bf16 ulp (at a rounding tie).
// nvfp4 activations are refused: their global scale is the amax over all rows of a batch, and one
// rank's rows are not all tokens.
#include <cmath>

#include "dist/ep_plan.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {
namespace {

// Experts [first, first + count) of a per-expert array [E, ...] (empty stays empty).
template <class V>
V expert_range(const V& v, int E, int first, int count) {
  if (v.empty()) return v;
  FMOE_REQUIRE(v.size() % size_t(E) == 0, "ref::moe_layer_ep: a per-expert array of %zu values "
               "is not [%d, ...]", v.size(), E);
  const size_t per = v.size() / size_t(E);
  return V(v.begin() + ptrdiff_t(size_t(first) * per), v.begin() + ptrdiff_t(size_t(first + count) * per));
}

// The weights a rank holds: its experts only, renumbered 0 .. count-1 (local ids).
WeightSet expert_slice(const WeightSet& w, int first, int count) {
  WeightSet s;
  s.precision = w.precision;
  s.E = count;
  s.N = w.N;
  s.K = w.K;
  s.global_groups = w.global_groups;
  s.bf16 = expert_range(w.bf16, w.E, first, count);
  s.q = expert_range(w.q, w.E, first, count);
  s.scale = expert_range(w.scale, w.E, first, count);
  s.block_scale = expert_range(w.block_scale, w.E, first, count);
  s.global_scale = expert_range(w.global_scale, w.E, first, count);
  return s;
}

}  // namespace

EpLayerResult moe_layer_ep(const LayerWeights& lw, const std::vector<EpRankTokens>& ranks,
                           int max_tokens_per_rank, EpCombine combine) {
  const MoeConfig& cfg = lw.cfg;
  const int H = cfg.hidden, E = cfg.num_experts, k = cfg.top_k, I2 = 2 * cfg.intermediate;
  const int R = int(ranks.size()), cap = max_tokens_per_rank;
  FMOE_REQUIRE(R >= 1, "ref::moe_layer_ep: needs at least one rank, got none");
  FMOE_REQUIRE(cfg.activation_precision == Precision::fp8_block ||
                   cfg.activation_precision == Precision::bf16,
               "ref::moe_layer_ep: %s activations are not planned for expert parallelism (their "
               "global scale is the amax of the whole batch); fp8 or bf16",
               precision_name(cfg.activation_precision));
  for (int s = 0; s < R; ++s)
    FMOE_REQUIRE(ranks[size_t(s)].T >= 0 && (ranks[size_t(s)].T == 0 ||
                                             (ranks[size_t(s)].x && ranks[size_t(s)].logits)),
                 "ref::moe_layer_ep: rank %d has T=%d and x / logits %s", s, ranks[size_t(s)].T,
                 ranks[size_t(s)].T < 0 ? "(T must be >= 0)" : "null");
  const detail::ExpertPartition part(E, R);
  const bool on_input = cfg.routing.fn == RoutingFn::sigmoid_top1_on_input;
  const bool by_route = combine == EpCombine::choice_order;
  const int per_row = by_route ? k : 1;  // returned rows per dispatched row

  EpLayerResult res;
  res.rank.resize(size_t(R));
  std::vector<detail::DispatchPlan> plans;
  for (int s = 0; s < R; ++s) {
    const EpRankTokens& in = ranks[size_t(s)];
    res.rank[size_t(s)].routing = route(cfg.routing, in.logits, in.T, E, k,
                                        lw.route_bias.empty() ? nullptr : lw.route_bias.data());
    const Routing& rt = res.rank[size_t(s)].routing;
    plans.push_back(detail::plan_dispatch(rt.ids.data(), rt.weights.data(), in.T, k, part, s, cap));
    res.overflow_rows += plans.back().overflow_rows;
    res.overflow_routes += plans.back().overflow_routes;
  }

  // What comes back to each source, at the positions of the rows it sent: [R * cap * per_row, H].
  std::vector<std::vector<double>> returned(static_cast<size_t>(R));
  for (auto& r : returned) r.assign(size_t(R) * size_t(cap) * size_t(per_row) * size_t(H), 0.0);

  for (int d = 0; d < R; ++d) {
    // The exchange: chunk d of each source lands at s*cap of d's receive buffer. The rows carry
    // the token's values; the kernel sends what GEMM 1 reads (fp8 per 128 or bf16), which is
    // these values quantized per token, so quantizing after the move gives the same codes.
    std::vector<int32_t> recv_counts(static_cast<size_t>(R)), recv_ids(size_t(R) * cap * k, -1);
    std::vector<float> recv_weights(size_t(R) * cap * k, 0.0f), recv_x(size_t(R) * cap * H, 0.0f);
    for (int s = 0; s < R; ++s) {
      const detail::DispatchPlan& p = plans[size_t(s)];
      recv_counts[size_t(s)] = p.send_counts[size_t(d)];
      for (int i = 0; i < p.send_counts[size_t(d)]; ++i) {
        const size_t from = size_t(d) * cap + size_t(i), to = size_t(s) * cap + size_t(i);
        for (int j = 0; j < k; ++j) {
          recv_ids[to * k + size_t(j)] = p.row_local_ids[from * k + size_t(j)];
          recv_weights[to * k + size_t(j)] = p.row_weights[from * k + size_t(j)];
        }
        const float* xs = ranks[size_t(s)].x + size_t(p.row_token[from]) * H;
        std::copy(xs, xs + H, recv_x.begin() + ptrdiff_t(to * H));
      }
    }
    const detail::ReceivePlan rp = detail::plan_receive(recv_counts.data(), recv_ids.data(),
                                                        recv_weights.data(), k, part, d, cap);
    FMOE_REQUIRE(rp.dropped_routes == 0 && rp.clamped_counts == 0,
                 "ref::moe_layer_ep: rank %d received %lld bad route slots and %lld bad counts "
                 "from a plan it made itself", d, (long long)rp.dropped_routes,
                 (long long)rp.clamped_counts);

    // The local layer: routes (row, j) grouped by local expert, ascending (row, j) inside one
    // (the order does not change any route's output; it is moe_layer's permute order).
    const int rows = rp.num_rows(), E_d = part.count(d), first = part.first(d);
    std::vector<int32_t> offsets(size_t(E_d) + 1, 0);
    for (int e = 0; e < E_d; ++e) offsets[size_t(e) + 1] = offsets[size_t(e)] + rp.expert_counts[size_t(e)];
    std::vector<int32_t> cursor(offsets.begin(), offsets.end() - 1);
    std::vector<int32_t> slot_of(size_t(rows) * k, -1);
    std::vector<float> a(size_t(rp.num_routes) * H);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < k; ++j) {
        const int e = rp.local_ids[size_t(r) * k + size_t(j)];
        if (e < 0) continue;
        const int32_t slot = cursor[size_t(e)]++;
        slot_of[size_t(r) * k + size_t(j)] = slot;
        const float w = rp.local_weights[size_t(r) * k + size_t(j)];
        const float* xr = recv_x.data() + size_t(rp.row_slot[size_t(r)]) * H;
        for (int h = 0; h < H; ++h)
          a[size_t(slot) * H + h] = on_input ? fmt::round_to_bf16(xr[h] * w) : xr[h];
      }
    const std::vector<double> o = expert_mlp(
        cfg, expert_slice(lw.w13, first, E_d), expert_slice(lw.w2, first, E_d),
        lw.b13.empty() ? nullptr : lw.b13.data() + size_t(first) * I2,
        lw.b2.empty() ? nullptr : lw.b2.data() + size_t(first) * H, a, offsets);

    // Results back to the rows' sources, at d*cap + i of the source's buffers: the weighted route
    // rows (choice_order), or their sum in j order (rank_order). The weight multiplies as in
    // ref::combine (1 when it went on the input).
    for (int r = 0; r < rows; ++r) {
      const int s = rp.row_slot[size_t(r)] / cap, i = rp.row_slot[size_t(r)] % cap;
      const size_t back = size_t(d) * cap + size_t(i);
      for (int h = 0; h < H; ++h) {
        double sum = 0;
        for (int j = 0; j < k; ++j) {
          const int32_t slot = slot_of[size_t(r) * k + size_t(j)];
          if (slot < 0) continue;
          const double w = on_input ? 1.0 : double(rp.local_weights[size_t(r) * k + size_t(j)]);
          const double v = w * o[size_t(slot) * H + h];
          if (by_route)
            returned[size_t(s)][(back * k + size_t(j)) * H + h] = v;
          else
            sum += v;
        }
        if (!by_route) returned[size_t(s)][back * H + h] = sum;
      }
    }
  }

  // Each rank: its tokens' combine, then the shared MLP of its own tokens, then one bf16 rounding
  // (moe_layer's order).
  for (int s = 0; s < R; ++s) {
    const EpRankTokens& in = ranks[size_t(s)];
    const int T = in.T;
    std::vector<double> y(size_t(T) * H, 0.0);
    if (by_route)
      detail::combine_choice_order(plans[size_t(s)], returned[size_t(s)].data(), H, y.data());
    else
      detail::combine_rank_order(plans[size_t(s)], returned[size_t(s)].data(), H, y.data());
    if (cfg.num_shared_experts > 0) {
      std::vector<float> shared;
      mlp(cfg, lw.shared_w13, lw.shared_w2, nullptr, nullptr, in.x, T, shared);
      for (int t = 0; t < T; ++t) {
        double gate = 1.0;
        if (cfg.shared_expert_gate) {
          double dot = 0;
          for (int h = 0; h < H; ++h)
            dot += double(in.x[int64_t(t) * H + h]) * double(lw.shared_gate[size_t(h)]);
          gate = 1.0 / (1.0 + std::exp(-dot));
        }
        for (int h = 0; h < H; ++h) y[size_t(t) * H + h] += gate * double(shared[size_t(t) * H + h]);
      }
    }
    std::vector<float>& out = res.rank[size_t(s)].y;
    out.resize(y.size());
    for (size_t i = 0; i < y.size(); ++i) out[i] = fmt::round_to_bf16(float(y[i]));
  }
  return res;
}

}  // namespace fusedmoe::ref
