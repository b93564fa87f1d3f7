// The tools' watchdog for a stream (CLI, bench, GPU tests): a pipeline that never finishes ends
// the process with a message instead of spinning forever.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/cuda_check.hpp"

namespace fusedmoe::cli {

/// Waits for `stream` at most `seconds`. A pipeline that never finishes (a deadlock) ends the
/// process with a message naming `what`: std::_Exit, not an exception, because unwinding would
/// free device buffers, and cudaFree waits for the hung kernel forever.
inline void wait_or_die(cudaStream_t stream, double seconds, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t e;
  while ((e = cudaStreamQuery(stream)) == cudaErrorNotReady) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) {
      std::fflush(stdout);
      std::fprintf(stderr, "fusedmoe: %s did not finish within %.0f s (a hang in the pipeline?); "
                   "giving up\n", what.c_str(), seconds);
      std::_Exit(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (e != cudaSuccess) FMOE_CUDA(cudaStreamSynchronize(stream));  // the error, with its name
}

}  // namespace fusedmoe::cli
