// The last stage, finalize (contract: finalize.hpp). Design: 8 columns per thread (two 16-byte
// fp32 loads per row, one 16-byte bf16 store), grid over T * N / 8.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cuda/ptx>
#include <cstdint>
#include <type_traits>

#include "finalize/finalize.hpp"
#include "schedule/sm90_route_drop.cuh"

namespace fusedmoe::detail {

struct FinalizeConfig {
  static constexpr int kThreads = 256;
  static constexpr int kCols = 8;  // per thread; N % 16 == 0
};

// The sums' arithmetic, one copy for both kernels (finalize_rows_kernel must give finalize_kernel's
// bits): 8 adjacent outputs per thread, added in fp32, stored as one 16-byte bf16 row piece.
__device__ __forceinline__ void add8(float (&v)[8], uint4 bf16_bits) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&bf16_bits);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(h[j]);
    v[2 * j] += f.x;
    v[2 * j + 1] += f.y;
  }
}
__device__ __forceinline__ void add8(float (&v)[8], float4 a, float4 b) {
  v[0] += a.x; v[1] += a.y; v[2] += a.z; v[3] += a.w;
  v[4] += b.x; v[5] += b.y; v[6] += b.z; v[7] += b.w;
}
__device__ __forceinline__ void store8(__nv_bfloat16* dst, const float (&v)[8]) {
  uint4 out;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int j = 0; j < 4; ++j) h[j] = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
  *reinterpret_cast<uint4*>(dst) = out;
}

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
        add8(v, __ldcs(reinterpret_cast<const uint4*>(p.rows16 + row * p.N + c)));
        continue;
      }
      const float4* src = reinterpret_cast<const float4*>(p.acc + row * p.N + c);
      add8(v, __ldcs(src), __ldcs(src + 1));
    }
  }
  store8(p.y + int64_t(t) * p.ldy + c, v);
}


// Finalize over rows at large T (FinalizeRowsConfig): the same sums, in the same order and
// arithmetic as finalize_kernel's deterministic branch (so y is bit for bit the same), with the
// rows brought into shared memory by bulk copies instead of one 16-byte load per thread at a
// time. Why: finalize_kernel lives on its bytes in flight, 32 KB per SM at full occupancy (one
// load per thread), ~3.8 TB/s on H200 at T=8192 (83% of the read-only ceiling); each register
// more costs occupancy (50 registers ran 1.4-1.5x slower, session 39). Here a producer warp keeps
// kStages items of k rows x kCW columns in flight per CTA without registers.
// An item is (token t, columns c0 .. c0 + kCW): the producer's lanes j < k read route j's slot
// (and its row: route_row, or the route itself), lane 0 arms the stage's barrier with the kept
// rows' bytes and writes their mask, and each kept route's lane copies its row piece into slot j
// of the stage. The consumers (4 warps, 8 columns a thread) add the kept rows in j order, store
// 8 bf16 outputs and release the stage.
struct FinalizeRowsConfig {
  static constexpr int kConsumers = 128;
  static constexpr int kThreads = kConsumers + 32;  // + the producer warp
  static constexpr int kCW = kConsumers * FinalizeConfig::kCols;  // 1024 columns an item
  static constexpr int kStages = 4;
  static constexpr int kItemsPerCta = 16;
  static constexpr int kMaxK = 32;  // the producer's lanes
};

template <typename RowT>
__global__ void __launch_bounds__(FinalizeRowsConfig::kThreads)
finalize_rows_kernel(const __grid_constant__ FinalizeParams p) {
  namespace cptx = cuda::ptx;
  using Cfg = FinalizeRowsConfig;
  constexpr int kCols = FinalizeConfig::kCols;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[Cfg::kStages], empty[Cfg::kStages];
  __shared__ uint32_t kept[Cfg::kStages];
  const int tid = threadIdx.x;
  const size_t stage_bytes = size_t(p.k) * Cfg::kCW * sizeof(RowT);
  if (tid == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      cptx::mbarrier_init(&full[s], 1);
      cptx::mbarrier_init(&empty[s], Cfg::kConsumers);
    }
    cptx::fence_mbarrier_init(cptx::sem_release, cptx::scope_cluster);  // visible to the copies
  }
  __syncthreads();
  cudaGridDependencySynchronize();  // the GEMM's rows are complete
  cudaTriggerProgrammaticLaunchCompletion();
  const int chunks = (p.N + Cfg::kCW - 1) / Cfg::kCW;
  const int64_t items = int64_t(p.T) * chunks;
  const int64_t first = int64_t(blockIdx.x) * Cfg::kItemsPerCta;
  const int count = int(items - first < Cfg::kItemsPerCta ? items - first : Cfg::kItemsPerCta);
  const RowT* rows = std::is_same_v<RowT, float> ? reinterpret_cast<const RowT*>(p.acc)
                                                  : reinterpret_cast<const RowT*>(p.rows16);
  if (tid >= Cfg::kConsumers) {  // the producer warp
    const int lane = tid - Cfg::kConsumers;
    for (int i = 0; i < count; ++i) {
      const int s = i % Cfg::kStages;
      const uint32_t parity = (i / Cfg::kStages) & 1;
      const int64_t item = first + i;
      const int t = int(item / chunks), c0 = int(item % chunks) * Cfg::kCW;
      const uint32_t bytes = uint32_t(min(Cfg::kCW, p.N - c0) * sizeof(RowT));
      // (the index loads do not touch the stage: they go before its wait)
      int64_t row = -1;
      if (lane < p.k) {
        const int64_t route = int64_t(t) * p.k + lane;
        const int slot = p.route_slot[route];
        const int64_t r = p.route_row ? int64_t(p.route_row[route]) : route;
        row = slot < 0 ? -1 : r;
      }
      const uint32_t mask = __ballot_sync(0xffffffffu, row >= 0);
      // Lane 0 alone waits for the stage, and the warp follows it through __syncwarp: a lane that
      // polled the empty barrier without gating the full one could be lapped (a token whose routes
      // are all dropped arms the full barrier with 0 bytes, so its phase completes at lane 0's
      // arrive, the consumers release the stage again, and the empty barrier's parity reads "not
      // yet" to a lane that had not polled in between): the deadlock of the grouped GEMM's
      // producer warps fixed in session 44 (sm90_grouped_gemm.cuh, produce), here within a warp.
      if (lane == 0) {
        while (!cptx::mbarrier_try_wait_parity(&empty[s], parity ^ 1)) {
        }
        kept[s] = mask;
        const uint32_t tx = uint32_t(__popc(mask)) * bytes;
        cptx::mbarrier_arrive_expect_tx(cptx::sem_release, cptx::scope_cta, cptx::space_shared, &full[s], tx);
      }
      __syncwarp();
      if (row >= 0)
        cptx::cp_async_bulk(cptx::space_cluster, cptx::space_global,
                            smem + s * stage_bytes + size_t(lane) * Cfg::kCW * sizeof(RowT),
                            rows + row * p.N + c0, bytes, &full[s]);
    }
    return;
  }
  for (int i = 0; i < count; ++i) {  // the consumers
    const int s = i % Cfg::kStages;
    const uint32_t parity = (i / Cfg::kStages) & 1;
    const int64_t item = first + i;
    const int t = int(item / chunks), c = int(item % chunks) * Cfg::kCW + tid * kCols;
    while (!cptx::mbarrier_try_wait_parity(&full[s], parity)) {
    }
    const uint32_t mask = kept[s];
    const uint8_t* stage = smem + s * stage_bytes + size_t(tid) * kCols * sizeof(RowT);
    float v[kCols];
#pragma unroll
    for (int j = 0; j < kCols; ++j) v[j] = 0.0f;
    if (c < p.N) {
      for (int j = 0; j < p.k; ++j) {
        if (!(mask >> j & 1)) continue;
        const uint8_t* src = stage + size_t(j) * Cfg::kCW * sizeof(RowT);
        if constexpr (std::is_same_v<RowT, float>)
          add8(v, reinterpret_cast<const float4*>(src)[0], reinterpret_cast<const float4*>(src)[1]);
        else
          add8(v, *reinterpret_cast<const uint4*>(src));
      }
    }
    cptx::mbarrier_arrive(&empty[s]);  // the stage is read
    if (c < p.N) store8(p.y + int64_t(t) * p.ldy + c, v);
  }
}

}  // namespace fusedmoe::detail
