// The NVFP4 x NVFP4 grouped GEMM reference (ref/ref.hpp, nvfp4_grouped_gemm): the oracle of
// include/fusedmoe/grouped_gemm.hpp.
//
// Every product e2m1 * e4m3 is exact in double (at most 6 significant bits per factor), and so is
// the product of two such values, so the only rounding here is the float64 sum and the one final
// rounding to fp32: a GPU tolerance covers its own accumulation and output rounding only.
#include <algorithm>
#include <cmath>

#include "common/parallel.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {
namespace {

// e2m1(code) * e4m3(scale) for every (code, scale code): the decode is a table lookup, which keeps
// the reference fast enough for the benchmark-sized shapes a test might want to spot-check.
struct Nvfp4Table {
  double value[16][256];
  Nvfp4Table() {
    for (int v = 0; v < 16; ++v)
      for (int s = 0; s < 256; ++s)
        value[v][s] = double(fmt::e2m1_to_float(uint8_t(v))) * double(fmt::e4m3_to_float(uint8_t(s)));
  }
};
const Nvfp4Table& nvfp4_table() {
  static const Nvfp4Table t;
  return t;
}

// One row of K values: packed [K/2] codes, scales [K/16] e4m3 codes; out[K] (no global scale:
// it goes on the sum, as the kernel applies it).
void decode_row(const uint8_t* packed, const uint8_t* scales, int K, double* out) {
  const Nvfp4Table& tb = nvfp4_table();
  for (int k = 0; k < K; k += 2) {
    const uint8_t byte = packed[k / 2], sc = scales[k / 16];
    out[k] = tb.value[byte & 0xF][sc];
    out[k + 1] = tb.value[byte >> 4][sc];
  }
}

}  // namespace

std::vector<float> nvfp4_grouped_gemm(const uint8_t* a, const uint8_t* a_scale, const float* a_global,
                                      const int32_t* offsets, int G, int M, const uint8_t* b,
                                      const uint8_t* b_scale, const float* b_global, int N, int K) {
  FMOE_REQUIRE(G >= 1 && M >= 0 && N >= 0 && K >= 0 && K % 16 == 0,
               "ref::nvfp4_grouped_gemm: needs G >= 1, M, N >= 0 and K a multiple of 16, got "
               "G=%d M=%d N=%d K=%d", G, M, N, K);
  FMOE_REQUIRE(b_global != nullptr, "ref::nvfp4_grouped_gemm: b_global [%d] is required", G);
  // The contract assumes valid offsets; this only keeps a wrong test from reading out of bounds.
  for (int g = 0; g <= G; ++g)
    FMOE_REQUIRE(offsets[g] >= (g == 0 ? 0 : offsets[g - 1]) && offsets[g] <= M,
                 "ref::nvfp4_grouped_gemm: offsets[%d]=%d must be in [%d, %d] (M=%d)", g, offsets[g],
                 g == 0 ? 0 : offsets[g - 1], M, M);
  std::vector<float> c(size_t(M) * size_t(N), 0.0f);
  if (N == 0) return c;

  // Work item: (group, block of kNBlock rows of B). Each decodes its group's A rows in chunks of
  // kMChunk (memory stays bounded for any M) and streams its B rows once per chunk, so a B row is
  // decoded ceil(M_g / kMChunk) times rather than M_g times.
  constexpr int kNBlock = 64, kMChunk = 64;
  const int n_blocks = (N + kNBlock - 1) / kNBlock;
  std::vector<int> items;
  for (int g = 0; g < G; ++g)
    if (offsets[g + 1] > offsets[g])
      for (int blk = 0; blk < n_blocks; ++blk) items.push_back(g * n_blocks + blk);

  const size_t a_row_bytes = size_t(K / 2), a_row_scales = size_t(K / 16);
  detail::parallel_for(int64_t(items.size()), [&](int64_t i0, int64_t i1) {
    std::vector<double> a_buf(size_t(kMChunk) * size_t(K)), b_row(static_cast<size_t>(K));
    for (int64_t it = i0; it < i1; ++it) {
      const int g = items[size_t(it)] / n_blocks, blk = items[size_t(it)] % n_blocks;
      const int n0 = blk * kNBlock, n1 = std::min(N, n0 + kNBlock);
      // ag * bg is exact in double (two 24-bit significands).
      const double global = (a_global ? double(a_global[g]) : 1.0) * double(b_global[g]);
      for (int m0 = offsets[g]; m0 < offsets[g + 1]; m0 += kMChunk) {
        const int m1 = std::min(offsets[g + 1], m0 + kMChunk);
        for (int m = m0; m < m1; ++m)
          decode_row(a + size_t(m) * a_row_bytes, a_scale + size_t(m) * a_row_scales, K,
                     a_buf.data() + size_t(m - m0) * K);
        for (int n = n0; n < n1; ++n) {
          const size_t b_row_idx = size_t(g) * size_t(N) + size_t(n);
          decode_row(b + b_row_idx * a_row_bytes, b_scale + b_row_idx * a_row_scales, K, b_row.data());
          const double* br = b_row.data();
          for (int m = m0; m < m1; ++m) {
            const double* ar = a_buf.data() + size_t(m - m0) * K;
            // Four fixed partial sums: vectorizable and still one fixed summation order.
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            for (int k = 0; k < K; k += 4) {  // K % 16 == 0
              s0 += ar[k] * br[k];
              s1 += ar[k + 1] * br[k + 1];
              s2 += ar[k + 2] * br[k + 2];
              s3 += ar[k + 3] * br[k + 3];
            }
            c[size_t(m) * N + n] = float(global * ((s0 + s1) + (s2 + s3)));
          }
        }
      }
    }
  });
  return c;
}

}  // namespace fusedmoe::ref
