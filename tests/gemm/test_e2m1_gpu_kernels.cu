// See e2m1_gpu_kernels.hpp. The decode here is the one the engine's NVFP4 mainloop will use.
#include <cuda/ptx>

#include "common/cuda_check.hpp"
#include "common/ptx/sm90_ptx.cuh"
#include "common/ptx/wgmma_bf16_rs.cuh"
#include "gemm/e2m1_layout.hpp"
#include "tests/gemm/e2m1_gpu_kernels.hpp"

namespace fusedmoe::test {
namespace {

using namespace fusedmoe::detail;

__global__ void __launch_bounds__(256) e2m1_block_mma_kernel(const uint8_t* block, const uint16_t* x,
                                                             float* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) uint8_t s_x[16 * 128];  // (16 tokens, 64 K) bf16, 128B swizzle
  __shared__ __align__(16) uint8_t s_block[e2m1::kBlockBytes];
  const int t = threadIdx.x;
  for (int i = t; i < e2m1::kBlockBytes / 16; i += 256)
    reinterpret_cast<uint4*>(s_block)[i] = reinterpret_cast<const uint4*>(block)[i];
  for (int i = t; i < 16 * 8; i += 256)
    *reinterpret_cast<uint4*>(s_x + ptx::swizzle128_offset(i / 8, i % 8)) =
        reinterpret_cast<const uint4*>(x)[i];
  __syncthreads();
  cuda::ptx::fence_proxy_async(cuda::ptx::space_shared);  // generic writes, wgmma (async) reads

  uint32_t a[e2m1::kSteps][4];
  e2m1::decode_fragments(s_block, t, a);
  float acc[8] = {};
  const uint64_t desc_x = ptx::smem_desc_k128b(s_x);
  ptx::wgmma_fence();
#pragma unroll
  for (int step = 0; step < e2m1::kSteps; ++step)
    ptx::WgmmaBf16RegA<16>::mma(a[step], desc_x + 2 * step, acc, step > 0);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 8; ++i) ptx::fence_operand(acc[i]);
  // acc[4b + 2r + h]: row 64 wgc + 16 warp + lane/4 + 8r, token 8b + 2(lane%4) + h.
  const int wgc = t / 128, warp = (t / 32) % 4, lane = t % 32;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int b = i / 4, r = (i / 2) % 2, h = i % 2;
    const int row = 64 * wgc + 16 * warp + lane / 4 + 8 * r, token = 8 * b + 2 * (lane % 4) + h;
    out[row * 16 + token] = acc[i];
  }
#else
  __trap();
#endif
}

}  // namespace

void launch_e2m1_block_mma(const uint8_t* block, const uint16_t* x, float* out, cudaStream_t stream) {
  e2m1_block_mma_kernel<<<1, 256, 0, stream>>>(block, x, out);
  FMOE_CUDA(cudaGetLastError());
}

}  // namespace fusedmoe::test
