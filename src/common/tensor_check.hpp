// Argument checks at the API boundary: each throws fusedmoe::Error with a sentence that names the
// op and the argument and gives the expected and the actual value.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "fusedmoe/types.hpp"

namespace fusedmoe::detail {

void check_dtype(const char* op, const char* name, const TensorRef& t, DType want);
/// Exact shape; the message prints both shapes.
void check_shape(const char* op, const char* name, const TensorRef& t,
                 std::initializer_list<int64_t> want);
/// On a CUDA device (tensors of one call must also share one device: check_same_device).
void check_on_device(const char* op, const char* name, const TensorRef& t);
void check_same_device(const char* op, const char* name, const TensorRef& t, int device_index);
/// Row-major and dense.
void check_contiguous(const char* op, const char* name, const TensorRef& t);
/// Unit stride in the last dimension (rows may be padded).
void check_unit_inner_stride(const char* op, const char* name, const TensorRef& t);
/// The data pointer and every outer stride (in bytes) are multiples of `bytes`.
void check_aligned(const char* op, const char* name, const TensorRef& t, int bytes);
/// Non-null data unless the tensor is empty.
void check_data(const char* op, const char* name, const TensorRef& t);
/// A matrix of rows [rows, cols] of `dtype`: unit column stride, `align`-byte aligned start and
/// row stride, data present (the five checks above, in that order).
void check_rows(const char* op, const char* name, const TensorRef& t, DType dtype, int64_t rows,
                int64_t cols, int align);

}  // namespace fusedmoe::detail
