#include "route/routing_host.hpp"

#include <cmath>
#include <vector>

#include "common/cuda_check.hpp"
#include "route/route.hpp"

namespace fusedmoe::detail {

void validate_routing_config(const char* op, const RoutingConfig& r, int E, int k) {
  switch (r.fn) {
    case RoutingFn::softmax_topk:
    case RoutingFn::topk_softmax:
      break;
    case RoutingFn::sigmoid_grouped_topk:
      FMOE_REQUIRE(r.num_groups >= 1 && r.num_groups <= kRouteMaxGroups && E % r.num_groups == 0,
                   "%s: routing.num_groups=%d must divide E=%d and be at most %d", op,
                   r.num_groups, E, kRouteMaxGroups);
      FMOE_REQUIRE(r.topk_groups >= 1 && r.topk_groups <= r.num_groups,
                   "%s: routing.topk_groups=%d must be in [1, num_groups=%d]", op, r.topk_groups,
                   r.num_groups);
      FMOE_REQUIRE(k <= r.topk_groups * (E / r.num_groups),
                   "%s: top_k=%d exceeds the %d experts of the %d kept groups", op, k,
                   r.topk_groups * (E / r.num_groups), r.topk_groups);
      break;
    case RoutingFn::sigmoid_top1_on_input:
      FMOE_REQUIRE(k == 1, "%s: sigmoid_top1_on_input routing puts the weight on the input and "
                   "needs top_k=1, got %d", op, k);
      break;
  }
  FMOE_REQUIRE(std::isfinite(r.routed_scaling_factor),
               "%s: routing.routed_scaling_factor must be finite, got %g", op,
               double(r.routed_scaling_factor));
  FMOE_REQUIRE(std::isfinite(r.softcap) && r.softcap >= 0.0f,
               "%s: routing.softcap must be >= 0 (0 = off), got %g", op, double(r.softcap));
}

bool routing_needs_bias(const RoutingConfig& r) {
  return (r.fn == RoutingFn::sigmoid_grouped_topk && r.correction_bias) ||
         (r.fn == RoutingFn::topk_softmax && r.router_bias);
}

void check_given_ids(const char* op, const TensorRef& ids, int E, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FMOE_CUDA(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  std::vector<int32_t> host(size_t(ids.numel()));
  if (host.empty()) return;
  FMOE_CUDA(cudaMemcpyAsync(host.data(), ids.data, host.size() * 4, cudaMemcpyDeviceToHost, stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  const int64_t k = ids.shape[1];
  for (size_t i = 0; i < host.size(); ++i) {
    const long long t = (long long)(int64_t(i) / k), j = (long long)(int64_t(i) % k);
    FMOE_REQUIRE(host[i] >= 0 && host[i] < E,
                 "%s: topk_ids[%lld, %lld] = %d is not an expert id in [0, %d)", op, t, j,
                 host[i], E);
    for (int64_t jj = 0; jj < j; ++jj)
      FMOE_REQUIRE(host[i - size_t(j - jj)] != host[i],
                   "%s: topk_ids[%lld, %lld] repeats expert %d of choice %lld: a token's k "
                   "experts must be distinct", op, t, j, host[i], (long long)jj);
  }
}

void set_routing_params(RouteQuantParams& p, const RoutingConfig& r, const float* bias, int E,
                        int k) {
  p.bias = bias;
  p.E = E;
  p.k = k;
  p.fn = int(r.fn);
  p.renormalize = r.renormalize;
  p.num_groups = r.num_groups;
  p.topk_groups = r.topk_groups;
  p.softcap = r.softcap;
  p.routed_scaling_factor = r.routed_scaling_factor;
  p.weight_on_input = r.fn == RoutingFn::sigmoid_top1_on_input;
}

}  // namespace fusedmoe::detail
