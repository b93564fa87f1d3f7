// fusedmoe: what GPUs this process can use.
#pragma once

#include <string>
#include <vector>

namespace fusedmoe {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;      ///< compute capability
  int sm_count = 0;
  size_t global_mem_bytes = 0;
  size_t l2_bytes = 0;
  size_t smem_per_block_optin = 0;     ///< max dynamic shared memory per block
  int sm_clock_khz = 0, mem_clock_khz = 0, mem_bus_bits = 0;
  bool supported() const { return cc_major == 9 && cc_minor == 0; }  ///< kernels are sm_90a
};

struct DeviceReport {
  bool built_with_cuda = false;
  int driver_version = 0;    ///< e.g. 13000; 0 when no driver
  int runtime_version = 0;
  std::vector<DeviceInfo> devices;
  std::string why_none;      ///< set when devices is empty: no driver, no device, ...
};

/// Never throws: a machine without a driver or GPU gives an empty list and a reason.
DeviceReport query_devices();

/// True when device `index` exists and is an sm_90 GPU the kernels were built for.
bool gpu_usable(int index = 0, std::string* why_not = nullptr);

}  // namespace fusedmoe
