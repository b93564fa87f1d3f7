// The NVFP4 grouped GEMM's per-call preparation (contract: grouped_prep.hpp): one memory-bound
// pass over A plus the schedule of a few hundred groups at most. Every CTA sanitizes the offsets
// into shared memory (a block-wide prefix maximum: a serial walk over 513 offsets cost more than
// the whole decode of the small contest shapes); CTA 0 writes the table the GEMM reads.
#pragma once

#include <cub/block/block_scan.cuh>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <climits>

#include "common/cuda_check.hpp"
#include "common/launch.hpp"
#include "grouped/grouped_prep.hpp"

namespace fusedmoe::detail {

constexpr int kPrepThreads = 256;

// E2M1 magnitudes (code & 7) times 2: all integers, so the product with the scale is formed
// exactly in fp32 and halved at the end (exact: at most 6 significant bits).
__device__ __forceinline__ float e2m1_twice(uint32_t code) {
  constexpr uint32_t kTwice = 0xC8643210u;  // nibble j: 2 * |e2m1(j)| = 0, 1, 2, 3, 4, 6, 8, 12
  const float v = float((kTwice >> (4 * (code & 7u))) & 0xFu);
  return code & 8u ? -v : v;
}

__global__ void __launch_bounds__(kPrepThreads) grouped_prep_kernel(const GroupedPrepParams p) {
  constexpr int kPer = (kGroupedMaxGroups + 1 + kPrepThreads - 1) / kPrepThreads;
  using Scan = cub::BlockScan<int, kPrepThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int32_t off[kGroupedMaxGroups + 1];
  // The previous kernel on the stream may still read this call's workspace (a previous call's
  // GEMM reads a_bf16) or write A: nothing is touched before it has finished.
  cudaGridDependencySynchronize();

  // ---- sanitized offsets: s[g] = min(M, max(0, prefix max of offsets[0..g])) ----
  int v[kPer];
  bool bad = false;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int g = threadIdx.x * kPer + i;
    v[i] = g <= p.G ? p.offsets[g] : INT_MIN;
  }
  int raw[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) raw[i] = v[i];
  Scan(scan).InclusiveScan(v, v, cuda::maximum<>{});
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int g = threadIdx.x * kPer + i;
    if (g > p.G) continue;
    const int s = min(p.M, max(0, v[i]));
    off[g] = s;
    bad |= s != raw[i] || (g == 0 && s != 0) || (g == p.G && s != p.M);
  }
  bad = __syncthreads_or(bad);  // also publishes off[]
  const int first = off[0], last = off[p.G];

  // ---- the schedule (CTA 0) ----
  if (blockIdx.x == 0) {
    int tiles[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int g = threadIdx.x * kPer + i;
      const int count = g < p.G ? off[g + 1] - off[g] : 0;
      tiles[i] = (count + p.block_t - 1) / p.block_t;
      if (g < p.G) p.counts[g] = count;
      if (g <= p.G) p.route_offsets[g] = off[g];
    }
    __syncthreads();  // the scan storage is reused
    int total = 0;
    Scan(scan).ExclusiveSum(tiles, tiles, total);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int g = threadIdx.x * kPer + i;
      if (g < p.G) p.tile_offsets[g] = tiles[i];
    }
    if (threadIdx.x == 0) {
      p.tile_offsets[p.G] = total;
      p.status[0] = bad ? 1 : 0;
    }
  }

  const int64_t tid = int64_t(blockIdx.x) * kPrepThreads + threadIdx.x;
  const int64_t threads = int64_t(gridDim.x) * kPrepThreads;
  // ---- each row's weight: its group's global scale of A ----
  for (int64_t r = tid; r < p.M; r += threads) {
    if (r < first || r >= last) continue;
    int lo = 0, hi = p.G;  // invariant: off[lo] <= r < off[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) >> 1;
      if (off[mid] <= r) lo = mid; else hi = mid;
    }
    p.row_weight[r] = p.a_global ? p.a_global[lo] : 1.0f;
  }
  // ---- rows of c no group covers (only with offsets outside the contract) ----
  if (first > 0 || last < p.M) {
    const int64_t lo_bytes = int64_t(first) * p.c_row_bytes, hi_start = int64_t(last) * p.c_row_bytes;
    const int64_t total = int64_t(p.M) * p.c_row_bytes;
    for (int64_t b = tid; b < lo_bytes + (total - hi_start); b += threads)
      p.c[b < lo_bytes ? b : hi_start + (b - lo_bytes)] = 0;
  }
  // ---- A to bf16: one 16-value scale block per thread (8 code bytes in, 32 bytes out) ----
  const int kb_per_row = p.K / 16;
  const int64_t blocks = int64_t(p.M) * kb_per_row;
  for (int64_t i = tid; i < blocks; i += threads) {
    const int64_t r = i / kb_per_row;
    const int kb = int(i - r * kb_per_row);
    const uint2 codes = *reinterpret_cast<const uint2*>(p.a + r * (p.K / 2) + kb * 8);
    const float scale = 0.5f * __half2float(__half(__nv_cvt_fp8_to_halfraw(p.a_scale[i], __NV_E4M3)));
    uint32_t out[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const uint32_t byte = ((j < 4 ? codes.x : codes.y) >> (8 * (j % 4))) & 0xFFu;
      const __nv_bfloat162 pair = __floats2bfloat162_rn(e2m1_twice(byte & 0xF) * scale, e2m1_twice(byte >> 4) * scale);
      out[j] = *reinterpret_cast<const uint32_t*>(&pair);
    }
    uint4* dst = reinterpret_cast<uint4*>(p.a_bf16 + r * p.K + kb * 16);
    dst[0] = make_uint4(out[0], out[1], out[2], out[3]);
    dst[1] = make_uint4(out[4], out[5], out[6], out[7]);
  }
  cudaTriggerProgrammaticLaunchCompletion();
}

inline void launch_grouped_prep_impl(const GroupedPrepParams& p, int num_sms, cudaStream_t stream) {
  const int64_t blocks = int64_t(p.M) * (p.K / 16);
  const int64_t want = (blocks + kPrepThreads - 1) / kPrepThreads;
  const int grid = int(std::max<int64_t>(1, std::min<int64_t>(want, int64_t(num_sms) * 8)));
  launch_pdl(grouped_prep_kernel, dim3(grid), dim3(kPrepThreads), 0, stream, p);
  FMOE_CHECK_LAUNCH("grouped_prep_kernel", stream);
}

}  // namespace fusedmoe::detail
