// Launcher of stage 1 (route + quantize); the only TU that includes its kernel.
#include "route/sm90_route_quant.cuh"

#include <type_traits>

#include "common/cuda_check.hpp"
#include "common/launch.hpp"
#include "fusedmoe/config.hpp"

namespace fusedmoe::detail {

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
    auto kernel = exact_float ? (per == 4   ? route_quant_kernel<float, 4, W>
                                 : per == 8 ? route_quant_kernel<float, 8, W>
                                            : route_quant_kernel<float, 16, W>)
                              : (per == 4   ? route_quant_kernel<double, 4, W>
                                 : per == 8 ? route_quant_kernel<double, 8, W>
                                            : route_quant_kernel<double, 16, W>);
    using Cfg = RouteQuantConfig<W>;
    const int grid = (p.T + Cfg::kTokensPerCta - 1) / Cfg::kTokensPerCta;
    launch_pdl(kernel, dim3(grid), dim3(Cfg::kThreads), 0, stream, p);
  };
  if (p.T >= kRouteQuantWideFromTokens) pick(std::integral_constant<int, 2>{});
  else pick(std::integral_constant<int, 4>{});
  FMOE_CHECK_LAUNCH("route_quant_kernel", stream);
}

}  // namespace fusedmoe::detail
