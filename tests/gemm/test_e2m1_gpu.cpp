// The NVFP4 decode and the register-A bf16 wgmma on the GPU (issue 11's W4A16 mainloop, before it
// enters the engine): one prepared block (src/gemm/e2m1_layout.hpp) of random codes and scales,
// including E4M3 subnormal scales, E2M1 code 1 (a bf16 subnormal after the decode), -0 and a
// zero-scale block, times 16 random bf16 activation rows, against a double-precision sum.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/device_buffer.hpp"
#include "common/cuda_check.hpp"
#include "fusedmoe/formats.hpp"
#include "gemm/e2m1_layout.hpp"
#include "ref/random.hpp"
#include "tests/gemm/e2m1_gpu_kernels.hpp"
#include "tests/test_util.hpp"

namespace fusedmoe {
namespace {

using namespace detail::e2m1;

// Packs the ModelOpt block (codes [128][64], scales [128][4]) as the kernels read it, zeroing the
// codes of a zero-scale 16-block as prepare does.
std::vector<uint8_t> prepare_block(std::vector<uint8_t>& codes, const std::vector<uint8_t>& scales) {
  for (int r = 0; r < kTileRows; ++r)
    for (int c = 0; c < kBlockK; ++c)
      if (scales[r * kSteps + c / 16] == 0) codes[r * kBlockK + c] = 0;
  std::vector<uint8_t> block(kBlockBytes);
  for (int t = 0; t < 256; ++t)
    for (int step = 0; step < kSteps; ++step) {
      uint32_t word = 0;
      for (int n = 0; n < 8; ++n) {
        const Src s = value_source(t, step, n);
        word |= place_code(n, codes[s.row * kBlockK + s.col]);
      }
      std::memcpy(&block[value_word_offset(t, step)], &word, 4);
    }
  for (int quad = 0; quad < 64; ++quad)
    for (int b = 0; b < 8; ++b) {
      const Src s = scale_source(quad, b);
      block[kValueBytes + 8 * quad + b] = scale_code(scales[s.row * kSteps + s.col]);
    }
  return block;
}

TEST(E2M1Gpu, DecodeAndRegisterAWgmma) {
  FMOE_SKIP_WITHOUT_GPU();
  for (uint64_t seed : test::seeds_for(0xE2A1)) {
    SCOPED_TRACE(testing::Message() << "seed " << seed);
    ref::Rng rng(seed);
    std::vector<uint8_t> codes(kTileRows * kBlockK), scales(kTileRows * kSteps);
    for (auto& c : codes) c = uint8_t(rng.next() & 0xF);
    for (size_t i = 0; i < scales.size(); ++i) {
      const uint64_t u = rng.next();
      // a tenth subnormal scales (codes 1..7), one row quad's block zero, the rest normal
      scales[i] = u % 10 == 0 ? uint8_t(1 + (u >> 8) % 7) : uint8_t(8 + (u >> 8) % (0x7F - 8));
    }
    scales[5 * kSteps + 2] = 0;
    std::vector<uint16_t> x(16 * kBlockK);
    for (auto& v : x) v = fmt::bf16_from_float(float(int64_t(rng.next() % 2001) - 1000) / 256.0f);
    std::vector<uint8_t> c2 = codes;
    const std::vector<uint8_t> block = prepare_block(c2, scales);

    DeviceBuffer d_block(block.size()), d_x(x.size() * 2), d_out(kTileRows * 16 * 4);
    d_block.upload(block.data(), block.size());
    d_x.upload(x.data(), x.size() * 2);
    FMOE_CUDA(cudaMemset(d_out.get(), 0xFF, kTileRows * 16 * 4));  // poison: NaN
    test::launch_e2m1_block_mma(d_block.get<uint8_t>(), d_x.get<uint16_t>(), d_out.get<float>(), nullptr);
    std::vector<float> out(kTileRows * 16);
    FMOE_CUDA(cudaMemcpy(out.data(), d_out.get(), out.size() * 4, cudaMemcpyDeviceToHost));

    const double unit = std::ldexp(1.0, -kProductShift);
    int bad = 0;
    for (int r = 0; r < kTileRows; ++r)
      for (int t = 0; t < 16; ++t) {
        double want = 0, mag = 0;
        for (int k = 0; k < kBlockK; ++k) {
          const uint8_t sc = scales[r * kSteps + k / 16];
          const double w = sc == 0 ? 0.0 : double(fmt::e2m1_to_float(c2[r * kBlockK + k])) * fmt::e4m3_to_float(sc) * unit;
          const double term = w * fmt::bf16_to_float(x[t * kBlockK + k]);
          want += term;
          mag += std::fabs(term);
        }
        // fp32 accumulation of 64 exact products: |error| <= 64 * 2^-24 * sum|terms|.
        const double got = out[r * 16 + t];
        if (!(std::fabs(got - want) <= 64 * std::ldexp(1.0, -24) * mag) && bad++ < 10)
          ADD_FAILURE() << "row " << r << " token " << t << ": got " << got << " want " << want;
      }
    EXPECT_EQ(bad, 0);
  }
}

}  // namespace
}  // namespace fusedmoe
