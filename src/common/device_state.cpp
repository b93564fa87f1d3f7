#include "common/device_state.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "common/cuda_check.hpp"
#include "fusedmoe/device.hpp"

namespace fusedmoe::detail {
namespace {

const DeviceState& device_state(const char* op, int dev) {
  static std::mutex mu;
  static std::vector<DeviceState> states;
  std::lock_guard<std::mutex> lock(mu);
  if (states.empty()) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      n = 0;
    }
    states.resize(size_t(std::max(n, 1)));
    for (int i = 0; i < n; ++i) {
      states[size_t(i)].ok = gpu_usable(i, &states[size_t(i)].why);
      if (states[size_t(i)].ok)
        FMOE_CUDA(cudaDeviceGetAttribute(&states[size_t(i)].sms, cudaDevAttrMultiProcessorCount, i));
    }
    if (n == 0) gpu_usable(0, &states[0].why);
  }
  FMOE_REQUIRE(dev >= 0 && dev < int(states.size()), "%s: CUDA device %d does not exist", op, dev);
  return states[size_t(dev)];
}

}  // namespace

const DeviceState& current_device_state(const char* op, int tensor_device) {
  int dev = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  FMOE_REQUIRE(dev == tensor_device, "%s: the tensors are on cuda:%d but the current device is "
               "cuda:%d", op, tensor_device, dev);
  const DeviceState& ds = device_state(op, dev);
  FMOE_REQUIRE(ds.ok, "%s: %s", op, ds.why.c_str());
  return ds;
}

}  // namespace fusedmoe::detail
