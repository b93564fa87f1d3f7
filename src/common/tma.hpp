// Host side of TMA: tensor maps encoded through the driver entry point fetched by cudart, so
// nothing links libcuda. CUtensorMap comes from <cuda.h> (a header-only type here).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fusedmoe::detail {

/// A 2D row-major tensor [rows, cols] with rows `row_stride_bytes` apart (a multiple of 16),
/// loaded in boxes of [box_rows, box_cols]. Out-of-bounds box elements read as zero.
/// Throws fusedmoe::Error naming `what` when the driver rejects the map (alignment, box limits).
CUtensorMap make_tma_2d(const char* what, const void* base, CUtensorMapDataType dtype,
                        int elem_bytes, uint64_t rows, uint64_t cols, uint64_t row_stride_bytes,
                        uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle);

}  // namespace fusedmoe::detail
