// Device half of test_e2m1_gpu.cpp (tests/gemm/test_e2m1_gpu_kernels.cu): one CTA of two
// consumer warpgroups multiplies one prepared NVFP4 block (src/gemm/e2m1_layout.hpp: 128 weight
// rows x 64 K) by 16 bf16 activation rows, through the engine's decode and register-A wgmma.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fusedmoe::test {

/// out[r * 16 + t] = sum_k w[r, k] * x[t, k] * 2^-26 in fp32 (w = e2m1 * e4m3 as prepared),
/// block: e2m1::kBlockBytes device bytes; x: [16, 64] bf16 bits; out: [128, 16] f32.
void launch_e2m1_block_mma(const uint8_t* block, const uint16_t* x, float* out, cudaStream_t stream);

}  // namespace fusedmoe::test
