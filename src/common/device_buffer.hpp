// Owning device allocation for host code (tests, benchmarks, the CLI). Not part of the public
// API: the library itself only borrows the caller's memory through TensorRef.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/cuda_check.hpp"

namespace fusedmoe {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { resize(bytes); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) { release(); ptr_ = o.ptr_; bytes_ = o.bytes_; o.ptr_ = nullptr; o.bytes_ = 0; }
    return *this;
  }

  void resize(size_t bytes) {
    release();
    if (bytes) FMOE_CUDA(cudaMalloc(&ptr_, bytes));
    bytes_ = bytes;
  }
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }

  template <class T = void> T* get() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

  /// Fills every byte with `value` (0xFF poisons: NaN for bf16/fp32, 0xFF for e4m3 is NaN).
  /// Synchronous: cudaMemset runs on the legacy default stream, which does not order against
  /// non-blocking streams, so the fill is complete before any later work anywhere.
  void fill(uint8_t value) {
    if (!bytes_) return;
    FMOE_CUDA(cudaMemset(ptr_, value, bytes_));
    FMOE_CUDA(cudaDeviceSynchronize());
  }

  /// Copies `bytes` from host memory to byte `offset` of the buffer and waits until they are
  /// there. Not just cudaMemcpy: from pageable memory it returns once the bytes are staged, before
  /// the DMA lands, and it runs on the legacy default stream, which non-blocking streams do not
  /// wait for; a kernel launched next on one read stale memory (issue 13's R=2 bug: a gather
  /// kernel read its row tables before they arrived and prepared wrong weights).
  void upload(const void* host, size_t bytes, size_t offset = 0) const {
    if (!bytes) return;
    FMOE_CUDA(cudaMemcpy(static_cast<uint8_t*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice));
    FMOE_CUDA(cudaDeviceSynchronize());
  }
  /// The same on `stream` (ordered before whatever is enqueued there next; the library's uploads),
  /// waiting for it.
  void upload(const void* host, size_t bytes, cudaStream_t stream) const {
    if (!bytes) return;
    FMOE_CUDA(cudaMemcpyAsync(ptr_, host, bytes, cudaMemcpyHostToDevice, stream));
    FMOE_CUDA(cudaStreamSynchronize(stream));
  }

  /// A buffer holding `host`, there when this returns (upload above).
  template <class T> static DeviceBuffer from(const std::vector<T>& host) {
    DeviceBuffer b(host.size() * sizeof(T));
    b.upload(host.data(), b.bytes_);
    return b;
  }
  /// The same, copied on `stream`.
  template <class T> static DeviceBuffer from(const std::vector<T>& host, cudaStream_t stream) {
    DeviceBuffer b(host.size() * sizeof(T));
    b.upload(host.data(), b.bytes_, stream);
    return b;
  }
  template <class T> std::vector<T> to_host() const {
    std::vector<T> out(bytes_ / sizeof(T));
    if (!out.empty()) FMOE_CUDA(cudaMemcpy(out.data(), ptr_, out.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace fusedmoe
