// Launcher of stage 4 (finalize); the only TU that includes its kernel.
#include "finalize/sm90_finalize.cuh"

#include "common/cuda_check.hpp"
#include "common/launch.hpp"

namespace fusedmoe::detail {

void launch_finalize(const FinalizeParams& p, cudaStream_t stream) {
  const int64_t threads = int64_t(p.T) * (p.N / FinalizeConfig::kCols);
  if (threads <= 0) return;
  const int grid = int((threads + FinalizeConfig::kThreads - 1) / FinalizeConfig::kThreads);
  launch_pdl(finalize_kernel, dim3(grid), dim3(FinalizeConfig::kThreads), 0, stream, p);
  FMOE_CHECK_LAUNCH("finalize_kernel", stream);
}

}  // namespace fusedmoe::detail
