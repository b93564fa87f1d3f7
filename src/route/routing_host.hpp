// Host side of the routing stage, shared by every op that routes (the FP8 projection, the layer):
// checks of the routing config and of caller-given ids, and the routing part of RouteQuantParams.
#pragma once

#include <cuda_runtime_api.h>

#include "fusedmoe/config.hpp"
#include "fusedmoe/types.hpp"
#include "route/route_quant.hpp"

namespace fusedmoe::detail {

/// Throws Error naming `op` and the field when the routing cannot run with E experts and top-k.
void validate_routing_config(const char* op, const RoutingConfig& r, int E, int k);
/// Whether the routing function reads a bias [E] (correction bias or router bias).
bool routing_needs_bias(const RoutingConfig& r);
/// Caller-given ids [T, k]: copied to the host and checked (an id outside [0, E), or an expert
/// repeated within a token, throws Error naming it), unless the stream is being captured. This
/// synchronizes the stream.
void check_given_ids(const char* op, const TensorRef& ids, int E, cudaStream_t stream);
/// Fills the routing fields of `p` (function, groups, softcap, scaling, bias).
void set_routing_params(RouteQuantParams& p, const RoutingConfig& r, const float* bias, int E,
                        int k);

}  // namespace fusedmoe::detail
