// Launcher of stage 1 (route + quantize); the only TU that includes its kernel.
#include "route/sm90_route_quant.cuh"

#include <type_traits>

#include "common/cuda_check.hpp"
#include "common/env.hpp"
#include "common/launch.hpp"
#include "fusedmoe/config.hpp"

namespace fusedmoe::detail {

namespace {

// Whether the four-warp kernel (T < 1024) routes each token with all its warps
// (route_token_block) rather than one (route_token_warp): sigmoid_grouped_topk, k within the
// block lists, the routing not given. By FMOE_ROUTE_BLOCK: 1 (default) only grouped routing whose
// groups are whole 32-expert blocks; 2 also one group; 0 never. Measured on the H200 (session 55,
// ABBA, in the layer, both rounds): deepseek-v3 nvfp4 0.984-0.991 at T = 1-2, 0.968-1.005 at
// T = 4-512, fp8 0.968-0.972 at T = 1, 0.992-1.002 above; kimi-k2 (one group of 384) 1.010-1.018
// at T = 1-2, 1.019 / 0.996 at T = 4, hence not by default. Less than
// the serial chain's length suggests: per-stage clock64 timings follow each stage's code size
// more than its work, as if the code were fetched cold (docs/status.md, session 55).
bool block_route(const RouteQuantParams& p) {
  const int mode = knobs().route_block;
  if (mode == 0 || p.routing_given || p.weight_on_input) return false;
  if (RoutingFn(p.fn) != RoutingFn::sigmoid_grouped_topk || p.k > kBlockRouteMaxK) return false;
  if (p.E > 32 * 16) return false;
  if (p.num_groups <= 1) return mode == 2;
  const int per_group = p.E / p.num_groups;
  return per_group % 32 == 0 && per_group * p.num_groups == p.E;
}

}  // namespace

void launch_route_quant(const RouteQuantParams& p, cudaStream_t stream) {
  if (p.T <= 0) return;
  // Float selection is exact when the values selected on are the fp32 logits themselves; the
  // narrower lane arrays (4 candidates a lane for E <= 128, 8 for E <= 256) save registers and
  // selection instructions.
  const RoutingFn fn = RoutingFn(p.fn);
  const bool exact_float = (fn == RoutingFn::softmax_topk && p.softcap == 0.0f) ||
                           fn == RoutingFn::sigmoid_top1_on_input ||
                           (fn == RoutingFn::topk_softmax && p.bias == nullptr);
  const int per = p.E <= 32 * 4 ? 4 : p.E <= 32 * 8 ? 8 : 16;  // candidates a lane
  // Large T: 2 warps per token (more tokens in flight); decode: 4 (lower latency per token).
  auto pick = [&](auto wpt) {
    constexpr int W = decltype(wpt)::value;
    auto kernel = exact_float ? (per == 4   ? route_quant_kernel<float, 4, W, false>
                                 : per == 8 ? route_quant_kernel<float, 8, W, false>
                                            : route_quant_kernel<float, 16, W, false>)
                              : (per == 4   ? route_quant_kernel<double, 4, W, false>
                                 : per == 8 ? route_quant_kernel<double, 8, W, false>
                                            : route_quant_kernel<double, 16, W, false>);
    using Cfg = RouteQuantConfig<W>;
    const int grid = (p.T + Cfg::kTokensPerCta - 1) / Cfg::kTokensPerCta;
    launch_pdl(kernel, dim3(grid), dim3(Cfg::kThreads), 0, stream, p);
  };
  if (p.T >= kRouteQuantWideFromTokens) {
    pick(std::integral_constant<int, 2>{});
  } else if (block_route(p)) {
    using Cfg = RouteQuantConfig<4>;
    auto kernel = per == 4   ? route_quant_kernel<double, 4, 4, true>
                  : per == 8 ? route_quant_kernel<double, 8, 4, true>
                             : route_quant_kernel<double, 16, 4, true>;
    const int grid = (p.T + Cfg::kTokensPerCta - 1) / Cfg::kTokensPerCta;
    launch_pdl(kernel, dim3(grid), dim3(Cfg::kThreads), 0, stream, p);
  } else {
    pick(std::integral_constant<int, 4>{});
  }
  FMOE_CHECK_LAUNCH("route_quant_kernel", stream);
}

}  // namespace fusedmoe::detail
