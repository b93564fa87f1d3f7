// Launcher of stage 1 (route + quantize); the only TU that includes its kernel.
#include "quant/sm90_route_quant.cuh"

namespace fusedmoe::detail {

void launch_route_quant(const RouteQuantParams& p, cudaStream_t stream) {
  if (p.T <= 0) return;
  // Float selection is exact when the values selected on are the fp32 logits themselves; the
  // narrower lane array halves the registers and the selection chain for E <= 256.
  const RoutingFn fn = RoutingFn(p.fn);
  const bool exact_float = (fn == RoutingFn::softmax_topk && p.softcap == 0.0f) ||
                           fn == RoutingFn::sigmoid_top1_on_input ||
                           (fn == RoutingFn::topk_softmax && p.bias == nullptr);
  const bool narrow = p.E <= 32 * 8;
  auto kernel = exact_float ? (narrow ? route_quant_kernel<float, 8> : route_quant_kernel<float, 16>)
                            : (narrow ? route_quant_kernel<double, 8> : route_quant_kernel<double, 16>);
  const int grid = (p.T + RouteQuantConfig::kTokensPerCta - 1) / RouteQuantConfig::kTokensPerCta;
  launch_pdl(kernel, dim3(grid), dim3(RouteQuantConfig::kThreads), 0, stream, p);
  FMOE_CHECK_LAUNCH("route_quant_kernel", stream);
}

}  // namespace fusedmoe::detail
