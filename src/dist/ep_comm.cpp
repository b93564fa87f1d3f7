// The NCCL communicator and the all-to-all of the expert-parallel layer (ep_comm.hpp).
#include "dist/ep_comm.hpp"

#include <cstdlib>
#include <cstring>

#include "common/cuda_check.hpp"
#include "dist/ep_layer_steps.hpp"

namespace fusedmoe {
namespace {

// NVLink SHARP (NVLS) multicast stays off on these machines (the lending notes: its buffers are
// not available there); an explicit setting by the user wins. Must run before NCCL reads its
// environment, i.e. before the first communicator of the process.
void keep_nvls_off() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

}  // namespace

EpCommunicator::Impl::~Impl() {
  if (owned && comm) ncclCommDestroy(comm);  // no throw from a destructor: the result is dropped
}

EpUniqueId ep_unique_id() {
  keep_nvls_off();
  ncclUniqueId id;
  FMOE_NCCL(ncclGetUniqueId(&id));
  EpUniqueId out;
  static_assert(sizeof(out.bytes) == sizeof(id.internal), "EpUniqueId must hold an ncclUniqueId");
  std::memcpy(out.bytes, id.internal, sizeof(out.bytes));
  return out;
}

EpCommunicator::EpCommunicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EpCommunicator::~EpCommunicator() = default;
EpCommunicator::EpCommunicator(EpCommunicator&&) noexcept = default;
EpCommunicator& EpCommunicator::operator=(EpCommunicator&&) noexcept = default;

EpCommunicator EpCommunicator::create(int num_ranks, int rank, const EpUniqueId& id) {
  FMOE_REQUIRE(num_ranks >= 1, "EpCommunicator: num_ranks=%d must be at least 1", num_ranks);
  FMOE_REQUIRE(rank >= 0 && rank < num_ranks, "EpCommunicator: rank=%d must be in [0, %d)", rank,
               num_ranks);
  keep_nvls_off();
  auto impl = std::make_unique<Impl>();
  FMOE_CUDA(cudaGetDevice(&impl->device));
  ncclUniqueId nid;
  std::memcpy(nid.internal, id.bytes, sizeof(nid.internal));
  FMOE_NCCL(ncclCommInitRank(&impl->comm, num_ranks, nid, rank));
  impl->owned = true;
  impl->rank = rank;
  impl->num_ranks = num_ranks;
  return EpCommunicator(std::move(impl));
}

EpCommunicator EpCommunicator::single_rank() {
  keep_nvls_off();
  auto impl = std::make_unique<Impl>();
  FMOE_CUDA(cudaGetDevice(&impl->device));
  FMOE_NCCL(ncclCommInitAll(&impl->comm, 1, &impl->device));
  impl->owned = true;
  impl->rank = 0;
  impl->num_ranks = 1;
  return EpCommunicator(std::move(impl));
}

EpCommunicator EpCommunicator::borrow(void* nccl_comm) {
  FMOE_REQUIRE(nccl_comm != nullptr, "EpCommunicator::borrow: nccl_comm is null");
  auto impl = std::make_unique<Impl>();
  impl->comm = static_cast<ncclComm_t>(nccl_comm);
  FMOE_NCCL(ncclCommUserRank(impl->comm, &impl->rank));
  FMOE_NCCL(ncclCommCount(impl->comm, &impl->num_ranks));
  FMOE_NCCL(ncclCommCuDevice(impl->comm, &impl->device));
  return EpCommunicator(std::move(impl));
}

// A nested class may use its enclosing class's private constructor.
EpCommunicator EpCommunicator::Impl::simulated(int num_ranks, int rank) {
  FMOE_REQUIRE(num_ranks >= 1 && rank >= 0 && rank < num_ranks,
               "ep_simulated_communicator: rank=%d of num_ranks=%d", rank, num_ranks);
  auto impl = std::make_unique<Impl>();
  FMOE_CUDA(cudaGetDevice(&impl->device));
  impl->rank = rank;
  impl->num_ranks = num_ranks;
  return EpCommunicator(std::move(impl));
}

int EpCommunicator::rank() const { return impl_->rank; }
int EpCommunicator::num_ranks() const { return impl_->num_ranks; }
void* EpCommunicator::nccl_comm() const { return impl_->comm; }

namespace detail {

EpCommunicator ep_simulated_communicator(int num_ranks, int rank) {
  return EpCommunicator::Impl::simulated(num_ranks, rank);
}

void ep_all_to_all(const EpCommunicator::Impl& c, const void* send, void* recv,
                   size_t bytes_per_peer, cudaStream_t stream) {
  if (bytes_per_peer == 0) return;
  // One group: NCCL schedules the 2R point-to-point calls together, so no pair of ranks waits on
  // another's order of sends (a plain loop of blocking pairs could deadlock).
  FMOE_NCCL(ncclGroupStart());
  for (int peer = 0; peer < c.num_ranks; ++peer) {
    const size_t off = size_t(peer) * bytes_per_peer;
    FMOE_NCCL(ncclSend(static_cast<const char*>(send) + off, bytes_per_peer, ncclUint8, peer,
                       c.comm, stream));
    FMOE_NCCL(ncclRecv(static_cast<char*>(recv) + off, bytes_per_peer, ncclUint8, peer, c.comm,
                       stream));
  }
  FMOE_NCCL(ncclGroupEnd());
}

}  // namespace detail
}  // namespace fusedmoe
