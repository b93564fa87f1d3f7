// fusedmoe: element types and the non-owning tensor reference every op takes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace fusedmoe {

/// Storage element types. A TensorRef's shape and strides count storage elements, so a packed
/// NVFP4 tensor of K values per row has K/2 columns of e2m1x2 (as ModelOpt checkpoints and
/// torch uint8 tensors hold it).
enum class DType : uint8_t {
  bf16,     ///< bfloat16
  f16,      ///< IEEE half
  f32,      ///< IEEE single
  e4m3,     ///< FP8 E4M3 (OCP "fn": no inf, one NaN code per sign, max 448)
  e2m1x2,   ///< two FP4 E2M1 values per byte, the even element in the low nibble
  ue8m0,    ///< unsigned power-of-two scale, value 2^(code-127), 0xFF is NaN
  i32,      ///< int32 (expert ids, counts, offsets)
  i64,      ///< int64 (token positions, as torch and vLLM hold them)
};

/// Bytes of one storage element.
size_t dtype_bytes(DType t);
/// Lower-case name as used in messages and the CLI ("bf16", "e4m3", ...).
const char* dtype_name(DType t);

enum class Device : uint8_t { cpu, cuda };

/// A view of memory the caller owns: pointer, type, up to 4 dimensions with strides in elements.
/// Ops validate every field they rely on and throw fusedmoe::Error naming the argument.
struct TensorRef {
  static constexpr int kMaxDims = 4;
  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0};
  int64_t stride[kMaxDims] = {0, 0, 0, 0};  ///< in elements
  Device device = Device::cpu;
  int device_index = 0;

  /// A contiguous (row-major) tensor.
  static TensorRef contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                              Device device = Device::cpu, int device_index = 0);

  int64_t numel() const;
  bool is_contiguous() const;
  /// "[128, 2048] bf16 cuda:0"
  std::string describe() const;
};

}  // namespace fusedmoe
