// The transport of the expert-parallel layer: all-to-alls of fixed-size chunks over NCCL on the
// caller's stream (ncclGroupStart, one ncclSend and one ncclRecv per peer, ncclGroupEnd). Sizes
// are host values fixed by max_tokens_per_rank, never the device counts, so nothing syncs and a
// step captures into a CUDA graph (NCCL supports capture of its point-to-point calls).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>

#include "fusedmoe/ep_layer.hpp"
#include "fusedmoe/error.hpp"

#define FMOE_NCCL(call)                                                                      \
  do {                                                                                       \
    const ncclResult_t fmoe_nccl_ = (call);                                                  \
    if (fmoe_nccl_ != ncclSuccess)                                                           \
      ::fusedmoe::raise(__FILE__, __LINE__,                                                  \
                        ::fusedmoe::strf("%s failed: %s (%s)", #call,                        \
                                         ::ncclGetErrorString(fmoe_nccl_),                   \
                                         ::ncclGetLastError(nullptr)));                      \
  } while (0)

namespace fusedmoe {

struct EpCommunicator::Impl {
  ncclComm_t comm = nullptr;
  bool owned = false;
  int rank = 0, num_ranks = 0;
  int device = 0;  // the CUDA device of the communicator
  ~Impl();
  /// No NCCL communicator: ep_simulated_communicator (ep_layer_steps.hpp).
  static EpCommunicator simulated(int num_ranks, int rank);
};

namespace detail {

/// recv chunk s (bytes_per_peer at recv + s * bytes_per_peer) <- chunk `rank` of peer s's send,
/// for every peer s, this rank included (NCCL copies the self chunk). Both buffers hold
/// num_ranks chunks. bytes_per_peer == 0 enqueues nothing.
void ep_all_to_all(const EpCommunicator::Impl& c, const void* send, void* recv,
                   size_t bytes_per_peer, cudaStream_t stream);

}  // namespace detail
}  // namespace fusedmoe
