// The re-layout of 4-bit weights (NVFP4, MXFP4) into the e2m1 blocks of src/gemm/e2m1_layout.hpp
// on the host: the oracle of the device re-layout MoeLayer runs (layer/prepare.hpp:
// launch_e2m1_prepare; tests/layer/test_e2m1_prepare_gpu.cpp compares the two byte for byte).
// Host only (no CUDA): the CPU test (tests/layer/test_e2m1_prepare.cpp) checks fill_e2m1_blocks
// against the layout's own per-nibble definition.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace fusedmoe::detail {

/// One 4-bit matrix on the host: codes [rows, K/2] (two E2M1 per byte, even element in the low
/// nibble: ModelOpt / gpt-oss) and E4M3 scales [rows, K/16]. For MXFP4 the scales are the UE8M0
/// ones moved into E4M3 slots relative to each row's largest, and row_log2 holds each row's
/// factor (e2m1_layout.hpp).
struct E2m1Host {
  const char* name = "";
  std::vector<uint8_t> codes, scales;
  int64_t K = 0;
  std::vector<int> row_log2;  // mxfp4 only
  uint8_t code(int64_t row, int64_t col) const {
    const uint8_t b = codes[size_t(row * (K / 2) + col / 2)];
    return col % 2 ? b >> 4 : b & 0xF;
  }
  uint8_t scale(int64_t row, int64_t col) const { return scales[size_t(row * (K / 16) + col / 16)]; }
};

/// Where prepared row `r` of a tile comes from: a matrix, its row, and the source columns
/// [col0, col0 + ncols) that fill prepared columns [0, ncols) (the rest is zero; col0 a multiple
/// of 16); row -1 is padding.
struct E2m1RowSource {
  const E2m1Host* m = nullptr;
  int64_t row = -1, col0 = 0, ncols = 0;
};

/// The e2m1 blocks [tiles, KB] of 128 prepared rows x 64 columns, each kBlockBytes
/// (e2m1_layout.hpp), rows taken from `source(tile, row)`; on the host threads. A code whose
/// 16-block scale is zero is stored as zero (the decode turns a zero scale into a large power of
/// two, so a code under it must not be left non-zero).
std::vector<uint8_t> fill_e2m1_blocks(int64_t tiles, int KB,
                                      const std::function<E2m1RowSource(int64_t tile, int row)>& source);

/// MXFP4 scales [rows, K/32] (UE8M0 codes, none 0xFF) to the E4M3 slots [rows, K/16] and each
/// row's factor (e2m1_layout.hpp: mx_scale_slot, mx_row_factor_log2), on the host threads.
void mx_scales_to_slots(const uint8_t* mx, int64_t rows, int64_t K, uint8_t* slots, int* row_log2);

}  // namespace fusedmoe::detail
