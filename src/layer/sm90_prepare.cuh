// The layer's weight preparation (contract: prepare.hpp): rows copied from a checkpoint layout
// into the kernels' layout with zero padding. One-time work, bandwidth-bound: one CTA per row
// block, 16-byte loads and stores.
#pragma once

#include <cuda_runtime.h>

#include "layer/prepare.hpp"

namespace fusedmoe::detail {

constexpr int kGatherThreads = 256;
constexpr int kGatherRowsPerCta = 8;

__global__ void __launch_bounds__(kGatherThreads) gather_rows_kernel(const __grid_constant__ GatherRowsParams p) {
  const int64_t chunks = p.dst_row_bytes / 16;
  for (int i = 0; i < kGatherRowsPerCta; ++i) {
    const int64_t r = int64_t(blockIdx.x) * kGatherRowsPerCta + i;
    if (r >= p.rows) return;
    const int64_t valid = p.src_bytes[r] / 16;
    const uint4* src = reinterpret_cast<const uint4*>(p.src + p.src_offset[r]);
    uint4* dst = reinterpret_cast<uint4*>(p.dst + r * p.dst_row_bytes);
    for (int64_t c = threadIdx.x; c < chunks; c += kGatherThreads)
      dst[c] = c < valid ? src[c] : make_uint4(0, 0, 0, 0);
  }
}

}  // namespace fusedmoe::detail
