// fusedmoe: the MoE layer split over R ranks by experts (expert parallelism over NCCL, one
// process or thread per GPU). Each rank holds a contiguous share of the E experts; a step sends
// every token's activations once to each rank that owns one of its experts, runs the local fused
// layer on what arrived, sends the weighted results back and combines them on the token's rank.
// Counts are exchanged on the device and every buffer is sized by max_tokens_per_rank, so a
// step has no host synchronization and captures into a CUDA graph. FP8 layers quantize the
// intermediate per 64 columns at every size (MoeForwardArgs::intermediate_scale_block = 64): the
// single-GPU layer to compare with is asked for the same. docs/design.md ("Expert parallelism")
// has the data flow and the bytes per row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "fusedmoe/config.hpp"
#include "fusedmoe/moe.hpp"
#include "fusedmoe/stream.hpp"
#include "fusedmoe/types.hpp"
#include "fusedmoe/weights.hpp"

namespace fusedmoe {

/// NCCL's unique id (ncclUniqueId, 128 bytes), made on one rank and shared with the others out of
/// band (MPI, a file, torch.distributed) before EpCommunicator::create.
struct EpUniqueId {
  unsigned char bytes[128];
};
/// A fresh id (ncclGetUniqueId). Throws Error when NCCL fails.
EpUniqueId ep_unique_id();

/// A communicator of R ranks, one GPU each: owns an NCCL communicator or borrows the caller's.
class EpCommunicator {
 public:
  /// Joins rank `rank` of `num_ranks` on the current CUDA device (ncclCommInitRank; blocks until
  /// every rank has joined). Sets NCCL_NVLS_ENABLE=0 in the process environment first when it is
  /// unset: NVLink SHARP multicast is kept off on these machines.
  static EpCommunicator create(int num_ranks, int rank, const EpUniqueId& id);
  /// One rank on the current device: the whole EP path on one GPU (tests, R = 1).
  static EpCommunicator single_rank();
  /// The caller's ncclComm_t (passed as void*, so this header needs no NCCL): not destroyed here,
  /// and it must outlive this object and every layer that uses it.
  static EpCommunicator borrow(void* nccl_comm);

  ~EpCommunicator();
  EpCommunicator(EpCommunicator&&) noexcept;
  EpCommunicator& operator=(EpCommunicator&&) noexcept;
  EpCommunicator(const EpCommunicator&) = delete;
  EpCommunicator& operator=(const EpCommunicator&) = delete;

  int rank() const;
  int num_ranks() const;
  void* nccl_comm() const;  ///< the ncclComm_t

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  explicit EpCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// How the results come back and are summed on the token's rank.
enum class EpCombine {
  /// Each rank returns one bf16 row per token it received (the sum of that token's routes it
  /// owns); the token's rank adds them in rank order in fp32: 2H bytes back per row,
  /// reproducible, equal to the single-GPU layer where a token's routes all sit on one rank.
  rank_order,
  /// Each rank returns each route's fp32 row (its local layer runs in deterministic mode); the
  /// token's rank adds them in choice order from 0, the single-GPU deterministic finalize's sum
  /// term for term: bitwise equal to MoeLayer in deterministic mode, 4H bytes back per route.
  choice_order,
};

/// The most chunks a step can be split into (EpForwardArgs::chunks).
constexpr int kEpMaxChunks = 8;

/// One step of one rank. Tensors in device memory on the layer's device.
struct EpForwardArgs {
  TensorRef x;             ///< [T, H] bf16, T <= max_tokens_per_rank, 16-byte aligned rows
  TensorRef topk_ids;      ///< [T, top_k] i32 global expert ids (bad or repeated ids are
                           ///< dropped and counted, as MoeLayer drops them)
  TensorRef topk_weights;  ///< [T, top_k] f32
  TensorRef y;             ///< [T, H] bf16, 16-byte aligned rows; every element written
  EpCombine combine = EpCombine::choice_order;
  ReductionMode mode = ReductionMode::fast;  ///< the local layer's mode in rank_order
                                             ///< (choice_order runs it deterministic)
  /// Shared experts: run them on a side stream (forked from and joined back into the caller's
  /// stream, graph-capturable) while the dispatch and the exchanges go on (true), or first, on
  /// the caller's stream (false). The result is the same bits either way.
  bool overlap_shared = true;
  /// Split the step into this many chunks of ceil(max_tokens_per_rank / chunks) tokens,
  /// pipelined: the exchanges run on a stream of the layer's own, so chunk c + 1's dispatch and
  /// chunk c - 1's return move while chunk c's local layer computes. Every rank must pass the
  /// same value; the workspace is sized for it (workspace_size). 1: no pipelining.
  int chunks = 1;
  /// The local layer's GEMMs use at most this many SMs (0: all), leaving the rest to NCCL's
  /// kernels while the chunks overlap (or to the shared experts beside them).
  int local_sms = 0;
  /// The shared experts' GEMMs use at most this many SMs (0: all), so that beside the local
  /// layer they take a few SMs instead of waves of the whole GPU.
  int shared_sms = 0;
  /// FP8 layers: each row travels quantized as the layer would quantize it (e4m3 codes + one f32
  /// scale per 128 columns, by the token's rank: the same bits), H + 4 ceil(H/128) bytes instead
  /// of 2H; the local layer reads the codes as they arrived (MoeForwardArgs::x_fp8). Not with
  /// bf16 / 4-bit layers or a routing that weights the input (an Error).
  bool fp8_rows = false;
};

/// What the last step on a workspace counted (EpMoeLayer::stats).
struct EpStats {
  int64_t dropped_routes = 0;       ///< this rank's routes with bad or repeated ids
  int64_t overflow_rows = 0;        ///< (token, rank) rows past max_tokens_per_rank (0 while
                                    ///< T <= max_tokens_per_rank, which forward requires)
  int64_t received_rows = 0;        ///< rows that arrived from all ranks
  int64_t received_routes = 0;      ///< routes the local layer ran
  int64_t received_bad_slots = 0;   ///< slots that arrived bad (a corrupt exchange)
  int64_t received_bad_counts = 0;  ///< counts outside [0, max_tokens_per_rank] (corrupt)
};

class EpMoeLayer {
 public:
  /// `cfg` is the whole layer's (E experts, top_k); `local_weights` hold this rank's experts
  /// [first, first + count) of the contiguous partition (count = E / R, one more on the first
  /// E % R ranks), in MoeLayer's formats with E replaced by count. The routing is the caller's:
  /// routing_bias must be empty. Shared experts (cfg.num_shared_experts > 0): every rank holds
  /// the whole shared MLP (shared_w13 / shared_w2 / their scales, shared_gate for Qwen) and runs
  /// it on its own tokens, deterministically, its row added after the routes' (as MoeLayer does).
  /// Every rank must own at least top_k experts. `comm` is borrowed and must outlive the layer.
  /// Throws Error naming the argument.
  EpMoeLayer(const MoeConfig& cfg, const MoeLayerWeights& local_weights, const EpCommunicator& comm,
             int max_tokens_per_rank, Stream stream = nullptr);
  ~EpMoeLayer();
  EpMoeLayer(EpMoeLayer&&) noexcept;
  EpMoeLayer& operator=(EpMoeLayer&&) noexcept;
  EpMoeLayer(const EpMoeLayer&) = delete;
  EpMoeLayer& operator=(const EpMoeLayer&) = delete;

  int first_expert() const;       ///< this rank's first global expert id
  int num_local_experts() const;
  int max_tokens_per_rank() const;

  /// Workspace bytes for steps in this combine (and, for rank_order, local mode) split into
  /// `chunks` (EpForwardArgs::chunks). Needs no initialization; serves every later step with the
  /// same combine, mode and chunks.
  size_t workspace_size(EpCombine combine, ReductionMode mode, int chunks = 1) const;

  /// dispatch (counts and rows all-to-all) -> the local MoeLayer on what arrived (caller-given
  /// routing) -> results all-to-all -> combine into y. Every rank must call it, in the same
  /// order, with the same combine (T may differ, and be 0). No host synchronization. One
  /// process per GPU (torch.distributed, `fusedmoe run --ep`) is the tested model. Several GPUs
  /// in one process, a thread per rank, is not supported: our test of it hung on 4 H100s (not
  /// diagnosed; with peer access on, cudaMalloc / cudaFree wait for the peers' NCCL kernels, so
  /// at least every rank's layer and workspace must exist before any rank's first forward).
  void forward(const EpForwardArgs& args, void* workspace, size_t workspace_bytes,
               Stream stream) const;

  /// The counts of the last step on `workspace`. Synchronizes `stream`; for diagnostics.
  EpStats stats(const void* workspace, EpCombine combine, ReductionMode mode, Stream stream,
                int chunks = 1) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusedmoe
