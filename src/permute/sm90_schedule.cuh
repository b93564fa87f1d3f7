// Stage 2 of the FP8 MoE projection: group the T*k routes by expert and build the GEMM tile table.
//
//   counts[e]                     routes of expert e (a route with an id outside [0, E) is dropped:
//                                 route_slot = -1, status[kStatusDropped] counts it)
//   sorted_route[e*T + i]         the route id (t*k + j) of expert e's i-th slot, i < counts[e]
//   route_slot[r]                 the slot of route r
//   tile_offsets[e]               exclusive prefix over experts of ceil(counts[e]/BT) * NWB
//                                 (static_tiles: of (ceil(counts[e]/BT) - 1) * NWB, the tiles
//                                 beyond each expert's first, which the GEMM numbers statically)
// The order of slots inside an expert is unspecified (it never changes a result: every output
// column of the GEMM is computed on its own). Design: each CTA ranks its routes with shared-memory
// atomics, then takes one global atomic per (CTA, expert) for its base; the last CTA to finish
// (a done counter, zeroed by stage 1) scans the tile counts with cub::BlockScan. No single-thread
// loops, no host synchronization.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include "moe/moe_fp8_plan.hpp"
#include "route/sm90_route.cuh"

namespace fusedmoe::detail {

struct ScheduleConfig {
  static constexpr int kThreads = kScheduleThreads;
  static constexpr int kPerThread = kScheduleRoutesPerThread;
  static constexpr int kRoutesPerCta = kThreads * kPerThread;
  static constexpr int kExpertsPerThread = (kRouteMaxExperts + kThreads - 1) / kThreads;
  static_assert(kRouteMaxExperts <= kThreads * kExpertsPerThread, "scan covers every expert");
};

__global__ void __launch_bounds__(ScheduleConfig::kThreads)
schedule_kernel(const __grid_constant__ ScheduleParams p) {
  using Cfg = ScheduleConfig;
  using BlockScan = cub::BlockScan<int, Cfg::kThreads>;
  __shared__ int s_count[kRouteMaxExperts];  // this CTA's routes per expert
  __shared__ int s_base[kRouteMaxExperts];   // their first slot inside the expert
  __shared__ typename BlockScan::TempStorage s_scan;
  __shared__ bool s_last;

  // Let the GEMM launch now: its prologue (barriers, weight prefetch) needs nothing from here.
  cudaTriggerProgrammaticLaunchCompletion();
  for (int e = threadIdx.x; e < p.E; e += Cfg::kThreads) s_count[e] = 0;
  __syncthreads();
  cudaGridDependencySynchronize();  // stage 1 wrote the ids and zeroed counts and status

  const int R = p.T * p.k;
  const int r0 = blockIdx.x * Cfg::kRoutesPerCta;
  int expert[Cfg::kPerThread], rank[Cfg::kPerThread];
#pragma unroll
  for (int i = 0; i < Cfg::kPerThread; ++i) {  // all loads first: they are independent
    const int r = r0 + i * Cfg::kThreads + threadIdx.x;
    expert[i] = r < R ? p.topk_ids[r] : -2;
  }
#pragma unroll
  for (int i = 0; i < Cfg::kPerThread; ++i) {
    const int r = r0 + i * Cfg::kThreads + threadIdx.x;
    if (expert[i] == -2) continue;
    if (expert[i] < 0 || expert[i] >= p.E) {
      p.route_slot[r] = -1;
      atomicAdd(p.status + kStatusDropped, 1);
      expert[i] = -2;
      continue;
    }
    rank[i] = atomicAdd(s_count + expert[i], 1);
  }
  __syncthreads();
  // One CTA (decode): it owns every route, so its counts are final and no global atomic, done
  // counter or second read of the counts is needed: two fewer global round trips.
  const bool single = gridDim.x == 1;
  for (int e = threadIdx.x; e < p.E; e += Cfg::kThreads) {
    if (single) {
      s_base[e] = 0;
      p.counts[e] = s_count[e];
    } else if (s_count[e] > 0) {
      s_base[e] = atomicAdd(p.counts + e, s_count[e]);
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < Cfg::kPerThread; ++i) {
    if (expert[i] < 0) continue;
    const int r = r0 + i * Cfg::kThreads + threadIdx.x;
    const int rank_in_expert = s_base[expert[i]] + rank[i];
    if (rank_in_expert >= p.T) {
      // Only caller-given ids that repeat an expert inside a token get here: the expert's region
      // holds T slots, so the route is dropped (and counted), never written out of bounds.
      p.route_slot[r] = -1;
      atomicAdd(p.status + kStatusDropped, 1);
      continue;
    }
    const int slot = expert[i] * p.T + rank_in_expert;
    p.sorted_route[slot] = r;
    p.route_slot[r] = slot;
  }

  // The last CTA to arrive sees every count: it builds the tile table.
  if (!single) {
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(p.status + kStatusDone, 1) == int(gridDim.x) - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
  }
  int tiles[Cfg::kExpertsPerThread];
#pragma unroll
  for (int i = 0; i < Cfg::kExpertsPerThread; ++i) {
    const int e = threadIdx.x * Cfg::kExpertsPerThread + i;
    // Several CTAs: an L2 read, the counts were written by other CTAs' atomics. More than T
    // routes (repeated caller ids) were dropped above; the GEMM clamps the same way.
    int c = 0;
    if (e < p.E) c = min(single ? s_count[e] : __ldcg(p.counts + e), p.T);
    // Static tile numbering (the GEMM's decode walk): token tile 0 of every expert is implicit.
    tiles[i] = max((c + p.block_t - 1) / p.block_t - (p.static_tiles ? 1 : 0), 0) * p.n_wblocks;
  }
  int total = 0;
  BlockScan(s_scan).ExclusiveSum(tiles, tiles, total);
#pragma unroll
  for (int i = 0; i < Cfg::kExpertsPerThread; ++i) {
    const int e = threadIdx.x * Cfg::kExpertsPerThread + i;
    if (e < p.E) p.tile_offsets[e] = tiles[i];
  }
  if (threadIdx.x == 0) p.tile_offsets[p.E] = total;
}

}  // namespace fusedmoe::detail
