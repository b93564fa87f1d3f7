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

// ---- 4-bit weights (NVFP4, MXFP4) into the e2m1 blocks of src/gemm/e2m1_layout.hpp ----------
//   dst block (tile, kb) = the 128 prepared rows tile * 128 + [0, 128), columns kb * 64 + [0, 64),
//   laid out as e2m1_layout.hpp says; prepared row r takes source row rows[r] of matrix
//   src[rows[r].matrix], source columns [col0, col0 + ncols) into prepared columns [0, ncols);
//   the rest (and a row with matrix < 0) is zero. A code whose 16-column scale is zero is stored
//   as zero (the decode turns a zero scale into a large power of two). MXFP4: scale slot =
//   mx_scale_slot(code, row_max[row]). The host re-layout (e2m1_prepare.hpp: fill_e2m1_blocks)
//   is the same map on the CPU, and the oracle of the GPU test.

/// One contiguous 4-bit matrix on the device: codes [rows, K/2] (two E2M1 per byte, even element
/// in the low nibble), scales [rows, K/16] E4M3 (NVFP4) or [rows, K/32] UE8M0 (MXFP4, with
/// row_max [rows] each row's largest code).
struct E2m1Source {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const int32_t* row_max = nullptr;
  int64_t K = 0;
};
/// Where a prepared row comes from (matrix < 0: padding).
struct E2m1RowRef {
  int64_t row = -1;
  int32_t col0 = 0;    // a multiple of 16
  int32_t ncols = 0;   // a multiple of 16
  int32_t matrix = -1;
  int32_t unused = 0;
};
struct E2m1PrepareParams {
  uint8_t* dst;             // [tiles * KB] blocks of e2m1::kBlockBytes
  int64_t tiles;
  int KB;
  const E2m1RowRef* rows;   // [tiles * 128]
  E2m1Source src[2];
  bool mx;
};
void launch_e2m1_prepare(const E2m1PrepareParams& p, cudaStream_t stream);

/// The smallest index i < n of a scale code the decode refuses (NVFP4: negative or NaN, code &
/// 0x80 or 0x7F; MXFP4: NaN, 0xFF) into *first_bad (left at n when there is none; the caller sets
/// it to n first), and for MXFP4 each row's largest code (rows of per_row codes) into row_max.
struct E2m1ScaleScanParams {
  const uint8_t* scales;
  int64_t n;
  unsigned long long* first_bad;
  bool mx;
  int32_t* row_max;  // mx: [n / per_row]
  int64_t per_row;
};
void launch_e2m1_scale_scan(const E2m1ScaleScanParams& p, cudaStream_t stream);

}  // namespace fusedmoe::detail
