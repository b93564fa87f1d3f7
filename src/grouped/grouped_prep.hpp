// Contract of the NVFP4 grouped GEMM's per-call preparation kernel (sm90_grouped_prep.cuh), the
// first of the op's two launches (the second is the grouped GEMM engine, src/gemm):
//   - the group offsets, sanitized: s[g] = min(M, max(0, offsets[0..g])) (a prefix maximum, so
//     non-decreasing and in [0, M]); status[0] = 1 when they differ from the contract
//     (offsets[0] = 0, non-decreasing, offsets[G] = M), else 0;
//   - the engine's schedule over them: counts[g] = s[g+1] - s[g], route_offsets = s, tile_offsets
//     the exclusive sum of ceil(counts / block_t); rows are the routes themselves (k = 1), so
//     route r's weight row_weight[r] = a_global[g(r)] (1 without a_global) carries A's global scale;
//   - a_bf16[r, k] = e2m1(a[r, k]) * e4m3(a_scale[r, k/16]) for every row r (exact in bf16);
//   - the rows of c outside [s[0], s[G]) set to zero (no group writes them).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fusedmoe::detail {

/// Groups one call can have: the grouped GEMM's expert table (kGemmMaxExperts) holds them.
constexpr int kGroupedMaxGroups = 512;

struct GroupedPrepParams {
  const uint8_t* a;          // [M, K/2] e2m1 pairs
  const uint8_t* a_scale;    // [M, K/16] e4m3
  const float* a_global;     // [G] or nullptr
  const int32_t* offsets;    // [G + 1]
  int G, M, K;
  int block_t;               // the GEMM config's token-tile width
  uint16_t* a_bf16;          // [M, K] bf16 bits
  int32_t* counts;           // [G]
  int32_t* tile_offsets;     // [G + 1]
  int32_t* route_offsets;    // [G + 1]
  float* row_weight;         // [M]
  int32_t* status;           // [1]
  uint8_t* c;                // [M, c_row_bytes]
  int64_t c_row_bytes;
};

void launch_grouped_prep(const GroupedPrepParams& p, int num_sms, cudaStream_t stream);

}  // namespace fusedmoe::detail
