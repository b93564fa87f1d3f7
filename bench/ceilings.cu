// The copy kernel behind the bandwidth ceiling: 16-byte loads and stores, four in flight per
// thread, grid-stride over a buffer much larger than L2.
#include "bench/harness.hpp"
#include "common/cuda_check.hpp"

namespace fusedmoe::bench {
namespace {

__global__ void __launch_bounds__(256) copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst,
                                                   size_t n) {
  constexpr int kUnroll = 4;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldcs(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) __stcs(dst + i + u * stride, v[u]);
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

}  // namespace

void launch_copy_kernel(const void* src, void* dst, size_t bytes, cudaStream_t stream) {
  int dev = 0, sms = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  FMOE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  copy_kernel<<<sms * 8, 256, 0, stream>>>(static_cast<const int4*>(src), static_cast<int4*>(dst),
                                           bytes / 16);
  FMOE_CHECK_LAUNCH("copy_kernel", stream);
}

}  // namespace fusedmoe::bench
