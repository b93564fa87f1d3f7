// Launchers of the expert-parallel kernels; the only TU that includes them. No PDL: the kernels
// sit between NCCL's and each reads what the previous one wrote in full.
#include <algorithm>
#include <climits>
#include <cstddef>

#include "common/cuda_check.hpp"
#include "common/launch.hpp"
#include "dist/sm90_ep_kernels.cuh"

namespace fusedmoe::detail {
namespace {

int64_t round_up16(int64_t x) { return (x + 15) / 16 * 16; }

int grid_of(int64_t items, int per_cta) { return int((items + per_cta - 1) / per_cta); }

}  // namespace

EpRowLayout ep_row_layout(int64_t payload_bytes, int k) {
  EpRowLayout l;
  l.payload_bytes = payload_bytes;
  l.ids_offset = round_up16(payload_bytes);
  l.weights_offset = l.ids_offset + 4 * int64_t(k);
  l.row_bytes = round_up16(l.weights_offset + 4 * int64_t(k));
  return l;
}

void launch_ep_dispatch(const EpDispatchParams& p, cudaStream_t stream) {
  using Cfg = EpKernelConfig;
  const int R = p.part.num_ranks;
  // The three dispatch counters are sums: zero them first (an async memset is graph-capturable).
  FMOE_CUDA(cudaMemsetAsync(&p.counters->dropped_routes, 0, 3 * sizeof(unsigned long long), stream));
  if (p.T > 0) {
    launch_kernel(ep_route_owner_kernel, dim3(grid_of(p.T, Cfg::kOwnerThreads)),
                  dim3(Cfg::kOwnerThreads), 0, stream, false, p);
    FMOE_CHECK_LAUNCH("ep_route_owner_kernel", stream);
  }
  // Always launched: it writes send_counts, which the count exchange sends even when T = 0.
  launch_kernel(ep_dispatch_scan_kernel, dim3(R), dim3(Cfg::kScanThreads), 0, stream, false, p);
  FMOE_CHECK_LAUNCH("ep_dispatch_scan_kernel", stream);
  FMOE_REQUIRE(int64_t(p.T) * R < INT32_MAX, "ep dispatch: T=%d x %d ranks exceeds the pack's "
               "32-bit row index", p.T, R);
  if (p.T > 0 && p.cap > 0) {
    launch_kernel(ep_dispatch_pack_kernel, dim3(grid_of(int64_t(p.T) * R, Cfg::kRowsPerCta)),
                  dim3(Cfg::kRowThreads), 0, stream, false, p);
    FMOE_CHECK_LAUNCH("ep_dispatch_pack_kernel", stream);
  }
}

void launch_ep_receive(const EpReceiveParams& p, cudaStream_t stream) {
  using Cfg = EpKernelConfig;
  const int R = p.part.num_ranks;
  const int E_local = p.part.base + (p.dest_rank < p.part.extra ? 1 : 0);
  FMOE_CUDA(cudaMemsetAsync(&p.counters->recv_dropped, 0, 3 * sizeof(unsigned long long), stream));
  FMOE_CUDA(cudaMemsetAsync(p.expert_counts, 0, size_t(E_local) * sizeof(int32_t), stream));
  // At least one warp, even for cap = 0: it writes the offsets and counts the clamped counts.
  const int64_t rows = std::max<int64_t>(int64_t(R) * p.cap, 1);
  launch_kernel(ep_receive_kernel, dim3(grid_of(rows, Cfg::kRowsPerCta)), dim3(Cfg::kRowThreads), 0,
                stream, false, p);
  FMOE_CHECK_LAUNCH("ep_receive_kernel", stream);
}

void launch_ep_return(const EpReturnParams& p, cudaStream_t stream) {
  const int64_t ctas = int64_t(p.R) * p.cap * (p.choice_order ? p.k : 1);
  if (ctas == 0) return;
  launch_kernel(ep_return_kernel, dim3(unsigned(ctas)), dim3(EpKernelConfig::kMoveThreads), 0,
                stream, false, p);
  FMOE_CHECK_LAUNCH("ep_return_kernel", stream);
}

void launch_ep_combine(const EpCombineParams& p, cudaStream_t stream) {
  using Cfg = EpKernelConfig;
  const int64_t threads = int64_t(p.T) * (p.H / Cfg::kCombineCols);
  FMOE_REQUIRE(threads < INT32_MAX, "ep combine: T=%d x H=%d / %d exceeds the 32-bit thread index",
               p.T, p.H, Cfg::kCombineCols);
  if (threads == 0) return;
  launch_kernel(ep_combine_kernel, dim3(grid_of(threads, Cfg::kCombineThreads)),
                dim3(Cfg::kCombineThreads), 0, stream, false, p);
  FMOE_CHECK_LAUNCH("ep_combine_kernel", stream);
}

void launch_ep_shared_routing(const EpSharedRoutingParams& p, cudaStream_t stream) {
  using Cfg = EpKernelConfig;
  if (p.T == 0) return;
  launch_kernel(ep_shared_routing_kernel, dim3(grid_of(p.T, Cfg::kRowsPerCta)),
                dim3(Cfg::kRowThreads), 0, stream, false, p);
  FMOE_CHECK_LAUNCH("ep_shared_routing_kernel", stream);
}

}  // namespace fusedmoe::detail
