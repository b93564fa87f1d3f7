// The layer's weight preparation (contract: prepare.hpp): rows copied from a checkpoint layout
// into the kernels' layout with zero padding. One-time work, bandwidth-bound: one CTA per row
// block, 16-byte loads and stores. 4-bit weights: one CTA per e2m1 block, each thread building
// the words the decode will read (e2m1_layout.hpp's own map), from codes gathered through L1.
#pragma once

#include <cuda_runtime.h>

#include "gemm/e2m1_layout.hpp"
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

// ---- 4-bit weights -------------------------------------------------------------------------
constexpr int kE2m1PrepareThreads = 256;  // one per (thread t of the consumer layout)

// The E4M3 scale (NVFP4) or slot (MXFP4) of source column `col` of a prepared row, 0 past it.
__device__ __forceinline__ uint8_t e2m1_scale_at(const E2m1PrepareParams& p, const E2m1RowRef& r,
                                                 int64_t col) {
  if (r.matrix < 0 || col >= r.ncols) return 0;
  const E2m1Source& m = p.src[r.matrix];
  const int64_t c = r.col0 + col;
  if (!p.mx) return m.scales[r.row * (m.K / 16) + c / 16];
  return e2m1::mx_scale_slot(m.scales[r.row * (m.K / 32) + c / 32], m.row_max[r.row]);
}

__global__ void __launch_bounds__(kE2m1PrepareThreads) e2m1_prepare_kernel(const __grid_constant__ E2m1PrepareParams p) {
  namespace L = e2m1;
  const int64_t blk = blockIdx.x, tile = blk / p.KB;
  const int kb = int(blk % p.KB), t = threadIdx.x;
  const E2m1RowRef* rows = p.rows + tile * L::kTileRows;
  uint8_t* out = p.dst + blk * L::kBlockBytes;
#pragma unroll 1
  for (int step = 0; step < L::kSteps; ++step) {
    uint32_t word = 0;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const L::Src v = L::value_source(t, step, n);
      const E2m1RowRef r = rows[v.row];
      const int64_t col = int64_t(kb) * L::kBlockK + v.col;
      if (e2m1_scale_at(p, r, col) == 0) continue;  // padding, past the row, or a zero scale
      const uint8_t b = p.src[r.matrix].codes[r.row * (p.src[r.matrix].K / 2) + (r.col0 + col) / 2];
      word |= L::place_code(n, (r.col0 + col) % 2 ? b >> 4 : b & 0xF);
    }
    *reinterpret_cast<uint32_t*>(out + L::value_word_offset(t, step)) = word;
  }
  for (int i = t; i < L::kScaleBytes; i += kE2m1PrepareThreads) {
    const L::Src s = L::scale_source(i / 8, i % 8);
    out[L::kValueBytes + i] = L::scale_code(e2m1_scale_at(p, rows[s.row], int64_t(kb) * L::kBlockK + 16 * s.col));
  }
}

constexpr int kScaleScanThreads = 256;

__global__ void __launch_bounds__(kScaleScanThreads) e2m1_scale_scan_kernel(const __grid_constant__ E2m1ScaleScanParams p) {
  const int64_t stride = int64_t(gridDim.x) * kScaleScanThreads;
  for (int64_t i = int64_t(blockIdx.x) * kScaleScanThreads + threadIdx.x; i < p.n; i += stride) {
    const uint8_t c = p.scales[i];
    const bool bad = p.mx ? c == 0xFF : ((c & 0x80) != 0 || c == 0x7F);
    if (bad) atomicMin(p.first_bad, static_cast<unsigned long long>(i));
  }
  if (!p.mx) return;
  const int64_t rows = p.n / p.per_row;
  for (int64_t r = int64_t(blockIdx.x) * kScaleScanThreads + threadIdx.x; r < rows; r += stride) {
    int m = 0;
    for (int64_t j = 0; j < p.per_row; ++j) m = max(m, int(p.scales[r * p.per_row + j]));
    p.row_max[r] = m;
  }
}

}  // namespace fusedmoe::detail
