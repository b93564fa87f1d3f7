// The NVFP4 weight layout of the grouped GEMM engine (src/gemm/e2m1_layout.hpp), on the CPU: the
// layout covers every code and scale of a (128-row tile, 64-K block) exactly once, each thread's
// word holds the wgmma A fragment the PTX ISA assigns it, and the decode's bit tricks give
// value * scale * 2^-26 exactly for every code and every finite non-negative E4M3 scale.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fusedmoe/formats.hpp"
#include "gemm/e2m1_layout.hpp"

namespace fusedmoe::detail::e2m1 {
namespace {

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
float bf16_lo(uint32_t x) { return bits_to_float(x << 16); }
float bf16_hi(uint32_t x) { return bits_to_float(x & 0xFFFF0000u); }

bool is_bf16(double v) {
  const float f = float(v);
  if (double(f) != v) return false;
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return (b & 0xFFFF) == 0;
}

TEST(E2M1Layout, CoversEveryCodeAndScaleOnce) {
  std::vector<int> seen(kTileRows * kBlockK, 0);
  for (int t = 0; t < 256; ++t)
    for (int step = 0; step < kSteps; ++step)
      for (int n = 0; n < 8; ++n) {
        const Src s = value_source(t, step, n);
        ASSERT_TRUE(s.row >= 0 && s.row < kTileRows && s.col >= 0 && s.col < kBlockK);
        ++seen[s.row * kBlockK + s.col];
      }
  for (int i = 0; i < kTileRows * kBlockK; ++i) ASSERT_EQ(seen[i], 1) << "value " << i;
  std::vector<int> scale_seen(kTileRows * kSteps, 0);
  for (int quad = 0; quad < 64; ++quad)
    for (int b = 0; b < 8; ++b) {
      const Src s = scale_source(quad, b);
      ASSERT_TRUE(s.row >= 0 && s.row < kTileRows && s.col >= 0 && s.col < kSteps);
      ++scale_seen[s.row * kSteps + s.col];
    }
  for (int i = 0; i < kTileRows * kSteps; ++i) ASSERT_EQ(scale_seen[i], 1) << "scale " << i;
  // Words of distinct (thread, step) at distinct 4-byte offsets inside the values.
  std::vector<int> word_seen(kValueBytes / 4, 0);
  for (int t = 0; t < 256; ++t)
    for (int step = 0; step < kSteps; ++step) ++word_seen[value_word_offset(t, step) / 4];
  for (int w : word_seen) ASSERT_EQ(w, 1);
}

// The 8 codes of a word use its 32 bits once each, and take_code inverts place_code.
TEST(E2M1Layout, CodesPartitionTheWord) {
  uint32_t used = 0;
  for (int n = 0; n < 8; ++n) {
    const uint32_t bits = place_code(n, 0xF);
    EXPECT_EQ(__builtin_popcount(bits), 4) << n;
    EXPECT_EQ(used & bits, 0u) << n;
    used |= bits;
    for (uint32_t c = 0; c < 16; ++c) EXPECT_EQ(take_code(place_code(n, c) | ~bits, n), c) << n;
  }
  EXPECT_EQ(used, 0xFFFFFFFFu);
}

// The A fragment of wgmma m64nNk16 (bf16, A from registers), written from the PTX ISA's figure
// independently of the layout's code: register p of thread (warp, lane) holds row
// 16 warp + lane/4 (+8 for p = 1, 3), columns 2(lane%4) + {0, 1} (+8 for p = 2, 3).
TEST(E2M1Layout, WordsHoldTheWgmmaAFragments) {
  for (int t = 0; t < 256; ++t) {
    const int wgc = t / 128, warp = (t / 32) % 4, lane = t % 32;
    for (int step = 0; step < kSteps; ++step)
      for (int p = 0; p < 4; ++p)
        for (int elem = 0; elem < 2; ++elem) {
          const int row = 64 * wgc + 16 * warp + lane / 4 + (p == 1 || p == 3 ? 8 : 0);
          const int col = 16 * step + 2 * (lane % 4) + elem + (p >= 2 ? 8 : 0);
          // decode_pair(word, p) reads codes p (low element) and p + 4 (high).
          const int n = p + 4 * elem;
          const Src s = value_source(t, step, n);
          EXPECT_EQ(s.row, row) << "t " << t << " step " << step << " p " << p << " elem " << elem;
          EXPECT_EQ(s.col, col) << "t " << t << " step " << step << " p " << p << " elem " << elem;
        }
    // The quad's scale bytes are those of this thread's rows.
    const int quad = thread_quad(t);
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_EQ(scale_source(quad, 2 * step).row, 64 * wgc + 16 * warp + lane / 4);
      EXPECT_EQ(scale_source(quad, 2 * step + 1).row, 64 * wgc + 16 * warp + lane / 4 + 8);
      EXPECT_EQ(scale_source(quad, 2 * step).col, step);
    }
  }
}

// Every code pair at every register position, times every finite non-negative scale: the bf16
// product of the two decoded operands is exactly value * scale * 2^-26.
TEST(E2M1Layout, DecodeIsExactForEveryCodeAndScale) {
  const double unit = std::ldexp(1.0, -kProductShift);
  for (int sc = 0; sc < 0x7F; ++sc) {  // 0x7F is NaN; negative scales are refused by prepare
    const float scale = fmt::e4m3_to_float(uint8_t(sc));
    const uint32_t s2 = scale_pair(uint32_t(scale_code(uint8_t(sc))) * 0x10001u);  // (scale, scale)
    const double s_lo = bf16_lo(s2), s_hi = bf16_hi(s2);
    ASSERT_EQ(s_lo, s_hi);
    if (sc != 0) {
      ASSERT_EQ(s_lo, double(scale) * std::ldexp(1.0, 100)) << "scale code " << sc;
    }
    for (int lo = 0; lo < 16; ++lo)
      for (int hi = 0; hi < 16; ++hi)
        for (int p = 0; p < 4; ++p) {
          // Place the pair where register p reads it; fill the other nibbles with junk.
          const uint32_t junk = 0x5A3C96E1u;
          const int n_lo = p, n_hi = p + 4;
          uint32_t word = junk & ~(place_code(n_lo, 0xF) | place_code(n_hi, 0xF));
          word |= place_code(n_lo, uint32_t(lo)) | place_code(n_hi, uint32_t(hi));
          const uint32_t a = decode_pair(word, p);
          const double raw_lo = bf16_lo(a), raw_hi = bf16_hi(a);
          ASSERT_EQ(raw_lo, double(fmt::e2m1_to_float(uint8_t(lo))) * std::ldexp(1.0, -126));
          ASSERT_EQ(raw_hi, double(fmt::e2m1_to_float(uint8_t(hi))) * std::ldexp(1.0, -126));
          if (sc == 0) continue;  // prepare zeroes the codes of a zero-scale block
          const double prod_lo = raw_lo * s_lo, prod_hi = raw_hi * s_hi;  // exact in double
          ASSERT_TRUE(is_bf16(prod_lo)) << lo << " x scale " << sc;
          ASSERT_TRUE(is_bf16(prod_hi)) << hi << " x scale " << sc;
          ASSERT_EQ(prod_lo, double(fmt::e2m1_to_float(uint8_t(lo))) * scale * unit);
          ASSERT_EQ(prod_hi, double(fmt::e2m1_to_float(uint8_t(hi))) * scale * unit);
          // The smallest nonzero product stays a normal bf16 (no flush, no rounding).
          if (prod_lo != 0) {
            ASSERT_GE(std::fabs(prod_lo), std::ldexp(1.0, -126));
          }
        }
  }
}

// The prepared scale byte of every finite non-negative E4M3 code decodes to that scale * 2^100
// in both halves of the pair, and the 0x00cc00cc spread the kernel's byte permute makes is what
// multiplying the byte by 0x10001 gives.
TEST(E2M1Layout, ScaleCodesDecodeToEveryE4M3Scale) {
  for (int sc = 1; sc < 0x7F; ++sc) {
    const uint8_t c = scale_code(uint8_t(sc));
    ASSERT_LE(c, 0x8E) << sc;  // 5 exponent bits used up to 17: no carry into the sign bit
    const uint32_t pair = scale_pair(uint32_t(c) * 0x10001u);
    EXPECT_EQ(double(bf16_lo(pair)), double(fmt::e4m3_to_float(uint8_t(sc))) * std::ldexp(1.0, 100)) << sc;
    EXPECT_EQ(pair >> 16, pair & 0xFFFFu) << sc;
  }
  EXPECT_EQ(scale_code(0), 0);
}

// The kernels' decode spreads a k16 step's two scale bytes (rows r0 and r1) into one pair,
// 0x00bb00aa, and each multiply reads its row's half: each half must equal that byte's own (s, s)
// pair's, for every two prepared bytes (no carry from the low half into the high one).
TEST(E2M1Layout, TwoScaleBytesInOnePairDecodeIndependently) {
  std::vector<uint32_t> codes;
  for (int sc = 0; sc < 0x7F; ++sc) codes.push_back(scale_code(uint8_t(sc)));
  for (uint32_t a : codes)
    for (uint32_t b : codes) {
      const uint32_t pair = scale_pair(a | b << 16);
      ASSERT_EQ(pair & 0xFFFFu, scale_pair(a * 0x10001u) & 0xFFFFu) << a << " " << b;
      ASSERT_EQ(pair >> 16, scale_pair(b * 0x10001u) >> 16) << a << " " << b;
    }
}

// A random ModelOpt block (packed [128, 32] bytes, even element in the low nibble; scales
// [128, 4]) re-laid as the kernels read it and decoded back: every element equals the
// dequantized value times 2^-26.
TEST(E2M1Layout, RoundTripOfARandomBlock) {
  std::mt19937 rng(20261124);
  std::vector<uint8_t> packed(kTileRows * kBlockK / 2), scales(kTileRows * kSteps);
  for (auto& b : packed) b = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(rng() % 0x7F);
  auto code = [&](int row, int col) {
    const uint8_t b = packed[row * (kBlockK / 2) + col / 2];
    return col % 2 == 0 ? b & 0xF : b >> 4;
  };
  std::vector<uint8_t> block(kBlockBytes);
  for (int t = 0; t < 256; ++t)
    for (int step = 0; step < kSteps; ++step) {
      uint32_t word = 0;
      for (int n = 0; n < 8; ++n) {
        const Src s = value_source(t, step, n);
        word |= place_code(n, uint32_t(code(s.row, s.col)));
      }
      std::memcpy(&block[value_word_offset(t, step)], &word, 4);
    }
  for (int quad = 0; quad < 64; ++quad)
    for (int b = 0; b < 8; ++b) {
      const Src s = scale_source(quad, b);
      block[kValueBytes + 8 * quad + b] = scale_code(scales[s.row * kSteps + s.col]);
    }
  const double unit = std::ldexp(1.0, -kProductShift);
  for (int t = 0; t < 256; ++t) {
    const int wgc = t / 128, warp = (t / 32) % 4, lane = t % 32;
    const uint8_t* sb = &block[kValueBytes + 8 * thread_quad(t)];
    for (int step = 0; step < kSteps; ++step) {
      uint32_t word;
      std::memcpy(&word, &block[value_word_offset(t, step)], 4);
      // The step's two prepared bytes (r0, r1), each spread over a pair as the byte permute does.
      const uint32_t s0 = scale_pair(uint32_t(sb[2 * step]) * 0x10001u);
      const uint32_t s1 = scale_pair(uint32_t(sb[2 * step + 1]) * 0x10001u);
      for (int p = 0; p < 4; ++p) {
        const int row = 64 * wgc + 16 * warp + lane / 4 + (p % 2 == 1 ? 8 : 0);
        const double s = bf16_lo(p % 2 == 1 ? s1 : s0);
        const uint32_t a = decode_pair(word, p);
        for (int elem = 0; elem < 2; ++elem) {
          const int col = 16 * step + 2 * (lane % 4) + elem + (p >= 2 ? 8 : 0);
          const double got = (elem == 0 ? bf16_lo(a) : bf16_hi(a)) * s;
          const uint8_t sc = scales[row * kSteps + step];
          const double want = sc == 0 ? 0.0
              : double(fmt::e2m1_to_float(uint8_t(code(row, col)))) * fmt::e4m3_to_float(sc) * unit;
          if (sc == 0) continue;  // codes zeroed by prepare: not this test's job
          ASSERT_EQ(got, want) << "row " << row << " col " << col;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fusedmoe::detail::e2m1
