// The host re-layout of 4-bit weights (src/layer/e2m1_prepare.cpp) against the layout's own
// per-nibble definition (src/gemm/e2m1_layout.hpp: value_source / scale_source), written out here
// as the oracle: random codes and scales with zero-scale blocks, padding rows, partial and offset
// column ranges (shared chunks), several k-blocks. And the MXFP4 scale slots against
// mx_scale_slot / mx_row_factor_log2 per element. CPU only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "gemm/e2m1_layout.hpp"
#include "layer/e2m1_prepare.hpp"
#include "ref/random.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using namespace fusedmoe::detail;

namespace {

// The definition: every nibble of every word from value_source, every scale byte from
// scale_source, a code under a zero (or absent) scale stored as zero.
std::vector<uint8_t> fill_by_definition(int64_t tiles, int KB,
                                        const std::function<E2m1RowSource(int64_t, int)>& source) {
  using namespace e2m1;
  std::vector<uint8_t> out(size_t(tiles) * KB * kBlockBytes);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    std::vector<E2m1RowSource> rows(kTileRows);
    for (int r = 0; r < kTileRows; ++r) rows[size_t(r)] = source(tile, r);
    for (int kb = 0; kb < KB; ++kb) {
      uint8_t* blk = out.data() + (size_t(tile) * KB + kb) * kBlockBytes;
      auto scale_at = [&](int r, int64_t col) -> uint8_t {
        const E2m1RowSource& s = rows[size_t(r)];
        return s.row < 0 || col >= s.ncols ? 0 : s.m->scale(s.row, s.col0 + col);
      };
      for (int t = 0; t < 256; ++t)
        for (int step = 0; step < kSteps; ++step) {
          uint32_t word = 0;
          for (int n = 0; n < 8; ++n) {
            const Src v = value_source(t, step, n);
            const int64_t col = int64_t(kb) * kBlockK + v.col;
            const E2m1RowSource& s = rows[size_t(v.row)];
            const uint8_t code = scale_at(v.row, col) == 0 ? 0 : s.m->code(s.row, s.col0 + col);
            word |= place_code(n, code);
          }
          std::memcpy(blk + value_word_offset(t, step), &word, 4);
        }
      for (int quad = 0; quad < 64; ++quad)
        for (int b = 0; b < 8; ++b) {
          const Src sc = scale_source(quad, b);
          blk[kValueBytes + 8 * quad + b] =
              scale_code(scale_at(sc.row, int64_t(kb) * kBlockK + 16 * sc.col));
        }
    }
  }
  return out;
}

E2m1Host random_matrix(int64_t rows, int64_t K, uint64_t seed) {
  E2m1Host m;
  m.K = K;
  m.codes.resize(size_t(rows * K / 2));
  m.scales.resize(size_t(rows * K / 16));
  for (size_t i = 0; i < m.codes.size(); ++i) m.codes[i] = uint8_t(ref::hash3(seed, 1, i));
  for (size_t i = 0; i < m.scales.size(); ++i) {
    const uint64_t h = ref::hash3(seed, 2, i);
    m.scales[i] = h % 7 == 0 ? 0 : uint8_t(0x20 + h % 0x50);  // every 7th block scale zero
  }
  return m;
}

}  // namespace

TEST(E2m1Prepare, FillMatchesTheLayoutDefinition) {
  for (uint64_t seed : test::seeds_for(0xE2F1)) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    // Routed experts: 3 matrices of 200 rows, K = 208 (4 k-blocks, the last partial); a shared
    // matrix read in column chunks of 64 starting at 64 (col0), the last chunk 48 wide.
    const E2m1Host a = random_matrix(3 * 200, 208, seed), sh = random_matrix(130, 240, seed ^ 0x5A);
    const int KB = 4, tiles = 3 * 2 + 3;
    auto source = [&](int64_t tile, int r) {
      E2m1RowSource s;
      if (tile < 6) {
        const int64_t e = tile / 2, row = (tile % 2) * 128 + r;
        if (row >= 200 || (row * 7 + e) % 11 == 0) return s;  // padding rows
        s.m = &a;
        s.row = e * 200 + row;
        s.ncols = 208;
      } else {
        const int64_t chunk = tile - 6;
        if (r >= 130) return s;
        s.m = &sh;
        s.row = r;
        s.col0 = 64 + 64 * chunk;
        s.ncols = std::min<int64_t>(64, 240 - s.col0);  // 64, 64, 48
      }
      return s;
    };
    const std::vector<uint8_t> got = fill_e2m1_blocks(tiles, KB, source);
    const std::vector<uint8_t> want = fill_by_definition(tiles, KB, source);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const size_t blk = i / e2m1::kBlockBytes, off = i % e2m1::kBlockBytes;
      ASSERT_EQ(got[i], want[i]) << "tile " << blk / KB << " k-block " << blk % KB << " byte " << off
                                 << (off >= size_t(e2m1::kValueBytes) ? " (scales)" : " (codes)");
    }
  }
}

TEST(E2m1Prepare, FillIsFasterThanTheDefinition) {
  // Not a pass/fail speed bound (machines differ): prints both times, and checks the two agree on
  // a larger case (a 1536-row, K = 2048 matrix: 48 k-blocks of 12 tiles).
  const E2m1Host m = random_matrix(1536, 2048, 7);
  auto source = [&](int64_t tile, int r) {
    E2m1RowSource s;
    s.m = &m;
    s.row = tile * 128 + r;
    s.ncols = 2048;
    return s;
  };
  auto time = [](auto&& f) {
    const auto t0 = std::chrono::steady_clock::now();
    auto out = f();
    return std::make_pair(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), out);
  };
  const auto [t_fast, fast] = time([&] { return fill_e2m1_blocks(12, 32, source); });
  const auto [t_def, def] = time([&] { return fill_by_definition(12, 32, source); });
  std::printf("[ e2m1 prepare ] 1536 x 2048: fill_e2m1_blocks %.1f ms (host threads), the definition %.1f ms (one thread)\n",
              1e3 * t_fast, 1e3 * t_def);
  EXPECT_EQ(fast, def);
}

TEST(E2m1Prepare, MxfpScaleSlotsAndRowFactors) {
  for (uint64_t seed : test::seeds_for(0x3F5)) {
    const int64_t rows = 37, K = 320;
    std::vector<uint8_t> mx(size_t(rows * K / 32));
    for (size_t i = 0; i < mx.size(); ++i) mx[i] = uint8_t(ref::hash3(seed, 3, i) % 255);  // no 0xFF
    std::vector<uint8_t> slots(size_t(rows * K / 16));
    std::vector<int> factor_log2(static_cast<size_t>(rows));
    mx_scales_to_slots(mx.data(), rows, K, slots.data(), factor_log2.data());
    for (int64_t r = 0; r < rows; ++r) {
      int row_max = 0;
      for (int64_t b = 0; b < K / 32; ++b) row_max = std::max(row_max, int(mx[size_t(r * (K / 32) + b)]));
      ASSERT_EQ(factor_log2[size_t(r)], e2m1::mx_row_factor_log2(row_max)) << "row " << r;
      for (int64_t c = 0; c < K; c += 16) {
        const int code = mx[size_t(r * (K / 32) + c / 32)];
        ASSERT_EQ(slots[size_t(r * (K / 16) + c / 16)], e2m1::mx_scale_slot(code, row_max)) << r << " " << c;
        // The slot times the row factor is the MXFP4 scale, or zero below E4M3's range.
        const double slot = std::ldexp(1.0, code - row_max + e2m1::kMxTopExponent);
        if (code - row_max + e2m1::kMxTopExponent >= e2m1::kMxMinExponent) {
          ASSERT_EQ(slot * std::ldexp(1.0, factor_log2[size_t(r)]), std::ldexp(1.0, code - 127));
        }
      }
    }
  }
}
