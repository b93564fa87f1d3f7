// Internal interface between the host side of rmsnorm_quant (norm.cpp: validation, config choice)
// and its kernels (sm90_norm.cu): the kernel parameters and the launch entry point.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "norm/norm_config.hpp"

namespace fusedmoe::detail {

/// The output form, from out.dtype.
enum class NormOut : uint8_t { bf16, fp8, nvfp4 };

/// The kernels' parameters (one POD, passed by value as a __grid_constant__). Strides count
/// elements of each tensor's own storage type (bytes for e4m3 and e2m1x2).
struct NormParams {
  int T = 0, H = 0;
  float eps = 0.f;
  const uint16_t* x = nullptr;  ///< bf16 bits, [T, H]
  int64_t x_stride = 0;
  uint16_t* residual = nullptr;  ///< nullptr: none
  int64_t residual_stride = 0;
  const uint16_t* weight = nullptr;  ///< [H]
  void* out = nullptr;
  int64_t out_stride = 0;
  void* out_scale = nullptr;  ///< fp8: f32; nvfp4: e4m3 codes
  int64_t scale_stride = 0;
  const float* global_scale = nullptr;  ///< nvfp4
  float* inv_rms = nullptr;  ///< nullptr: not written
  int64_t inv_rms_stride = 0;
  bool pdl = false;
};

/// Enqueues config `id` for output form `form` with `threads` threads per CTA (select_norm_config's
/// choice) on `stream`; sm90_norm.cu switches over norm_configs.def.
void launch_norm(NormConfigId id, NormOut form, int threads, const NormParams& p, cudaStream_t stream);

}  // namespace fusedmoe::detail
