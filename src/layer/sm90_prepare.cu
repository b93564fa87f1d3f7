// Launcher of the layer's weight preparation; the only TU that includes its kernel.
#include "layer/sm90_prepare.cuh"

#include <algorithm>

#include "common/cuda_check.hpp"

namespace fusedmoe::detail {

void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return;
  const int64_t grid = (p.rows + kGatherRowsPerCta - 1) / kGatherRowsPerCta;
  gather_rows_kernel<<<dim3(unsigned(grid)), kGatherThreads, 0, stream>>>(p);
  FMOE_CHECK_LAUNCH("gather_rows_kernel", stream);
}

void launch_e2m1_prepare(const E2m1PrepareParams& p, cudaStream_t stream) {
  const int64_t blocks = p.tiles * p.KB;
  if (blocks <= 0) return;
  e2m1_prepare_kernel<<<dim3(unsigned(blocks)), kE2m1PrepareThreads, 0, stream>>>(p);
  FMOE_CHECK_LAUNCH("e2m1_prepare_kernel", stream);
}

void launch_e2m1_scale_scan(const E2m1ScaleScanParams& p, cudaStream_t stream) {
  if (p.n <= 0) return;
  const int64_t grid = std::min<int64_t>((p.n + kScaleScanThreads - 1) / kScaleScanThreads, 4096);
  e2m1_scale_scan_kernel<<<dim3(unsigned(grid)), kScaleScanThreads, 0, stream>>>(p);
  FMOE_CHECK_LAUNCH("e2m1_scale_scan_kernel", stream);
}

}  // namespace fusedmoe::detail
