// Checked CUDA calls for host code. Every runtime call goes through FMOE_CUDA, every driver call
// (reached through cudaGetDriverEntryPoint, so nothing links libcuda) through FMOE_CU, and every
// launch is followed by FMOE_CHECK_LAUNCH. Errors throw fusedmoe::Error with the call text, the
// error name and string, and file:line.
#pragma once

#include <cuda_runtime_api.h>

#include "fusedmoe/error.hpp"

#define FMOE_CUDA(call)                                                                     \
  do {                                                                                      \
    const cudaError_t fmoe_err_ = (call);                                                   \
    if (fmoe_err_ != cudaSuccess)                                                           \
      ::fusedmoe::raise(__FILE__, __LINE__,                                                 \
                        ::fusedmoe::strf("%s failed: %s (%s)", #call,                       \
                                         cudaGetErrorName(fmoe_err_),                       \
                                         cudaGetErrorString(fmoe_err_)));                   \
  } while (0)

#define FMOE_CU(call)                                                                       \
  do {                                                                                      \
    const int fmoe_res_ = int(call);                                                        \
    if (fmoe_res_ != 0)                                                                     \
      ::fusedmoe::raise(__FILE__, __LINE__,                                                 \
                        ::fusedmoe::strf("%s failed: CUresult %d", #call, fmoe_res_));      \
  } while (0)

namespace fusedmoe::detail {
/// After a launch: checks cudaGetLastError; with FMOE_DEBUG_SYNC=1 also synchronizes the stream
/// (skipped while the stream is being captured) so a fault names the kernel that caused it.
void check_launch(const char* kernel, cudaStream_t stream, const char* file, int line);
}  // namespace fusedmoe::detail

#define FMOE_CHECK_LAUNCH(kernel_name, stream) \
  ::fusedmoe::detail::check_launch(kernel_name, stream, __FILE__, __LINE__)
