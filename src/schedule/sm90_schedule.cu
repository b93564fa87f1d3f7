// Launcher of stage 2 (counts, slots, tile table); the only TU that includes its kernel.
#include "schedule/sm90_schedule.cuh"

#include <iterator>

#include "common/cuda_check.hpp"
#include "common/env.hpp"
#include "common/launch.hpp"

namespace fusedmoe::detail {

int schedule_routes_per_thread(int64_t routes, int sms) {
  if (const int forced = knobs().schedule_routes) return forced;
  for (const int n : kScheduleRoutesPerThread) {
    const int64_t per_cta = int64_t(kScheduleThreads) * n;
    if ((routes + per_cta - 1) / per_cta <= 2 * int64_t(sms)) return n;
  }
  return kScheduleRoutesPerThread[std::size(kScheduleRoutesPerThread) - 1];
}

namespace {
template <int kPerThread>
void launch(const ScheduleParams& p, int R, cudaStream_t stream) {
  using Cfg = ScheduleConfig<kPerThread>;
  const int grid = (R + Cfg::kRoutesPerCta - 1) / Cfg::kRoutesPerCta;
  launch_pdl(schedule_kernel<kPerThread>, dim3(grid), dim3(Cfg::kThreads), 0, stream, p);
  FMOE_CHECK_LAUNCH("schedule_kernel", stream);
}
}  // namespace

void launch_schedule(const ScheduleParams& p, int sms, cudaStream_t stream) {
  const int R = p.T * p.k;
  if (R <= 0) return;
  switch (schedule_routes_per_thread(R, sms)) {
    case 1: return launch<1>(p, R, stream);
    case 2: return launch<2>(p, R, stream);
    case 4: return launch<4>(p, R, stream);
    default: return launch<8>(p, R, stream);
  }
}

}  // namespace fusedmoe::detail
