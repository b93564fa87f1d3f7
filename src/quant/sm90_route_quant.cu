// Launcher of stage 1 (route + quantize); the only TU that includes its kernel.
#include "quant/sm90_route_quant.cuh"

namespace fusedmoe::detail {

void launch_route_quant(const RouteQuantParams& p, cudaStream_t stream) {
  if (p.T <= 0) return;
  launch_pdl(route_quant_kernel, dim3(p.T), dim3(RouteQuantConfig::kThreads), 0, stream, p);
  FMOE_CHECK_LAUNCH("route_quant_kernel", stream);
}

}  // namespace fusedmoe::detail
