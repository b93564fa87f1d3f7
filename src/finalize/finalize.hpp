// Contract of the last stage, finalize (src/finalize/sm90_finalize.cuh): the fp32 sums of the
// combine become the bf16 output.
//
//   fast:          y[t, n] = bf16(acc[t, n])
//   deterministic: y[t, n] = bf16(sum_{j < k} rows[t*k + j, n]) in j order, skipping dropped routes
//                  (the rows fp32, or bf16: the layer's fast mode at prefill, `rows16`)
// Every element of y [T, N] is written.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace fusedmoe::detail {

struct FinalizeParams {
  int deterministic;
  int T, N, k;
  const float* acc;           // fast: [T, N]; deterministic: [T * k, N] by route
  const __nv_bfloat16* rows16;  // deterministic, instead of acc: [T * k, N] bf16 rows by route
  const int32_t* route_slot;  // deterministic: [T * k], -1 for a dropped route; nullptr: the
                              // GEMM fused the schedule, a route is dropped iff its id is bad
  const int32_t* topk_ids;    // deterministic with route_slot == nullptr: [T * k]
  // rows16 in slot order (the down GEMM's GroupedGemmParams::sorted_rows): route r's row is
  // route_row[r] for a kept route (route_slot[r] >= 0; route_row of a dropped one is stale).
  // nullptr: rows by route
  const int32_t* route_row = nullptr;
  int E;
  __nv_bfloat16* y;           // [T, N]
  int64_t ldy;                // elements
};
void launch_finalize(const FinalizeParams& p, cudaStream_t stream);

}  // namespace fusedmoe::detail
