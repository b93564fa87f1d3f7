// The kernels behind the bandwidth ceiling. The ceiling must be the best the card does, so
// several ways of streaming 1 GiB are measured and the fastest wins (bench/harness.cpp):
//   copy_cs4   16-byte loads/stores with streaming hints, 4 in flight, 8 CTAs of 256 per SM
//   copy_nc8   16-byte non-coherent loads, plain stores, 8 in flight, as many CTAs as fit
//   read_nc8   a read-only stream (16-byte non-coherent loads, 8 in flight, XOR-reduced): the
//              bandwidth of a kernel that mostly reads (weights), counting bytes read
// plus cudaMemcpyAsync device to device inside and outside a CUDA graph (harness.cpp).
#include "bench/harness.hpp"
#include "common/cuda_check.hpp"

namespace fusedmoe::bench {
namespace {

__global__ void __launch_bounds__(256) copy_cs4_kernel(const int4* __restrict__ src,
                                                       int4* __restrict__ dst, size_t n) {
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

__global__ void __launch_bounds__(256) copy_nc8_kernel(const int4* __restrict__ src,
                                                       int4* __restrict__ dst, size_t n) {
  constexpr int kUnroll = 8;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldg(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[i + u * stride] = v[u];
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

__global__ void __launch_bounds__(256) read_nc8_kernel(const int4* __restrict__ src, size_t n,
                                                       int* __restrict__ sink) {
  constexpr int kUnroll = 8;
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  int acc = 0;
  for (; i + (kUnroll - 1) * stride < n; i += kUnroll * stride) {
    int4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = __ldg(src + i + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  for (; i < n; i += stride) acc ^= src[i].x;
  if (acc == 0x7fffffff) *sink = acc;  // keeps the loads; practically never stores
}

int sm_count() {
  int dev = 0, sms = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  FMOE_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

}  // namespace

void launch_stream_kernel(StreamKernel k, const void* src, void* dst, size_t bytes,
                          cudaStream_t stream) {
  const int sms = sm_count();
  const size_t n = bytes / 16;
  switch (k) {
    case StreamKernel::copy_cs4:
      copy_cs4_kernel<<<sms * 8, 256, 0, stream>>>(static_cast<const int4*>(src),
                                                   static_cast<int4*>(dst), n);
      break;
    case StreamKernel::copy_nc8:
      copy_nc8_kernel<<<sms * 8, 256, 0, stream>>>(static_cast<const int4*>(src),
                                                   static_cast<int4*>(dst), n);
      break;
    case StreamKernel::read_nc8:
      read_nc8_kernel<<<sms * 8, 256, 0, stream>>>(static_cast<const int4*>(src), n,
                                                   static_cast<int*>(dst));
      break;
  }
  FMOE_CHECK_LAUNCH("stream kernel", stream);
}

}  // namespace fusedmoe::bench
