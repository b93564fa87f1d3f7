#include "fusedmoe/types.hpp"

#include "fusedmoe/error.hpp"

namespace fusedmoe {

size_t dtype_bytes(DType t) {
  switch (t) {
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f32: return 4;
    case DType::e4m3: return 1;
    case DType::e2m1x2: return 1;
    case DType::ue8m0: return 1;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  FMOE_REQUIRE(false, "dtype_bytes: unknown dtype code %d", int(t));
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::e4m3: return "e4m3";
    case DType::e2m1x2: return "e2m1x2";
    case DType::ue8m0: return "ue8m0";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "unknown";
}

TensorRef TensorRef::contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                                Device device, int device_index) {
  FMOE_REQUIRE(int(shape.size()) <= kMaxDims, "TensorRef: %d dimensions, at most %d supported",
               int(shape.size()), kMaxDims);
  TensorRef t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = int(shape.size());
  t.device = device;
  t.device_index = device_index;
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

int64_t TensorRef::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim; ++d) n *= shape[d];
  return n;
}

bool TensorRef::is_contiguous() const {
  int64_t expect = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expect) return false;
    expect *= shape[d];
  }
  return true;
}

std::string TensorRef::describe() const {
  std::string s = "[";
  for (int d = 0; d < ndim; ++d) s += strf(d ? ", %lld" : "%lld", (long long)shape[d]);
  s += strf("] %s %s", dtype_name(dtype), device == Device::cpu ? "cpu" : "cuda");
  if (device == Device::cuda) s += strf(":%d", device_index);
  return s;
}

}  // namespace fusedmoe
