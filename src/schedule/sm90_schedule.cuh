// Stage 2, the schedule (contract: schedule.hpp). Design: each CTA ranks its routes with
// shared-memory atomics, then takes one global atomic per (CTA, expert) for its base; the last CTA
// to finish (a done counter, zeroed by stage 1) scans the token tiles and the route offsets with
// cub::BlockScan. No single-thread loops, no host synchronization.
// The kernel is a chain of dependent round trips (ids, drop check, ranks, bases, slots, the done
// counter, the scan), not a byte stream: its time is that chain times the routes each thread walks
// through it. So the grid is as wide as two CTAs an SM allow (schedule_routes_per_thread): session
// 41's ncu found the 8-routes-a-thread form at 21 us both at T = 2048 (4 CTAs) and 8192 (16).
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include "route/route_quant.hpp"
#include "route/route.hpp"
#include "schedule/schedule.hpp"
#include "schedule/sm90_route_drop.cuh"

namespace fusedmoe::detail {

template <int kPerThread_>
struct ScheduleConfig {
  static constexpr int kThreads = kScheduleThreads;
  static constexpr int kPerThread = kPerThread_;
  static constexpr int kRoutesPerCta = kThreads * kPerThread;
  static constexpr int kExpertsPerThread = (kScheduleMaxExperts + kThreads - 1) / kThreads;
  static_assert(kScheduleMaxExperts <= kThreads * kExpertsPerThread, "scan covers every expert");
};

template <int kPerThread>
__global__ void __launch_bounds__(kScheduleThreads, 2)
schedule_kernel(const __grid_constant__ ScheduleParams p) {
  using Cfg = ScheduleConfig<kPerThread>;
  using BlockScan = cub::BlockScan<int, Cfg::kThreads>;
  __shared__ int s_count[kScheduleMaxExperts];  // this CTA's routes per expert
  __shared__ int s_base[kScheduleMaxExperts];   // their first slot inside the expert
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
    if (route_dropped(p.topk_ids, r, p.k, p.E)) {
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
  int tiles[Cfg::kExpertsPerThread], routes[Cfg::kExpertsPerThread];
#pragma unroll
  for (int i = 0; i < Cfg::kExpertsPerThread; ++i) {
    const int e = threadIdx.x * Cfg::kExpertsPerThread + i;
    // Several CTAs: an L2 read, the counts were written by other CTAs' atomics. Routes past T
    // slots were dropped above (a repeat can no longer get there); the GEMM clamps the same way.
    int c = 0;
    if (e < p.E) c = min(single ? s_count[e] : __ldcg(p.counts + e), p.T);
    // Static tile numbering (the GEMM's decode walk): token tile 0 of every expert is implicit.
    tiles[i] = max((c + p.block_t - 1) / p.block_t - (p.static_tiles ? 1 : 0), 0);
    routes[i] = c;
  }
  int total_tiles = 0, total_routes = 0;
  BlockScan(s_scan).ExclusiveSum(tiles, tiles, total_tiles);
  __syncthreads();  // the scan storage is reused
  BlockScan(s_scan).ExclusiveSum(routes, routes, total_routes);
#pragma unroll
  for (int i = 0; i < Cfg::kExpertsPerThread; ++i) {
    const int e = threadIdx.x * Cfg::kExpertsPerThread + i;
    if (e < p.E) {
      p.tile_offsets[e] = tiles[i];
      p.route_offsets[e] = routes[i];
    }
  }
  if (threadIdx.x == 0) {
    p.tile_offsets[p.E] = total_tiles;
    p.route_offsets[p.E] = total_routes;
  }
}

}  // namespace fusedmoe::detail
