// Quantized operands and the grouped GEMM reference.
#include <algorithm>
#include <cmath>
#include <functional>

#include "common/parallel.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "gemm/e2m1_layout.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {
namespace {

struct DecodeTables {
  double e4m3[256];
  double e2m1_times_e4m3[16][256];  // nvfp4: e2m1 * e4m3 is exact in fp32 and in double
  DecodeTables() {
    for (int c = 0; c < 256; ++c) e4m3[c] = double(fmt::e4m3_to_float(uint8_t(c)));
    for (int v = 0; v < 16; ++v)
      for (int s = 0; s < 256; ++s)
        e2m1_times_e4m3[v][s] = double(fmt::e2m1_to_float(uint8_t(v))) * e4m3[s];
  }
};
const DecodeTables& tables() {
  static const DecodeTables t;
  return t;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

void WeightSet::decode_row(int e, int n, double* out) const {
  const DecodeTables& tb = tables();
  const int64_t row = int64_t(e) * N + n;
  switch (precision) {
    case Precision::bf16: {
      const uint16_t* src = bf16.data() + row * K;
      for (int k = 0; k < K; ++k) out[k] = double(fmt::bf16_to_float(src[k]));
      return;
    }
    case Precision::fp8_block: {
      const uint8_t* src = q.data() + row * K;
      const int64_t nbk = cdiv(K, 128);
      const float* s = scale.data() + (int64_t(e) * cdiv(N, 128) + n / 128) * nbk;
      for (int k = 0; k < K; ++k) out[k] = tb.e4m3[src[k]] * double(s[k / 128]);
      return;
    }
    case Precision::nvfp4: {
      const uint8_t* src = q.data() + row * (K / 2);
      const uint8_t* bs = block_scale.data() + row * (K / 16);
      const int G = global_groups;
      const double g = double(global_scale[size_t(e) * G + size_t(int64_t(n) * G / N)]);
      for (int k = 0; k < K; k += 2) {
        const uint8_t byte = src[k / 2], sc = bs[k / 16];
        out[k] = tb.e2m1_times_e4m3[byte & 0xF][sc] * g;
        out[k + 1] = tb.e2m1_times_e4m3[byte >> 4][sc] * g;
      }
      return;
    }
    case Precision::mxfp4: {
      // The values the kernel multiplies: each UE8M0 scale as its E4M3 slot relative to the
      // row's largest (src/gemm/e2m1_layout.hpp), so a block more than 17 binades below the
      // row's largest is zero here too.
      const uint8_t* src = q.data() + row * (K / 2);
      const uint8_t* bs = block_scale.data() + row * (K / 32);
      int row_max = 0;
      for (int b = 0; b < K / 32; ++b) row_max = std::max(row_max, int(bs[b]));
      const double factor = std::ldexp(1.0, detail::e2m1::mx_row_factor_log2(row_max));
      for (int k = 0; k < K; k += 2) {
        const uint8_t byte = src[k / 2];
        const uint8_t sc = bs[k / 32] == 0xFF ? uint8_t(0x7F)  // NaN stays NaN
                                              : detail::e2m1::mx_scale_slot(bs[k / 32], row_max);
        out[k] = tb.e2m1_times_e4m3[byte & 0xF][sc] * factor;
        out[k + 1] = tb.e2m1_times_e4m3[byte >> 4][sc] * factor;
      }
      return;
    }
  }
}

size_t WeightSet::bytes_per_expert() const {
  switch (precision) {
    case Precision::bf16: return size_t(N) * K * 2;
    case Precision::fp8_block: return size_t(N) * K + size_t(cdiv(N, 128) * cdiv(K, 128)) * 4;
    case Precision::nvfp4: return size_t(N) * (K / 2) + size_t(N) * (K / 16) + 4 * size_t(global_groups);
    case Precision::mxfp4: return size_t(N) * (K / 2) + size_t(N) * (K / 32);
  }
  return 0;
}

WeightSet make_weights(Precision p, int E, int N, int K,
                       const std::function<void(int, float*)>& expert_values,
                       const ProgressFn& progress) {
  FMOE_REQUIRE(E >= 0 && N >= 0 && K >= 0, "ref::make_weights: E=%d N=%d K=%d", E, N, K);
  FMOE_REQUIRE(p != Precision::nvfp4 || K % 16 == 0,
               "ref::make_weights: nvfp4 needs K a multiple of 16, got %d", K);
  FMOE_REQUIRE(p != Precision::mxfp4 || K % 32 == 0,
               "ref::make_weights: mxfp4 needs K a multiple of 32, got %d", K);
  WeightSet ws;
  ws.precision = p;
  ws.E = E;
  ws.N = N;
  ws.K = K;
  const int64_t per = int64_t(N) * K;
  const int64_t ns = cdiv(N, 128) * cdiv(K, 128);
  switch (p) {
    case Precision::bf16: ws.bf16.resize(size_t(E * per)); break;
    case Precision::fp8_block:
      ws.q.resize(size_t(E * per));
      ws.scale.resize(size_t(E * ns));
      break;
    case Precision::nvfp4:
      ws.q.resize(size_t(E * per / 2));
      ws.block_scale.resize(size_t(E * per / 16));
      ws.global_scale.resize(size_t(E));
      break;
    case Precision::mxfp4:
      ws.q.resize(size_t(E * per / 2));
      ws.block_scale.resize(size_t(E * per / 32));
      break;
  }
  // One expert at a time: the float copy of a whole model's experts would not fit in memory.
  std::vector<float> buf(static_cast<size_t>(per));
  for (int e = 0; e < E; ++e) {
    expert_values(e, buf.data());
    const float* w = buf.data();
    switch (p) {
      case Precision::bf16:
        detail::parallel_for(per, [&](int64_t b, int64_t end) {
          for (int64_t i = b; i < end; ++i) ws.bf16[size_t(e * per + i)] = fmt::bf16_from_float(w[i]);
        }, 1 << 16);
        break;
      case Precision::fp8_block:
        fmt::quantize_fp8_block_128x128(w, N, K, ws.q.data() + e * per, ws.scale.data() + e * ns);
        break;
      case Precision::nvfp4: {
        const float g = fmt::nvfp4_global_scale(fmt::abs_max(w, per));
        ws.global_scale[size_t(e)] = g;
        fmt::quantize_nvfp4(w, N, K, g, ws.q.data() + e * per / 2,
                            ws.block_scale.data() + e * per / 16);
        break;
      }
      case Precision::mxfp4:
        fmt::quantize_mxfp4(w, N, K, ws.q.data() + e * per / 2, ws.block_scale.data() + e * per / 32);
        break;
    }
    if (progress) progress(e + 1, E);
  }
  return ws;
}

WeightSet make_weights(Precision p, const float* w, int E, int N, int K) {
  const int64_t per = int64_t(N) * K;
  return make_weights(p, E, N, K, [&](int e, float* out) {
    std::copy(w + e * per, w + (e + 1) * per, out);
  });
}

void ActRows::decode_row(int m, double* out) const {
  const DecodeTables& tb = tables();
  switch (precision) {
    case Precision::bf16: {
      const uint16_t* src = bf16.data() + int64_t(m) * K;
      for (int k = 0; k < K; ++k) out[k] = double(fmt::bf16_to_float(src[k]));
      return;
    }
    case Precision::fp8_block: {
      const uint8_t* src = q.data() + int64_t(m) * K;
      const float* s = scale.data() + int64_t(m) * cdiv(K, block);
      for (int k = 0; k < K; ++k) out[k] = tb.e4m3[src[k]] * double(s[k / block]);
      return;
    }
    case Precision::nvfp4: {
      const uint8_t* src = q.data() + int64_t(m) * (K / 2);
      const uint8_t* bs = block_scale.data() + int64_t(m) * (K / 16);
      const double g = double(global_scale);
      for (int k = 0; k < K; k += 2) {
        const uint8_t byte = src[k / 2], sc = bs[k / 16];
        out[k] = tb.e2m1_times_e4m3[byte & 0xF][sc] * g;
        out[k + 1] = tb.e2m1_times_e4m3[byte >> 4][sc] * g;
      }
      return;
    }
    case Precision::mxfp4: break;  // make_acts refuses it
  }
}

ActRows make_acts(Precision p, const float* x, int M, int K, float nvfp4_global, int fp8_block) {
  ActRows a;
  a.precision = p;
  a.M = M;
  a.K = K;
  const int64_t n = int64_t(M) * K;
  switch (p) {
    case Precision::bf16:
      a.bf16.resize(size_t(n));
      for (int64_t i = 0; i < n; ++i) a.bf16[size_t(i)] = fmt::bf16_from_float(x[i]);
      break;
    case Precision::fp8_block:
      a.block = fp8_block;
      a.q.resize(size_t(n));
      a.scale.resize(size_t(int64_t(M) * cdiv(K, fp8_block)));
      fmt::quantize_fp8_per_token(x, M, K, fp8_block, a.q.data(), a.scale.data());
      break;
    case Precision::nvfp4:
      FMOE_REQUIRE(K % 16 == 0, "ref::make_acts: nvfp4 needs K a multiple of 16, got %d", K);
      a.global_scale = nvfp4_global > 0 ? nvfp4_global : fmt::nvfp4_global_scale(fmt::abs_max(x, n));
      a.q.resize(size_t(n / 2));
      a.block_scale.resize(size_t(n / 16));
      fmt::quantize_nvfp4(x, M, K, a.global_scale, a.q.data(), a.block_scale.data());
      break;
    case Precision::mxfp4:
      FMOE_REQUIRE(false, "ref::make_acts: mxfp4 is a weight format here (activations bf16)");
  }
  return a;
}

GemmResult grouped_gemm(const ActRows& a, const WeightSet& w, const int32_t* offsets,
                        bool want_abs_sum) {
  FMOE_REQUIRE(a.K == w.K, "ref::grouped_gemm: A has K=%d, weights K=%d", a.K, w.K);
  FMOE_REQUIRE(offsets[0] == 0 && offsets[w.E] == a.M,
               "ref::grouped_gemm: offsets must span [0, %d), got [%d, %d)", a.M, offsets[0],
               offsets[w.E]);
  const int K = a.K, N = w.N;
  GemmResult r;
  r.rows = a.M;
  r.cols = N;
  r.value.assign(size_t(a.M) * N, 0.0);
  if (want_abs_sum) r.abs_sum.assign(size_t(a.M) * N, 0.0);

  // Work item: (expert, block of kNBlock weight rows). Each decodes its expert's A rows in
  // chunks of kMChunk (so memory stays bounded for any row count), then streams its weight rows.
  constexpr int kNBlock = 64, kMChunk = 64;
  const int nblocks = int(cdiv(N, kNBlock));
  std::vector<int> items;
  for (int e = 0; e < w.E; ++e)
    if (offsets[e + 1] > offsets[e])
      for (int b = 0; b < nblocks; ++b) items.push_back(e * nblocks + b);

  detail::parallel_for(int64_t(items.size()), [&](int64_t i0, int64_t i1) {
    std::vector<double> a_buf(size_t(kMChunk) * K), w_row(static_cast<size_t>(K));
    for (int64_t it = i0; it < i1; ++it) {
      const int e = items[size_t(it)] / nblocks, b = items[size_t(it)] % nblocks;
      const int n0 = b * kNBlock, n1 = std::min(N, n0 + kNBlock);
      for (int m0 = offsets[e]; m0 < offsets[e + 1]; m0 += kMChunk) {
        const int m1 = std::min(offsets[e + 1], m0 + kMChunk);
        for (int m = m0; m < m1; ++m) a.decode_row(m, a_buf.data() + size_t(m - m0) * K);
        for (int n = n0; n < n1; ++n) {
          w.decode_row(e, n, w_row.data());
          const double* wr = w_row.data();
          for (int m = m0; m < m1; ++m) {
            const double* ar = a_buf.data() + size_t(m - m0) * K;
            // Four fixed partial sums: vectorizable and still one fixed summation order.
            double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
            int k = 0;
            for (; k + 4 <= K; k += 4) {
              s0 += ar[k] * wr[k];
              s1 += ar[k + 1] * wr[k + 1];
              s2 += ar[k + 2] * wr[k + 2];
              s3 += ar[k + 3] * wr[k + 3];
            }
            for (; k < K; ++k) s0 += ar[k] * wr[k];
            r.value[size_t(m) * N + n] = (s0 + s1) + (s2 + s3);
            if (want_abs_sum) {
              double t = 0;
              for (int kk = 0; kk < K; ++kk) t += std::fabs(ar[kk] * wr[kk]);
              r.abs_sum[size_t(m) * N + n] = t;
            }
          }
        }
      }
    }
  });
  return r;
}

}  // namespace fusedmoe::ref
