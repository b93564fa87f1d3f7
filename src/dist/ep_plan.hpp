// Expert parallelism (issue 13): the plan that moves routed tokens between R ranks and back, as
// plain host functions. The device kernels will compute the same plan on the GPU, step for step:
// every quantity here is a histogram (counts), an exclusive scan (offsets) or a position in a
// stable token order (slots), so the kernel and these functions agree bit for bit and the GPU
// tests can compare them.
//
//   source rank s                        destination rank d                  back on s
//   topk_ids [T, k] -> plan_dispatch ->  plan_receive -> local layer ->     combine, in rank order
//   rows [R, cap] (one per (token, d))   rows [R sources, cap] -> compact    (or choice order)
//
// A row is one (token, destination rank) pair, sent once however many of the token's experts
// that rank owns (DeepEP's rule): it carries the token's activations and k (local expert id,
// weight) slots in choice order, -1 / 0 where choice j is on another rank. Per (token, expert)
// rows would move the activations k times; per (token, rank) at most min(k, R) times.
// docs/design.md ("Expert parallelism (issue 13): the plan") has the byte counts.
//
// Buffers are fixed: chunk d of the send buffer is rows [d * cap, (d + 1) * cap) and chunk s of
// the receive buffer rows [s * cap, (s + 1) * cap), cap = max_tokens_per_rank, so a step moves
// fixed-size chunks plus an all-to-all of R counts on the device and stays CUDA-graph capturable.
// Rows past cap are dropped and counted, never written.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "fusedmoe/config.hpp"

namespace fusedmoe::detail {

/// E experts split into R contiguous ranges. The first E % R ranks own one expert more
/// (floor(E / R) + 1), the others floor(E / R): the ranks' loads differ by at most one expert and
/// owner() is two divisions, no table. R > E would leave a rank without experts: refused.
class ExpertPartition {
 public:
  /// Throws Error unless 1 <= num_ranks <= num_experts.
  ExpertPartition(int num_experts, int num_ranks);

  int num_experts() const { return num_experts_; }
  int num_ranks() const { return num_ranks_; }
  /// First (global) expert id of `rank`.
  int first(int rank) const { return rank * base_ + std::min(rank, extra_); }
  /// Experts of `rank`.
  int count(int rank) const { return base_ + (rank < extra_ ? 1 : 0); }
  /// The rank that owns `expert` (in [0, E)).
  int owner(int expert) const {
    const int split = extra_ * (base_ + 1);  // experts of the ranks that own one more
    return expert < split ? expert / (base_ + 1) : extra_ + (expert - split) / base_;
  }

 private:
  int num_experts_ = 0, num_ranks_ = 0;
  int base_ = 0;   // floor(E / R) >= 1
  int extra_ = 0;  // E % R: ranks [0, extra_) own base_ + 1
};

/// What the EP layer asks of the whole layer's config for R ranks, before any GPU work (the CLI
/// checks `run --ep R` with it in the parent process): 1 <= R <= E and every rank owning at least
/// top_k experts. Throws Error naming the
/// numbers, the same sentences EpMoeLayer's constructor gives (it calls this).
void ep_check_config(const MoeConfig& cfg, int num_ranks);

/// The single-GPU layer's drop rule (src/schedule/sm90_route_drop.cuh, route_dropped), on the
/// host: route t*k + j is dropped when its id is outside [0, E) or repeats an expert the token
/// chose at an earlier j. The first occurrence of an expert is kept, so a token never reaches an
/// expert twice and the EP layer drops exactly the routes the single-GPU layer drops.
inline bool ep_route_dropped(const int32_t* ids, int64_t route, int k, int E) {
  const int e = ids[route];
  if (e < 0 || e >= E) return true;
  for (int64_t r = route - route % k; r < route; ++r)
    if (ids[r] == e) return true;
  return false;
}

/// What one source rank sends. Rows of destination d sit in token order (ascending t), so row i
/// of chunk d is the i-th token of this rank with a kept route on d; rows i >= cap are dropped.
struct DispatchPlan {
  int num_tokens = 0, top_k = 0, num_ranks = 0, source_rank = 0;
  int max_tokens_per_rank = 0;         ///< cap: rows per chunk
  std::vector<int32_t> send_counts;    ///< [R] rows in chunk d, <= cap (what the count exchange sends)
  std::vector<int32_t> row_token;      ///< [R * cap] token of row d*cap + i; -1 past send_counts[d]
  std::vector<int32_t> row_local_ids;  ///< [R * cap, k] d's local expert of choice j, or -1
  std::vector<float> row_weights;      ///< [R * cap, k] routing weight of choice j; 0 where id -1
  std::vector<int32_t> token_row;      ///< [T, R] the combine's inverse map: row i of token t in
                                       ///< chunk d, -1 when no row went to d (none, or overflow)
  std::vector<int32_t> route_row;      ///< [T, k] d*cap + i of the row carrying route (t, j),
                                       ///< -1 when the route was dropped or its row overflowed
  int64_t dropped_routes = 0;          ///< ids outside [0, E) or repeated (ep_route_dropped)
  int64_t overflow_rows = 0;           ///< (token, rank) rows past cap, not sent
  int64_t overflow_routes = 0;         ///< the kept routes those rows carried

  /// Rows that leave this rank (chunk source_rank is a local copy).
  int64_t remote_rows() const;
};

/// Plans the dispatch of this rank's T tokens: topk_ids / topk_weights [T, k] (global expert ids),
/// `source_rank` in [0, R), max_tokens_per_rank >= 0. Throws Error on a bad argument; bad ids are
/// not an error (dropped and counted, as the layer does). Steps, each one kernel-shaped:
///   1. per token (a thread or warp each): its kept routes and their owners;
///   2. per destination: the histogram of tokens with a kept route there;
///   3. per (token, destination): the row index, the exclusive scan over tokens in token order;
///      rows below cap are written, the rest counted as overflow.
DispatchPlan plan_dispatch(const int32_t* topk_ids, const float* topk_weights, int T, int k,
                           const ExpertPartition& partition, int source_rank,
                           int max_tokens_per_rank);

/// What one destination rank does with what arrived: rows of source s sit at s*cap + i,
/// i < recv_counts[s]. The compact order is source-major, then the source's row order.
struct ReceivePlan {
  int num_ranks = 0, top_k = 0, max_tokens_per_rank = 0, num_local_experts = 0;
  std::vector<int32_t> recv_counts;    ///< [R] rows from each source, clamped to [0, cap]
  std::vector<int32_t> recv_offsets;   ///< [R + 1] exclusive scan of recv_counts
  std::vector<int32_t> row_slot;       ///< [rows] s*cap + i of compact row recv_offsets[s] + i
  std::vector<int32_t> local_ids;      ///< [rows, k] local expert of choice j, -1: not here
  std::vector<float> local_weights;    ///< [rows, k] its weight, 0 where local_ids is -1
  std::vector<int32_t> expert_counts;  ///< [E_r] routes per local expert (the local layer's groups)
  int64_t num_routes = 0;              ///< sum of expert_counts
  int64_t dropped_routes = 0;          ///< slots that were neither -1 nor a valid, first-time local id
  int64_t clamped_counts = 0;          ///< recv_counts outside [0, cap] (a corrupt exchange)

  int num_rows() const { return recv_offsets.empty() ? 0 : recv_offsets.back(); }
};

/// Plans the local layer on `dest_rank` from the exchanged counts recv_counts [R] and the received
/// metadata recv_local_ids / recv_weights [R * cap, k] (the chunks the sources' row_local_ids /
/// row_weights landed in). Only rows below the (clamped) counts are read. The local routing is
/// [rows, k] with -1 for choices on other ranks: the local layer's drop rule skips them, and a slot
/// that is neither -1 nor a first-time id in [0, E_r) is dropped by the same rule and counted.
ReceivePlan plan_receive(const int32_t* recv_counts, const int32_t* recv_local_ids,
                         const float* recv_weights, int k, const ExpertPartition& partition,
                         int dest_rank, int max_tokens_per_rank);

/// The combine on the source rank, in rank order: y[t, :] = sum over d = 0, 1, ..., R-1 with
/// token_row[t, d] >= 0 of partials[(d*cap + token_row[t, d]), :], where partials [R * cap, H]
/// holds in each row the sum of that row's weighted local routes (what destination d returned
/// into the row it received). The fixed order makes the result reproducible; it equals the
/// single-GPU sum over choices only where a token's routes all sit on one rank (see ref/ep.cpp).
void combine_rank_order(const DispatchPlan& plan, const double* partials, int H, double* y);

/// The combine in choice order: y[t, :] = sum over j = 0..k-1 with route_row[t, j] >= 0 of
/// route_rows[(route_row[t, j] * k + j), :], route_rows [R * cap * k, H] holding each route's
/// weighted expert output. The same order as the single-GPU layer's deterministic finalize and
/// ref::combine, so the sums are bitwise equal to theirs.
void combine_choice_order(const DispatchPlan& plan, const double* route_rows, int H, double* y);

/// Bytes one row moves. dispatch: the activations GEMM 1 reads (fp8: H codes + one fp32 scale per
/// 128 columns; bf16: 2H) plus k int32 local ids and k fp32 weights. combine_partial: one bf16 row
/// of H (the rank-order combine, as DeepEP's; one more rounding per partial, which ref/ep.cpp
/// does not model: it keeps partials in double); combine_route: one fp32 row of H per route (the
/// choice-order combine carries the fp32 values the deterministic finalize sums, to stay bitwise).
struct EpRowBytes {
  int64_t dispatch = 0, combine_partial = 0, combine_route = 0;
};
/// Throws Error for nvfp4 activations (their global scale is the amax of the whole batch: not
/// planned for EP) and for H < 1 or k < 1.
EpRowBytes ep_row_bytes(Precision activation, int H, int k);

}  // namespace fusedmoe::detail
