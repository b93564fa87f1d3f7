// Which routes the pipeline drops, decided the same way by every stage that reads the ids (the
// schedule kernel, the GEMM's fused schedule, the deterministic finalize): a route whose expert id
// is outside [0, E), or repeats an expert its token already chose (only caller-given ids with
// validation off can do either). Dropping a repeat (instead of counting it twice) gives the same
// result at every T, whichever schedule path runs; the host check refuses both when validation
// is on.
#pragma once

#include <cstdint>

namespace fusedmoe::detail {

// Index is the caller's route type: int where T * k fits it (the schedule kernel), so the
// token's first route costs a 32-bit remainder, not a 64-bit division routine.
template <class Index>
__device__ __forceinline__ bool route_dropped(const int32_t* ids, Index route, int k, int E) {
  const int e = ids[route];
  if (e < 0 || e >= E) return true;
  const Index first = route - route % k;
  for (Index r = first; r < route; ++r)
    if (ids[r] == e) return true;
  return false;
}

}  // namespace fusedmoe::detail
