// The device re-layout of 4-bit weights (launch_e2m1_prepare, layer/prepare.hpp) against the host
// one (fill_e2m1_blocks, layer/e2m1_prepare.hpp, which tests/layer/test_e2m1_prepare.cpp holds to
// the layout's per-nibble definition): byte-equal blocks for NVFP4 and MXFP4 scales, two source
// matrices, padding rows, offset and partial column ranges, a K that ends inside a k-block, zero
// scales and MXFP4 blocks flushed below the row's range; and the scale scan's first bad index and
// MXFP4 row maxima. Skips without an sm_90 GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "gemm/e2m1_layout.hpp"
#include "layer/e2m1_prepare.hpp"
#include "layer/prepare.hpp"
#include "ref/random.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using namespace fusedmoe::detail;

namespace {

constexpr int64_t kK = 352;  // 5.5 k-blocks of 64
constexpr int64_t kRows[2] = {300, 40};

std::vector<uint8_t> random_bytes(size_t n, ref::Rng& rng) {
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = uint8_t(rng.next());
  return v;
}

}  // namespace

TEST(E2m1PrepareGpu, DeviceRelayoutMatchesTheHostOne) {
  FMOE_SKIP_WITHOUT_GPU();
  for (const bool mx : {false, true})
    for (uint64_t seed : test::seeds_for(mx ? 0xE2D2 : 0xE2D1)) {
      SCOPED_TRACE(testing::Message() << (mx ? "mxfp4" : "nvfp4") << " seed " << seed);
      ref::Rng rng(seed);
      const int64_t per_row = kK / (mx ? 32 : 16);
      E2m1Host host[2];
      std::vector<uint8_t> raw_scales[2];
      DeviceBuffer d_codes[2], d_scales[2], d_row_max[2];
      E2m1Source src[2];
      for (int m = 0; m < 2; ++m) {
        host[m].K = kK;
        host[m].codes = random_bytes(size_t(kRows[m] * kK / 2), rng);
        // NVFP4: E4M3 codes in [0, 0x7E], every 9th zero; MXFP4: UE8M0 codes in [110, 135],
        // every 11th 40 binades below (a zero slot: its codes are stored as zero).
        raw_scales[m].resize(size_t(kRows[m] * per_row));
        for (size_t i = 0; i < raw_scales[m].size(); ++i) {
          const uint64_t u = rng.next();
          raw_scales[m][i] = mx ? uint8_t(i % 11 == 3 ? 70 : 110 + u % 26)
                                : uint8_t(i % 9 == 4 ? 0 : u % 0x7F);
        }
        if (mx) {
          host[m].scales.resize(size_t(kRows[m] * (kK / 16)));
          host[m].row_log2.resize(size_t(kRows[m]));
          mx_scales_to_slots(raw_scales[m].data(), kRows[m], kK, host[m].scales.data(), host[m].row_log2.data());
        } else {
          host[m].scales = raw_scales[m];
        }
        d_codes[m] = DeviceBuffer::from(host[m].codes);
        d_scales[m] = DeviceBuffer::from(raw_scales[m]);
        d_row_max[m] = DeviceBuffer(size_t(kRows[m]) * sizeof(int32_t));
        DeviceBuffer first_bad = DeviceBuffer::from(std::vector<unsigned long long>{raw_scales[m].size()});
        launch_e2m1_scale_scan({d_scales[m].get<uint8_t>(), int64_t(raw_scales[m].size()),
                                first_bad.get<unsigned long long>(), mx, d_row_max[m].get<int32_t>(), per_row},
                               nullptr);
        std::vector<unsigned long long> bad(1);
        FMOE_CUDA(cudaMemcpy(bad.data(), first_bad.get(), 8, cudaMemcpyDeviceToHost));
        EXPECT_EQ(bad[0], raw_scales[m].size()) << "no scale here is refused";
        if (mx) {
          std::vector<int32_t> row_max(size_t(kRows[m]));
          FMOE_CUDA(cudaMemcpy(row_max.data(), d_row_max[m].get(), row_max.size() * 4, cudaMemcpyDeviceToHost));
          for (int64_t r = 0; r < kRows[m]; ++r) {
            const uint8_t* s = raw_scales[m].data() + r * per_row;
            ASSERT_EQ(row_max[size_t(r)], *std::max_element(s, s + per_row)) << "row " << r;
          }
        }
        src[m] = {d_codes[m].get<uint8_t>(), d_scales[m].get<uint8_t>(),
                  mx ? d_row_max[m].get<int32_t>() : nullptr, kK};
      }

      // 3 tiles x 128 prepared rows: padding, whole rows of matrix 0, and rows of matrix 1 from
      // column 32 (or 0) with 160 (or all) columns.
      const int64_t tiles = 3;
      const int KB = int((kK + 63) / 64);
      std::vector<E2m1RowRef> refs(size_t(tiles) * 128);
      for (size_t i = 0; i < refs.size(); ++i) {
        const uint64_t u = rng.next();
        if (u % 7 == 0) continue;  // padding
        if (u % 3 == 0) {
          const bool part = (u >> 8) % 2;
          refs[i] = {int64_t((u >> 16) % kRows[1]), part ? 32 : 0, part ? 160 : int32_t(kK), 1, 0};
        } else {
          refs[i] = {int64_t((u >> 16) % kRows[0]), 0, int32_t(kK), 0, 0};
        }
      }
      const std::vector<uint8_t> want = fill_e2m1_blocks(tiles, KB, [&](int64_t tile, int r) {
        const E2m1RowRef& f = refs[size_t(tile * 128 + r)];
        E2m1RowSource s;
        if (f.matrix < 0) return s;
        s.m = &host[f.matrix];
        s.row = f.row;
        s.col0 = f.col0;
        s.ncols = f.ncols;
        return s;
      });
      const DeviceBuffer d_refs = DeviceBuffer::from(refs);
      DeviceBuffer d_out(want.size());
      FMOE_CUDA(cudaMemset(d_out.get(), 0xA5, want.size()));  // poison
      launch_e2m1_prepare({d_out.get<uint8_t>(), tiles, KB, d_refs.get<E2m1RowRef>(), {src[0], src[1]}, mx}, nullptr);
      std::vector<uint8_t> got(want.size());
      FMOE_CUDA(cudaMemcpy(got.data(), d_out.get(), got.size(), cudaMemcpyDeviceToHost));
      size_t first = got.size();
      for (size_t i = 0; i < got.size(); ++i)
        if (got[i] != want[i]) {
          first = i;
          break;
        }
      ASSERT_EQ(first, got.size()) << "block " << first / e2m1::kBlockBytes << " byte "
                                   << first % e2m1::kBlockBytes << ": got " << int(got[first])
                                   << " want " << int(want[first]);
    }
}

TEST(E2m1PrepareGpu, ScaleScanFindsTheFirstRefusedCode) {
  FMOE_SKIP_WITHOUT_GPU();
  for (const bool mx : {false, true}) {
    std::vector<uint8_t> s(100000, 0x38);
    const size_t at[3] = {77777, 4096, 99999};
    for (size_t i : at) s[i] = mx ? 0xFF : (i == 4096 ? 0xB8 : 0x7F);
    const DeviceBuffer d = DeviceBuffer::from(s);
    DeviceBuffer first_bad = DeviceBuffer::from(std::vector<unsigned long long>{s.size()});
    DeviceBuffer row_max(size_t(s.size() / 50) * sizeof(int32_t));
    launch_e2m1_scale_scan({d.get<uint8_t>(), int64_t(s.size()), first_bad.get<unsigned long long>(), mx,
                            row_max.get<int32_t>(), 50}, nullptr);
    std::vector<unsigned long long> bad(1);
    FMOE_CUDA(cudaMemcpy(bad.data(), first_bad.get(), 8, cudaMemcpyDeviceToHost));
    EXPECT_EQ(bad[0], 4096u) << (mx ? "mxfp4" : "nvfp4");
  }
}
