#include "fusedmoe/device.hpp"

#include "fusedmoe/error.hpp"

#if defined(FMOE_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace fusedmoe {

DeviceReport query_devices() {
  DeviceReport r;
#if defined(FMOE_HAS_CUDA)
  r.built_with_cuda = true;
  cudaDriverGetVersion(&r.driver_version);
  cudaRuntimeGetVersion(&r.runtime_version);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // No driver (or none new enough), no device: say so in words; the CUDA name stays for
    // whoever needs to look it up.
    const bool no_driver = err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice;
    r.why_none = no_driver ? strf("no NVIDIA driver / no GPU found (%s)", cudaGetErrorName(err))
                           : strf("no usable CUDA device: %s (%s)", cudaGetErrorName(err),
                                  cudaGetErrorString(err));
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return r;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.sm_count = p.multiProcessorCount;
    d.global_mem_bytes = p.totalGlobalMem;
    d.l2_bytes = size_t(p.l2CacheSize);
    d.smem_per_block_optin = p.sharedMemPerBlockOptin;
    cudaDeviceGetAttribute(&d.sm_clock_khz, cudaDevAttrClockRate, i);
    cudaDeviceGetAttribute(&d.mem_clock_khz, cudaDevAttrMemoryClockRate, i);
    cudaDeviceGetAttribute(&d.mem_bus_bits, cudaDevAttrGlobalMemoryBusWidth, i);
    r.devices.push_back(d);
  }
  if (r.devices.empty()) r.why_none = "the CUDA driver reports no devices";
#else
  r.why_none = "this build has no CUDA support (nvcc was not found at configure time)";
#endif
  return r;
}

bool gpu_usable(int index, std::string* why_not) {
  const DeviceReport r = query_devices();
  std::string why;
  if (r.devices.empty()) {
    why = r.why_none;
  } else if (index < 0 || index >= int(r.devices.size())) {
    why = strf("device %d does not exist (%d devices)", index, int(r.devices.size()));
  } else if (!r.devices[size_t(index)].supported()) {
    const DeviceInfo& d = r.devices[size_t(index)];
    why = strf("device %d (%s) is sm_%d%d; the kernels are built for sm_90a (H100/H200)", index,
               d.name.c_str(), d.cc_major, d.cc_minor);
  }
  if (why_not) *why_not = why;
  return why.empty();
}

}  // namespace fusedmoe
