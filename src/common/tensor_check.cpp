#include "common/tensor_check.hpp"

#include <string>

#include "fusedmoe/error.hpp"

namespace fusedmoe::detail {

void check_dtype(const char* op, const char* name, const TensorRef& t, DType want) {
  FMOE_REQUIRE(t.dtype == want, "%s: %s must be %s, got %s", op, name, dtype_name(want),
               t.describe().c_str());
}

void check_shape(const char* op, const char* name, const TensorRef& t,
                 std::initializer_list<int64_t> want) {
  bool ok = t.ndim == int(want.size());
  int d = 0;
  std::string w = "[";
  for (int64_t s : want) {
    if (ok && t.shape[d] != s) ok = false;
    w += strf(d ? ", %lld" : "%lld", (long long)s);
    ++d;
  }
  w += "]";
  FMOE_REQUIRE(ok, "%s: %s must have shape %s, got %s", op, name, w.c_str(), t.describe().c_str());
}

void check_on_device(const char* op, const char* name, const TensorRef& t) {
  FMOE_REQUIRE(t.device == Device::cuda, "%s: %s must be in CUDA device memory, got %s", op, name,
               t.describe().c_str());
}

void check_same_device(const char* op, const char* name, const TensorRef& t, int device_index) {
  FMOE_REQUIRE(t.device_index == device_index,
               "%s: %s is on cuda:%d but the call runs on cuda:%d", op, name, t.device_index,
               device_index);
}

void check_contiguous(const char* op, const char* name, const TensorRef& t) {
  std::string strides;
  for (int d = 0; d < t.ndim; ++d) strides += strf(d ? ", %lld" : "%lld", (long long)t.stride[d]);
  FMOE_REQUIRE(t.is_contiguous(), "%s: %s must be contiguous (row-major), got %s with strides [%s]",
               op, name, t.describe().c_str(), strides.c_str());
}

void check_unit_inner_stride(const char* op, const char* name, const TensorRef& t) {
  FMOE_REQUIRE(t.ndim >= 1 && (t.stride[t.ndim - 1] == 1 || t.shape[t.ndim - 1] == 1),
               "%s: %s must have unit stride in its last dimension, got stride %lld", op, name,
               (long long)(t.ndim >= 1 ? t.stride[t.ndim - 1] : 0));
}

void check_aligned(const char* op, const char* name, const TensorRef& t, int bytes) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(t.data);
  FMOE_REQUIRE(addr % uintptr_t(bytes) == 0, "%s: %s must be %d-byte aligned, got address %p", op,
               name, bytes, t.data);
  const int64_t eb = int64_t(dtype_bytes(t.dtype));
  for (int d = 0; d + 1 < t.ndim; ++d)
    FMOE_REQUIRE(t.shape[d] <= 1 || (t.stride[d] * eb) % bytes == 0,
                 "%s: %s has a stride of %lld bytes in dimension %d; it must be a multiple of %d",
                 op, name, (long long)(t.stride[d] * eb), d, bytes);
}

void check_data(const char* op, const char* name, const TensorRef& t) {
  FMOE_REQUIRE(t.data != nullptr || t.numel() == 0, "%s: %s has a null data pointer", op, name);
}

void check_rows(const char* op, const char* name, const TensorRef& t, DType dtype, int64_t rows,
                int64_t cols, int align) {
  check_dtype(op, name, t, dtype);
  check_shape(op, name, t, {rows, cols});
  check_unit_inner_stride(op, name, t);
  check_aligned(op, name, t, align);
  check_data(op, name, t);
}

}  // namespace fusedmoe::detail
