// Probe: does a [KB, ld] float tensor map with a [1, 128] box (the sorted-scales descriptor) run
// under TMA, for in-range and out-of-range coordinates? One case per process.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda/ptx>
#include <cstdio>
#include <cstdlib>
#include <vector>
namespace cptx = cuda::ptx;
__global__ void k(const __grid_constant__ CUtensorMap m, int c0, int c1, float* out) {
  __shared__ alignas(1024) float buf[128];
  __shared__ alignas(8) uint64_t bar;
  if (threadIdx.x == 0) {
    cptx::mbarrier_init(&bar, 1);
    cptx::fence_mbarrier_init(cptx::sem_release, cptx::scope_cluster);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t tx = 512;
    cptx::mbarrier_arrive_expect_tx(cptx::sem_release, cptx::scope_cta, cptx::space_shared, &bar, tx);
    const int32_t coords[2] = {c0, c1};
    cptx::cp_async_bulk_tensor(cptx::space_cluster, cptx::space_global, buf, &m, coords, &bar);
    while (!cptx::mbarrier_try_wait_parity(&bar, 0)) {}
  }
  __syncthreads();
  out[threadIdx.x] = buf[threadIdx.x];
}
int main(int argc, char** argv) {
  const int R = atoi(argv[1]), KB = atoi(argv[2]), c0 = atoi(argv[3]), c1 = atoi(argv[4]);
  const int ld = (R + 3) / 4 * 4;
  std::vector<float> h(size_t(ld) * KB);
  for (size_t i = 0; i < h.size(); ++i) h[i] = float(i);
  float *d, *o;
  cudaMalloc(&d, h.size() * 4); cudaMalloc(&o, 512);
  cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
  void* fn = nullptr; cudaDriverEntryPointQueryResult st;
  cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &st);
  CUtensorMap m{};
  const cuuint64_t dims[2] = {cuuint64_t(R), cuuint64_t(KB)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 4};
  const cuuint32_t box[2] = {128, 1}, es[2] = {1, 1};
  CUresult r = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, d, dims, strides, box, es,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  k<<<1, 128>>>(m, c0, c1, o);
  cudaError_t e = cudaDeviceSynchronize();
  float got[128]; cudaMemcpy(got, o, 512, cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int i = 0; i < 128; ++i) {
    const int c = c0 + i;
    const float want = (c >= 0 && c < R && c1 >= 0 && c1 < KB) ? float(size_t(c1) * ld + c) : 0.f;
    bad += got[i] != want;
  }
  printf("R=%d KB=%d coords {%d,%d}: encode %d, kernel %s, %d wrong\n", R, KB, c0, c1, int(r), cudaGetErrorString(e), bad);
}
