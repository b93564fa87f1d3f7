// Contract of stage 2, the schedule (src/schedule/sm90_schedule.cuh): group the T*k routes by
// expert and build the table the grouped GEMMs walk.
//
//   counts[e]          routes of expert e (a route whose id is outside [0, E) is dropped:
//                      route_slot = -1, status[kStatusDropped] counts it)
//   sorted_route[e*T + i]  the route id (t*k + j) of expert e's i-th slot, i < counts[e]
//   route_slot[r]      the slot of route r
//   route_offsets[e]   exclusive prefix of counts: expert e's routes are rows
//                      [route_offsets[e], route_offsets[e] + counts[e]) of a compact per-route
//                      buffer (the layer's intermediate), in slot order
//   tile_offsets[e]    exclusive prefix of the token tiles ceil(counts[e] / block_t) (minus one
//                      per expert with static_tiles: the GEMM numbers every expert's first token
//                      tile itself). A GEMM with NB weight tiles per expert has NB times as many
//                      tiles; GEMMs with the same block_t share the table.
// The order of slots inside an expert is unspecified; every consumer reads the same table.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/status.hpp"

namespace fusedmoe::detail {

struct ScheduleParams {
  const int32_t* topk_ids;  // [R = T * k]
  int T, k, E;
  int block_t;              // GEMM token-tile width
  int static_tiles;         // the GEMMs number every expert's first token tile statically
  int32_t* counts;          // [E], zero on entry
  int32_t* tile_offsets;    // [E + 1]
  int32_t* route_offsets;   // [E + 1]
  int32_t* sorted_route;    // [E * T]
  int32_t* route_slot;      // [R]
  int32_t* status;          // [kStatusWords], zero on entry
};
/// Experts (routed + shared chunks) the schedule kernel counts in shared memory.
constexpr int kScheduleMaxExperts = 520;
constexpr int kScheduleThreads = 512;
/// Routes each thread ranks: the compiled values (one kernel each), smallest first.
constexpr int kScheduleRoutesPerThread[] = {1, 2, 4, 8};
/// The rule: the fewest routes a thread whose grid fits two CTAs on each of `sms` SMs (the
/// most, 8, beyond that); FMOE_SCHEDULE_ROUTES forces one of the compiled values.
int schedule_routes_per_thread(int64_t routes, int sms);
void launch_schedule(const ScheduleParams& p, int sms, cudaStream_t stream);

}  // namespace fusedmoe::detail
