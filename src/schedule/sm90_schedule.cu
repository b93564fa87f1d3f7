// Launcher of stage 2 (counts, slots, tile table); the only TU that includes its kernel.
#include "schedule/sm90_schedule.cuh"

#include "common/cuda_check.hpp"
#include "common/launch.hpp"

namespace fusedmoe::detail {

void launch_schedule(const ScheduleParams& p, cudaStream_t stream) {
  const int R = p.T * p.k;
  if (R <= 0) return;
  const int grid = (R + ScheduleConfig::kRoutesPerCta - 1) / ScheduleConfig::kRoutesPerCta;
  launch_pdl(schedule_kernel, dim3(grid), dim3(ScheduleConfig::kThreads), 0, stream, p);
  FMOE_CHECK_LAUNCH("schedule_kernel", stream);
}

}  // namespace fusedmoe::detail
