#include "common/cuda_check.hpp"

#include "common/env.hpp"

namespace fusedmoe::detail {

void check_launch(const char* kernel, cudaStream_t stream, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    raise(file, line, strf("launch of %s failed: %s (%s)", kernel, cudaGetErrorName(err),
                           cudaGetErrorString(err)));
  if (!knobs().debug_sync) return;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(stream, &capture);
  if (capture != cudaStreamCaptureStatusNone) return;
  const cudaError_t sync = cudaStreamSynchronize(stream);
  if (sync != cudaSuccess)
    raise(file, line, strf("%s failed while running (FMOE_DEBUG_SYNC): %s (%s)", kernel,
                           cudaGetErrorName(sync), cudaGetErrorString(sync)));
}

}  // namespace fusedmoe::detail
