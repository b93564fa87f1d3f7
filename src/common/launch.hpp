// Kernel launch with programmatic dependent launch (PDL), shared by every op.
#pragma once

#include <cuda_runtime_api.h>


#include "common/cuda_check.hpp"
#include "common/env.hpp"

namespace fusedmoe::detail {

/// cudaLaunchKernelEx on the caller's stream. With `pdl`, programmatic stream serialization: the
/// kernel may start while the previous one drains and must call griddepcontrol.wait
/// (cudaGridDependencySynchronize) before touching that kernel's outputs. FMOE_NO_PDL=1 turns it
/// off everywhere (debugging, A/B timing).
template <class Kernel, class... Args>
void launch_kernel(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream, bool pdl,
                   Args... args) {
  const bool no_pdl = knobs().no_pdl;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl && !no_pdl ? 1 : 0;
  FMOE_CUDA(cudaLaunchKernelEx(&cfg, kernel, args...));
}

/// The common case: PDL on.
template <class Kernel, class... Args>
void launch_pdl(Kernel kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                Args... args) {
  launch_kernel(kernel, grid, block, smem, stream, true, args...);
}

}  // namespace fusedmoe::detail
