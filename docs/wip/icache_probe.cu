// Probe (session 55, not run): what does a cold pass through straight-line code cost on an H200?
// Session 55's clock64 timings of route_quant followed each stage's code size, not its work
// (docs/performance.md): ~40-80 cycles per 128-byte line of code, as if each line were fetched cold.
// This kernel runs the same straight-line block of kN instructions twice in one launch (pass 0
// fetches the code, pass 1 finds it cached) and reports both in cycles, in four settings:
//   warm  - the same kernel launched again at once on the same SM (CTA 0 of a 1-CTA grid);
//   other - after a launch that kept every SM busy with a different kernel (instruction caches
//           evicted? only if that kernel's code is large enough);
//   l2    - after 256 MiB were written (the L2 holds none of the code);
//   many  - 132 CTAs at once, one an SM, all cold: do they share the L2 fetches?
// Build and run on the device: nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/probe
//   docs/wip/icache_probe.cu && /tmp/probe
// Expect pass 0 - pass 1 ~ kN / 8 lines x (40-80 cycles) if session 55's reading holds; ~0 if not.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

constexpr int kN = 2048;  // straight-line FFMAs per pass: 8 independent chains, 256 lines of code

__global__ void straight_line(float a, float b, long long* cycles, float* sink) {
  float x[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) x[j] = a * float(threadIdx.x + j);
  for (int pass = 0; pass < 2; ++pass) {  // not unrolled: both passes run the same instructions
    __syncwarp();
    const long long t0 = clock64();
#pragma unroll
    for (int i = 0; i < kN; ++i) x[i % 8] = fmaf(x[i % 8], a, b);
    __syncwarp();
    const long long t1 = clock64();
    if (threadIdx.x == 0) cycles[blockIdx.x * 2 + pass] = t1 - t0;
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += x[j];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
}

// Other code: a kernel that keeps every SM busy (its own instructions fill the caches a little).
__global__ void busy(float* p, int n) {
  float v = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += p[i];
  if (v == 12345.0f) p[0] = v;
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  long long* d_cycles;
  float* d_sink;
  cudaMalloc(&d_cycles, sizeof(long long) * 2 * sms);
  cudaMalloc(&d_sink, sizeof(float) * 32 * sms);
  const size_t flush_bytes = size_t(256) << 20;
  char* d_flush;
  cudaMalloc(&d_flush, flush_bytes);
  std::vector<long long> h(2 * sms);
  auto run = [&](const char* name, int ctas, auto before) {
    std::vector<long long> p0, p1;
    for (int rep = 0; rep < 20; ++rep) {
      before();
      straight_line<<<ctas, 32>>>(1.0001f, 0.5f, d_cycles, d_sink);
      cudaMemcpy(h.data(), d_cycles, sizeof(long long) * 2 * ctas, cudaMemcpyDeviceToHost);
      for (int c = 0; c < ctas; ++c) {
        p0.push_back(h[2 * c]);
        p1.push_back(h[2 * c + 1]);
      }
    }
    std::sort(p0.begin(), p0.end());
    std::sort(p1.begin(), p1.end());
    std::printf("%-6s ctas %3d: pass 0 (cold) median %lld cycles [p10 %lld p90 %lld], pass 1 median %lld "
                "-> %.1f cycles per 128-byte line of code\n",
                name, ctas, p0[p0.size() / 2], p0[p0.size() / 10], p0[p0.size() * 9 / 10],
                p1[p1.size() / 2], double(p0[p0.size() / 2] - p1[p1.size() / 2]) / (kN / 8.0));
  };
  run("warm", 1, [] {});
  run("other", 1, [&] { busy<<<4 * sms, 256>>>(reinterpret_cast<float*>(d_flush), 1 << 20); });
  run("l2", 1, [&] { cudaMemsetAsync(d_flush, 1, flush_bytes); });
  run("many", sms, [&] { cudaMemsetAsync(d_flush, 2, flush_bytes); });
  const cudaError_t err = cudaDeviceSynchronize();
  std::printf("status: %s\n", cudaGetErrorString(err));
  return err == cudaSuccess ? 0 : 1;
}
