// Contract of the layer's one-time weight preparation kernel (src/layer/sm90_prepare.cuh).
//
//   dst[r, 0 : src_bytes[r]]             = src[src_offset[r] : src_offset[r] + src_bytes[r]]
//   dst[r, src_bytes[r] : dst_row_bytes] = 0        (padding; a row with src_bytes 0 is all zero)
// for r in [0, rows): rows of dst_row_bytes bytes, every offset and length a multiple of 16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace fusedmoe::detail {

struct GatherRowsParams {
  uint8_t* dst;
  int64_t dst_row_bytes;
  const uint8_t* src;
  const int64_t* src_offset;  // [rows] bytes from src
  const int32_t* src_bytes;   // [rows]
  int64_t rows;
};
void launch_gather_rows(const GatherRowsParams& p, cudaStream_t stream);

}  // namespace fusedmoe::detail
