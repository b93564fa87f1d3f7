// The steps of one EpMoeLayer forward, apart (internal). forward() runs them with the NCCL
// all-to-alls between; the GPU tests also run R layers on one GPU with copies between their
// buffers in place of NCCL (NCCL cannot put two ranks on one GPU), which checks R > 1 without a
// multi-GPU machine:
//   ep_dispatch -> exchange(counts) -> exchange(rows) -> ep_local -> exchange(results) -> ep_combine
// where exchange(b) moves chunk d of each rank s's b.send to chunk s of rank d's b.recv.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "fusedmoe/ep_layer.hpp"
#include "fusedmoe/layer.hpp"

namespace fusedmoe::detail {

/// One all-to-all's buffers on one rank: num_ranks chunks of bytes_per_peer each.
struct EpExchange {
  const void* send = nullptr;
  void* recv = nullptr;
  size_t bytes_per_peer = 0;
};
struct EpExchanges {
  EpExchange counts, rows, results;
};

/// Validates the call (throws Error naming the argument) and returns the three exchanges' buffers
/// in `workspace`.
EpExchanges ep_check_forward(const EpMoeLayer& layer, const EpForwardArgs& args, void* workspace,
                             size_t workspace_bytes);
/// The dispatch kernels: the plan and the packed rows of this rank's tokens.
void ep_dispatch(const EpMoeLayer& layer, const EpForwardArgs& args, void* workspace,
                 cudaStream_t stream);
/// After the counts and rows arrived: receive, the local layer, the results into their slots.
void ep_local(const EpMoeLayer& layer, const EpForwardArgs& args, void* workspace,
              cudaStream_t stream);
/// The shared experts of this rank's tokens (nothing without them): their routing and the
/// one-expert layer, into the workspace's shared rows. Before ep_combine, on any stream.
void ep_shared(const EpMoeLayer& layer, const EpForwardArgs& args, void* workspace,
               cudaStream_t stream);
/// After the results arrived (and ep_shared ran): the combine into args.y.
void ep_combine(const EpMoeLayer& layer, const EpForwardArgs& args, void* workspace,
                cudaStream_t stream);

/// Where an unchunked step's local part sits in `workspace` on this rank (the bench's failure
/// diagnostics read them after a forward): what arrived, and the local layer's call on it.
struct EpStepViews {
  int rows = 0;                          ///< R * cap: the local layer's rows
  const int32_t* recv_counts = nullptr;  ///< [R]
  const int32_t* row_slot = nullptr;     ///< [rows] s * cap + i, or -1
  MoeForwardArgs local_args;             ///< x (bf16) or x_fp8 + scales, the routing, y: as the
                                         ///< step passes them (max_sms aside)
  const MoeLayer* local = nullptr;       ///< the local layer (this rank's experts)
};
EpStepViews ep_step_views(const EpMoeLayer& layer, const EpForwardArgs& args, void* workspace);

/// The local layer's weights from the rank's: without the shared experts' (they run as a
/// one-expert layer of their own).
MoeLayerWeights ep_routed_weights(const MoeLayerWeights& local_weights);

/// A communicator without NCCL for the simulation above: rank `rank` of `num_ranks` on the
/// current device. EpMoeLayer::forward refuses it (it has nothing to send with).
EpCommunicator ep_simulated_communicator(int num_ranks, int rank);

}  // namespace fusedmoe::detail
