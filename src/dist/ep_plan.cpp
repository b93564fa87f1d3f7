// The expert-parallel plan on the host (contract: ep_plan.hpp). Each loop names the kernel step it
// stands for; the host runs them one after another where the device runs them in parallel.
#include "dist/ep_plan.hpp"

#include <climits>

#include "fusedmoe/error.hpp"

namespace fusedmoe::detail {
namespace {

// Row indices and slots are int32 on the device (as the layer's route ids are): the fixed
// buffers [R * cap, k] must be indexable by one.
void require_int32_rows(const char* op, int R, int cap, int k) {
  FMOE_REQUIRE(int64_t(R) * cap * k <= INT32_MAX,
               "%s: %d ranks x max_tokens_per_rank %d x top_k %d = %lld route slots exceed the "
               "int32 indices of the dispatch buffers", op, R, cap, k,
               (long long)(int64_t(R) * cap * k));
}

}  // namespace

ExpertPartition::ExpertPartition(int num_experts, int num_ranks) {
  FMOE_REQUIRE(num_experts >= 1, "ExpertPartition: num_experts=%d must be at least 1",
               num_experts);
  FMOE_REQUIRE(num_ranks >= 1, "ExpertPartition: num_ranks=%d must be at least 1", num_ranks);
  FMOE_REQUIRE(num_ranks <= num_experts,
               "ExpertPartition: %d ranks for %d experts: every rank must own at least one "
               "expert (num_ranks <= num_experts)", num_ranks, num_experts);
  num_experts_ = num_experts;
  num_ranks_ = num_ranks;
  base_ = num_experts / num_ranks;
  extra_ = num_experts % num_ranks;
}

void ep_check_config(const MoeConfig& cfg, int num_ranks) {
  constexpr const char* kOp = "EpMoeLayer";
  const ExpertPartition part(cfg.num_experts, num_ranks);  // throws when R > E or R < 1
  FMOE_REQUIRE(part.count(num_ranks - 1) >= cfg.top_k,
               "%s: %d experts over %d ranks leave %d on the last rank, fewer than top_k=%d (the "
               "local layer's routing table is [rows, top_k] over its own experts)", kOp,
               cfg.num_experts, num_ranks, part.count(num_ranks - 1), cfg.top_k);
}

int64_t DispatchPlan::remote_rows() const {
  int64_t n = 0;
  for (int d = 0; d < num_ranks; ++d)
    if (d != source_rank) n += send_counts[size_t(d)];
  return n;
}

DispatchPlan plan_dispatch(const int32_t* topk_ids, const float* topk_weights, int T, int k,
                           const ExpertPartition& partition, int source_rank,
                           int max_tokens_per_rank) {
  const int R = partition.num_ranks(), E = partition.num_experts(), cap = max_tokens_per_rank;
  FMOE_REQUIRE(T >= 0, "plan_dispatch: T=%d must be >= 0", T);
  FMOE_REQUIRE(k >= 1 && k <= ConfigLimits::kMaxTopK, "plan_dispatch: top_k=%d must be in [1, %d]",
               k, ConfigLimits::kMaxTopK);
  FMOE_REQUIRE(source_rank >= 0 && source_rank < R,
               "plan_dispatch: source_rank=%d must be in [0, %d)", source_rank, R);
  FMOE_REQUIRE(cap >= 0, "plan_dispatch: max_tokens_per_rank=%d must be >= 0", cap);
  FMOE_REQUIRE(T == 0 || (topk_ids && topk_weights),
               "plan_dispatch: topk_ids and topk_weights [%d, %d] must not be null", T, k);
  require_int32_rows("plan_dispatch", R, cap, k);

  DispatchPlan p;
  p.num_tokens = T;
  p.top_k = k;
  p.num_ranks = R;
  p.source_rank = source_rank;
  p.max_tokens_per_rank = cap;
  const size_t rows = size_t(R) * size_t(cap);
  p.send_counts.assign(size_t(R), 0);
  p.row_token.assign(rows, -1);
  p.row_local_ids.assign(rows * size_t(k), -1);
  p.row_weights.assign(rows * size_t(k), 0.0f);
  p.token_row.assign(size_t(T) * size_t(R), -1);
  p.route_row.assign(size_t(T) * size_t(k), -1);

  // Step 1, per token: the owner of each kept route (-1: dropped) and which ranks the token goes
  // to. Tokens are independent here: one thread or warp per token on the device.
  std::vector<int32_t> route_dest(size_t(T) * size_t(k), -1);
  std::vector<char> goes_to(size_t(T) * size_t(R), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) {
      const int64_t route = t * k + j;
      if (ep_route_dropped(topk_ids, route, k, E)) {
        ++p.dropped_routes;
        continue;
      }
      const int d = partition.owner(topk_ids[route]);
      route_dest[size_t(route)] = d;
      goes_to[size_t(t * R + d)] = 1;
    }

  // Steps 2 and 3, per destination: the row of token t is the number of earlier tokens that go
  // to d (the exclusive scan of goes_to down the token axis: a stable order, so which rows
  // overflow does not depend on thread timing), and the final running value is d's histogram.
  std::vector<int32_t> wanted(size_t(R), 0);
  for (int64_t t = 0; t < T; ++t)
    for (int d = 0; d < R; ++d) {
      if (!goes_to[size_t(t * R + d)]) continue;
      const int32_t i = wanted[size_t(d)]++;
      if (i >= cap) {  // past the chunk: dropped with its routes, nothing written
        ++p.overflow_rows;
        for (int j = 0; j < k; ++j) p.overflow_routes += route_dest[size_t(t * k + j)] == d;
        continue;
      }
      const int64_t slot = int64_t(d) * cap + i;
      p.token_row[size_t(t * R + d)] = i;
      p.row_token[size_t(slot)] = int32_t(t);
      for (int j = 0; j < k; ++j) {
        const int64_t route = t * k + j;
        if (route_dest[size_t(route)] != d) continue;
        p.row_local_ids[size_t(slot * k + j)] = topk_ids[route] - partition.first(d);
        p.row_weights[size_t(slot * k + j)] = topk_weights[route];
        p.route_row[size_t(route)] = int32_t(slot);
      }
    }
  for (int d = 0; d < R; ++d) p.send_counts[size_t(d)] = std::min(wanted[size_t(d)], cap);
  return p;
}

ReceivePlan plan_receive(const int32_t* recv_counts, const int32_t* recv_local_ids,
                         const float* recv_weights, int k, const ExpertPartition& partition,
                         int dest_rank, int max_tokens_per_rank) {
  const int R = partition.num_ranks(), cap = max_tokens_per_rank;
  FMOE_REQUIRE(k >= 1 && k <= ConfigLimits::kMaxTopK, "plan_receive: top_k=%d must be in [1, %d]",
               k, ConfigLimits::kMaxTopK);
  FMOE_REQUIRE(dest_rank >= 0 && dest_rank < R, "plan_receive: dest_rank=%d must be in [0, %d)",
               dest_rank, R);
  FMOE_REQUIRE(cap >= 0, "plan_receive: max_tokens_per_rank=%d must be >= 0", cap);
  FMOE_REQUIRE(recv_counts, "plan_receive: recv_counts [%d] must not be null", R);
  FMOE_REQUIRE(cap == 0 || (recv_local_ids && recv_weights),
               "plan_receive: recv_local_ids and recv_weights [%d * %d, %d] must not be null", R,
               cap, k);
  require_int32_rows("plan_receive", R, cap, k);
  const int E_local = partition.count(dest_rank);

  ReceivePlan p;
  p.num_ranks = R;
  p.top_k = k;
  p.max_tokens_per_rank = cap;
  p.num_local_experts = E_local;

  // The counts come over the wire: a value outside [0, cap] (a corrupt exchange) is clamped, so
  // nothing past a chunk is ever read; the kernel clamps the same way and raises the same count.
  p.recv_counts.assign(size_t(R), 0);
  p.recv_offsets.assign(size_t(R) + 1, 0);
  for (int s = 0; s < R; ++s) {
    const int32_t c = std::clamp(recv_counts[s], 0, cap);
    p.clamped_counts += c != recv_counts[s];
    p.recv_counts[size_t(s)] = c;
    p.recv_offsets[size_t(s) + 1] = p.recv_offsets[size_t(s)] + c;  // exclusive scan
  }

  const int rows = p.num_rows();
  p.row_slot.resize(size_t(rows));
  p.local_ids.assign(size_t(rows) * size_t(k), -1);
  p.local_weights.assign(size_t(rows) * size_t(k), 0.0f);
  p.expert_counts.assign(size_t(E_local), 0);
  // One thread per compact row on the device: row r of source s reads slot s*cap + i.
  for (int s = 0; s < R; ++s)
    for (int32_t i = 0; i < p.recv_counts[size_t(s)]; ++i) {
      const int64_t r = p.recv_offsets[size_t(s)] + i, slot = int64_t(s) * cap + i;
      p.row_slot[size_t(r)] = int32_t(slot);
      const int32_t* ids = recv_local_ids + slot * k;
      for (int j = 0; j < k; ++j) {
        if (ids[j] == -1) continue;  // the choice went to another rank
        if (ep_route_dropped(ids, j, k, E_local)) {
          ++p.dropped_routes;
          continue;
        }
        p.local_ids[size_t(r * k + j)] = ids[j];
        p.local_weights[size_t(r * k + j)] = recv_weights[slot * k + j];
        ++p.expert_counts[size_t(ids[j])];
        ++p.num_routes;
      }
    }
  return p;
}

void combine_rank_order(const DispatchPlan& plan, const double* partials, int H, double* y) {
  const int R = plan.num_ranks, cap = plan.max_tokens_per_rank;
  for (int64_t t = 0; t < plan.num_tokens; ++t)
    for (int h = 0; h < H; ++h) {
      double s = 0;
      for (int d = 0; d < R; ++d) {
        const int32_t i = plan.token_row[size_t(t * R + d)];
        if (i >= 0) s += partials[(int64_t(d) * cap + i) * H + h];
      }
      y[t * H + h] = s;
    }
}

void combine_choice_order(const DispatchPlan& plan, const double* route_rows, int H, double* y) {
  const int k = plan.top_k;
  for (int64_t t = 0; t < plan.num_tokens; ++t)
    for (int h = 0; h < H; ++h) {
      double s = 0;
      for (int j = 0; j < k; ++j) {
        const int32_t slot = plan.route_row[size_t(t * k + j)];
        if (slot >= 0) s += route_rows[(int64_t(slot) * k + j) * H + h];
      }
      y[t * H + h] = s;
    }
}

EpRowBytes ep_row_bytes(Precision activation, int H, int k) {
  FMOE_REQUIRE(H >= 1 && k >= 1, "ep_row_bytes: H=%d and k=%d must be at least 1", H, k);
  FMOE_REQUIRE(activation == Precision::fp8_block || activation == Precision::bf16,
               "ep_row_bytes: %s activations are not planned for expert parallelism (fp8 1x128 "
               "or bf16; an nvfp4 activation's global scale is the amax of the whole batch)",
               precision_name(activation));
  const int64_t meta = int64_t(k) * (4 + 4);  // int32 local id + fp32 weight per choice
  EpRowBytes b;
  b.dispatch = activation == Precision::fp8_block ? int64_t(H) + 4 * ((int64_t(H) + 127) / 128) + meta
                                                  : 2 * int64_t(H) + meta;
  b.combine_partial = 2 * int64_t(H);
  b.combine_route = 4 * int64_t(H);
  return b;
}

}  // namespace fusedmoe::detail
