// Per-device facts the ops need on every call (SM count, whether the kernels run there), read
// once per process: the call path must not query the driver every time.
#pragma once

#include <string>

namespace fusedmoe::detail {

struct DeviceState {
  int sms = 0;
  bool ok = false;  ///< an sm_90 GPU the kernels were built for
  std::string why;  ///< why not, when !ok
};

/// The current CUDA device, checked against the device the tensors live on; throws Error naming
/// `op` when they differ or when the kernels cannot run there.
const DeviceState& current_device_state(const char* op, int tensor_device);

}  // namespace fusedmoe::detail
