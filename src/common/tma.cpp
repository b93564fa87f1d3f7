#include "common/tma.hpp"

#include <cudaTypedefs.h>

#include "common/cuda_check.hpp"

namespace fusedmoe::detail {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    FMOE_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000,
                                               cudaEnableDefault, &status));
    FMOE_REQUIRE(status == cudaDriverEntryPointSuccess && ptr,
                 "the CUDA driver does not provide cuTensorMapEncodeTiled (driver too old?)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  }();
  return fn;
}

}  // namespace

CUtensorMap make_tma_2d(const char* what, const void* base, CUtensorMapDataType dtype,
                        int elem_bytes, uint64_t rows, uint64_t cols, uint64_t row_stride_bytes,
                        uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  FMOE_REQUIRE(reinterpret_cast<uintptr_t>(base) % 16 == 0,
               "%s: base address %p must be 16-byte aligned for TMA", what, base);
  FMOE_REQUIRE(row_stride_bytes % 16 == 0,
               "%s: row stride of %llu bytes must be a multiple of 16 for TMA", what,
               (unsigned long long)row_stride_bytes);
  CUtensorMap map{};
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {row_stride_bytes};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult res = encode_fn()(&map, dtype, 2, const_cast<void*>(base), dims, strides, box,
                                   elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  FMOE_REQUIRE(res == CUDA_SUCCESS,
               "%s: cuTensorMapEncodeTiled rejected [%llu x %llu] x %d B, stride %llu B, box "
               "[%u x %u] (CUresult %d)", what, (unsigned long long)rows, (unsigned long long)cols,
               elem_bytes, (unsigned long long)row_stride_bytes, box_rows, box_cols, int(res));
  return map;
}

}  // namespace fusedmoe::detail
