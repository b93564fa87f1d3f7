// Launcher of the layer's weight preparation; the only TU that includes its kernel.
#include "layer/sm90_prepare.cuh"

#include "common/cuda_check.hpp"

namespace fusedmoe::detail {

void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return;
  const int64_t grid = (p.rows + kGatherRowsPerCta - 1) / kGatherRowsPerCta;
  gather_rows_kernel<<<dim3(unsigned(grid)), kGatherThreads, 0, stream>>>(p);
  FMOE_CHECK_LAUNCH("gather_rows_kernel", stream);
}

}  // namespace fusedmoe::detail
