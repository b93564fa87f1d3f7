// Host re-layout of 4-bit weights into e2m1 blocks (see e2m1_prepare.hpp).
//
// Speed: a DeepSeek-V3 layer is ~11e9 nibbles. The layout maps each (thread, k16 step, nibble) to a
// (row, column); evaluating that map, the nibble's row and its scale per nibble cost 4.5-6 ns a
// nibble on one core (the 2-core development machine, tests/layer/test_e2m1_prepare.cpp prints
// both). Here the map is inverted once into a table (row, column) -> (word, code slot), each row's
// codes are read as bytes along the row and each 16-column scale is looked at once: 1.4-1.7 ns a
// nibble, 3-4x less. MoeLayer uses the device kernel (layer/prepare.hpp); this is its oracle.
#include "layer/e2m1_prepare.hpp"

#include <algorithm>
#include <cstring>

#include "common/parallel.hpp"
#include "gemm/e2m1_layout.hpp"

namespace fusedmoe::detail {
namespace {

using namespace e2m1;

// Where each (row, column) of a 128 x 64 block goes: word index (thread * kSteps + step, the
// word at value_word_offset) and which of the word's 8 codes it is; the word bits of each code
// value in each of those places; where each scale byte comes from.
struct BlockMap {
  uint16_t word[kTileRows][kBlockK];
  uint8_t slot[kTileRows][kBlockK];
  uint32_t bits[8][16];  // place_code(slot, code)
  uint8_t scale_row[kScaleBytes], scale_col16[kScaleBytes];
  BlockMap() {
    for (int t = 0; t < 256; ++t)
      for (int step = 0; step < kSteps; ++step)
        for (int n = 0; n < 8; ++n) {
          const Src v = value_source(t, step, n);
          word[v.row][v.col] = uint16_t(value_word_offset(t, step) / 4);
          slot[v.row][v.col] = uint8_t(n);
        }
    for (int n = 0; n < 8; ++n)
      for (int code = 0; code < 16; ++code) bits[n][code] = place_code(n, uint32_t(code));
    for (int quad = 0; quad < 64; ++quad)
      for (int b = 0; b < 8; ++b) {
        const Src sc = scale_source(quad, b);
        scale_row[8 * quad + b] = uint8_t(sc.row);
        scale_col16[8 * quad + b] = uint8_t(sc.col);  // the k16 step: 16-column group
      }
  }
};
const BlockMap& block_map() {
  static const BlockMap m;
  return m;
}

}  // namespace

std::vector<uint8_t> fill_e2m1_blocks(int64_t tiles, int KB,
                                      const std::function<E2m1RowSource(int64_t tile, int row)>& source) {
  const BlockMap& map = block_map();
  std::vector<uint8_t> out(size_t(tiles) * KB * kBlockBytes);
  parallel_for(tiles, [&](int64_t t0, int64_t t1) {
    std::vector<E2m1RowSource> rows(kTileRows);
    uint32_t words[kValueBytes / 4];
    uint8_t scales[kTileRows][kSteps];  // this k-block's 16-column scales of each row
    for (int64_t tile = t0; tile < t1; ++tile) {
      for (int r = 0; r < kTileRows; ++r) rows[r] = source(tile, r);
      for (int kb = 0; kb < KB; ++kb) {
        std::memset(words, 0, sizeof(words));
        std::memset(scales, 0, sizeof(scales));
        const int64_t c0 = int64_t(kb) * kBlockK;  // prepared column of the block's first value
        for (int r = 0; r < kTileRows; ++r) {
          const E2m1RowSource& s = rows[r];
          if (s.row < 0 || c0 >= s.ncols) continue;
          const int width = int(std::min<int64_t>(kBlockK, s.ncols - c0));  // a multiple of 16
          const int64_t src_col = s.col0 + c0;  // even: col0 and c0 are multiples of 16
          const uint8_t* codes = s.m->codes.data() + size_t(s.row * (s.m->K / 2) + src_col / 2);
          for (int g = 0; g < width / 16; ++g) {
            const uint8_t sc = s.m->scale(s.row, src_col + 16 * g);
            scales[r][g] = sc;
            if (sc == 0) continue;  // codes under a zero scale stay zero
            for (int c = 16 * g; c < 16 * g + 16; c += 2) {
              const uint8_t byte = codes[c / 2];
              words[map.word[r][c]] |= map.bits[map.slot[r][c]][byte & 0xF];
              words[map.word[r][c + 1]] |= map.bits[map.slot[r][c + 1]][byte >> 4];
            }
          }
        }
        uint8_t* blk = out.data() + (size_t(tile) * KB + kb) * kBlockBytes;
        std::memcpy(blk, words, sizeof(words));
        for (int i = 0; i < kScaleBytes; ++i)
          blk[kValueBytes + i] = scale_code(scales[map.scale_row[i]][map.scale_col16[i]]);
      }
    }
  });
  return out;
}

void mx_scales_to_slots(const uint8_t* mx, int64_t rows, int64_t K, uint8_t* slots, int* row_log2) {
  const int64_t per_row = K / 32;
  parallel_for(rows, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* src = mx + r * per_row;
      int row_max = 0;
      for (int64_t b = 0; b < per_row; ++b) row_max = std::max(row_max, int(src[b]));
      row_log2[r] = mx_row_factor_log2(row_max);
      for (int64_t b = 0; b < per_row; ++b) {
        const uint8_t slot = mx_scale_slot(src[b], row_max);
        slots[r * (K / 16) + 2 * b] = slot;
        slots[r * (K / 16) + 2 * b + 1] = slot;
      }
    }
  }, 64);
}

}  // namespace fusedmoe::detail
