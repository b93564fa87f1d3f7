// Routing on the GPU, host-visible part: the limits of the device routing and its parameters.
// The device code is src/route/sm90_route.cuh, used inside the stage kernels that route.
#pragma once

namespace fusedmoe::detail {

constexpr int kRouteMaxPerLane = 16;  // experts held by one lane of the routing warp
constexpr int kRouteMaxExperts = 32 * kRouteMaxPerLane;
constexpr int kRouteMaxGroups = 32;   // group selection uses one bit per group

struct RouteDeviceParams {
  int E, k;
  int fn;                  // RoutingFn
  int renormalize;
  float softcap;
  int num_groups, topk_groups;
  const float* bias;       // [E] correction bias (sigmoid_grouped_topk) or router bias (topk_softmax), or nullptr
  float routed_scaling_factor;
};

}  // namespace fusedmoe::detail
