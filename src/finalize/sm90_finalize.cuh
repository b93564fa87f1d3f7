// The last stage, finalize (contract: finalize.hpp). Design: 8 columns per thread (two 16-byte
// fp32 loads per row, one 16-byte bf16 store), grid over T * N / 8.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "finalize/finalize.hpp"
#include "schedule/sm90_route_drop.cuh"

namespace fusedmoe::detail {

struct FinalizeConfig {
  static constexpr int kThreads = 256;
  static constexpr int kCols = 8;  // per thread; N % 16 == 0
};

__global__ void __launch_bounds__(FinalizeConfig::kThreads)
finalize_kernel(const __grid_constant__ FinalizeParams p) {
  constexpr int kCols = FinalizeConfig::kCols;
  cudaGridDependencySynchronize();  // the GEMM's sums are complete
  cudaTriggerProgrammaticLaunchCompletion();
  const int groups_per_row = p.N / kCols;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(p.T) * groups_per_row) return;
  const int t = int(i / groups_per_row), c = int(i % groups_per_row) * kCols;
  float v[kCols];
  if (!p.deterministic) {
    const float4* src = reinterpret_cast<const float4*>(p.acc + int64_t(t) * p.N + c);
    const float4 a = __ldcs(src), b = __ldcs(src + 1);  // read once: do not keep in L2
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
    v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
#pragma unroll
    for (int j = 0; j < kCols; ++j) v[j] = 0.0f;
    for (int j = 0; j < p.k; ++j) {
      const int64_t route = int64_t(t) * p.k + j;
      // A dropped route (bad expert id, or a repeated one past its expert's T slots) has no row.
      // With rows in slot order (route_row) both index loads leave together, so a route waits for
      // one index as with rows by route. (Finding the rows of 8 routes before the loop needed 50
      // registers instead of 32, and finalize ran 1.4-1.5x slower at T=8192: it lives on the
      // bytes in flight of a full SM. H200, session 39, call 2.)
      const int64_t row = p.route_row ? p.route_row[route] : route;
      if (p.route_slot ? p.route_slot[route] < 0 : route_dropped(p.topk_ids, route, p.k, p.E))
        continue;
      // (Loading 4 routes' rows before adding them was measured 7-10% slower on H100 with bf16
      // rows, session 23: deepseek-v3 T=8192 399 -> 426 µs; not kept.)
      if (p.rows16) {  // 8 bf16 outputs: one 16-byte load
        const uint4 bits = __ldcs(reinterpret_cast<const uint4*>(p.rows16 + row * p.N + c));
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&bits);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float2 f = __bfloat1622float2(h[j]);
          v[2 * j] += f.x;
          v[2 * j + 1] += f.y;
        }
        continue;
      }
      const float4* src = reinterpret_cast<const float4*>(p.acc + row * p.N + c);
      const float4 a = __ldcs(src), b = __ldcs(src + 1);
      v[0] += a.x; v[1] += a.y; v[2] += a.z; v[3] += a.w;
      v[4] += b.x; v[5] += b.y; v[6] += b.z; v[7] += b.w;
    }
  }
  uint4 out;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
  *reinterpret_cast<uint4*>(p.y + int64_t(t) * p.ldy + c) = out;
}

}  // namespace fusedmoe::detail
