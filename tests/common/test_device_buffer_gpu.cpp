// DeviceBuffer's uploads are on the device when they return, for every stream. A plain
// cudaMemcpy from pageable memory returns once the bytes are staged, on the legacy default
// stream, which a non-blocking stream does not wait for: the copy below on such a stream then
// read stale memory. That was issue 13's R=2 bug (MoeLayer's prepare kernel read its row tables
// before they arrived), so every upload in the library and its tools goes through these.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "common/device_buffer.hpp"
#include "tests/test_util.hpp"

namespace fusedmoe {
namespace {

struct NonBlockingStream {
  cudaStream_t s = nullptr;
  NonBlockingStream() { FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~NonBlockingStream() { cudaStreamDestroy(s); }
};

// Random bytes, so stale memory (poisoned first) cannot match by chance.
std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    x = ref::splitmix64(x);
    for (size_t b = 0; b < 8 && i + b < n; ++b) v[i + b] = uint8_t(x >> (8 * b));
  }
  return v;
}

// What `buf` holds as read by a copy on `stream` enqueued right after the upload.
std::vector<uint8_t> read_on(const DeviceBuffer& buf, cudaStream_t stream) {
  DeviceBuffer copy(buf.bytes());
  FMOE_CUDA(cudaMemcpyAsync(copy.get(), buf.get(), buf.bytes(), cudaMemcpyDeviceToDevice, stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  return copy.to_host<uint8_t>();
}

TEST(DeviceBufferGpu, UploadsAreThereForANonBlockingStream) {
  FMOE_SKIP_WITHOUT_GPU();
  NonBlockingStream stream;
  // 1 and 4 MB: where a plain cudaMemcpy lost the race in 17-18 of 20 tries on an H100 (session
  // 26; at 16 and 64 MB it waited for the DMA every time). MoeLayer's row tables for 128
  // DeepSeek-V3 experts are 2 and 4 MB.
  for (const size_t kBytes : {size_t(1) << 20, size_t(4) << 20}) {
    for (const uint64_t seed : test::seeds_for(test::hash_ints({(long long)kBytes}))) {
      SCOPED_TRACE(testing::Message() << kBytes << " bytes, seed " << seed);
      const std::vector<uint8_t> host = random_bytes(kBytes, seed);
      {  // memory the next allocation likely reuses, poisoned
        DeviceBuffer junk(kBytes * 2);
        junk.fill(0xA5);
      }
      const DeviceBuffer plain = DeviceBuffer::from(host);
      EXPECT_TRUE(read_on(plain, stream.s) == host) << "DeviceBuffer::from(host)";
      const DeviceBuffer on_stream = DeviceBuffer::from(host, stream.s);
      EXPECT_TRUE(read_on(on_stream, stream.s) == host) << "DeviceBuffer::from(host, stream)";
      DeviceBuffer part(kBytes);
      part.fill(0xA5);
      part.upload(host.data() + 4096, kBytes - 4096, size_t(4096));
      part.upload(host.data(), 4096);
      EXPECT_TRUE(read_on(part, stream.s) == host) << "upload(host, bytes, offset)";
    }
  }
}

}  // namespace
}  // namespace fusedmoe
