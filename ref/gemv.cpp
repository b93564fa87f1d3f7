// The NVFP4 GEMV reference (ref/gemv_ref.hpp).
#include <cmath>

#include "common/parallel.hpp"
#include "fusedmoe/error.hpp"
#include "ref/gemv_ref.hpp"

namespace fusedmoe::ref {
namespace {

// sum_k a[k] * b[k] and sum_k |a[k] * b[k]|, in order.
void dot(const double* a, const double* b, int K, double& value, double& abs_sum) {
  double s = 0, t = 0;
  for (int k = 0; k < K; ++k) {
    const double p = a[k] * b[k];
    s += p;
    t += std::fabs(p);
  }
  value = s;
  abs_sum = t;
}

GemvResult zeros(int rows, int cols) {
  GemvResult r;
  r.rows = rows;
  r.cols = cols;
  r.value.assign(size_t(rows) * size_t(cols), 0.0);
  r.abs_sum.assign(size_t(rows) * size_t(cols), 0.0);
  return r;
}

}  // namespace

GemvResult gemv(const WeightSet& a, const WeightSet* b_nvfp4, const ActRows* b_bf16) {
  FMOE_REQUIRE(a.precision == Precision::nvfp4, "ref::gemv: A must be NVFP4");
  FMOE_REQUIRE((b_nvfp4 != nullptr) != (b_bf16 != nullptr), "ref::gemv: give exactly one b");
  const int L = a.E, M = a.N, K = a.K;
  if (b_nvfp4)
    FMOE_REQUIRE(b_nvfp4->precision == Precision::nvfp4 && b_nvfp4->E == L && b_nvfp4->N == 1 &&
                     b_nvfp4->K == K,
                 "ref::gemv: NVFP4 b must be %d vectors of %d", L, K);
  else
    FMOE_REQUIRE(b_bf16->precision == Precision::bf16 && b_bf16->M == L && b_bf16->K == K,
                 "ref::gemv: bf16 b must be %d rows of %d", L, K);
  GemvResult r = zeros(L, M);
  for (int l = 0; l < L; ++l) {
    std::vector<double> b(static_cast<size_t>(K));
    if (b_nvfp4) b_nvfp4->decode_row(l, 0, b.data());
    else b_bf16->decode_row(l, b.data());
    detail::parallel_for(M, [&](int64_t m0, int64_t m1) {
      std::vector<double> row(static_cast<size_t>(K));
      for (int64_t m = m0; m < m1; ++m) {
        a.decode_row(l, int(m), row.data());
        const size_t o = size_t(l) * M + size_t(m);
        dot(row.data(), b.data(), K, r.value[o], r.abs_sum[o]);
      }
    }, 16);
  }
  return r;
}

GemvResult moe_gemv(const WeightSet& w, const ActRows& x, const int32_t* ids, const float* weights,
                    int top_k) {
  FMOE_REQUIRE(w.precision == Precision::nvfp4 && x.precision == Precision::bf16 && w.K == x.K,
               "ref::moe_gemv: NVFP4 weights and bf16 x of the same K");
  const int T = x.M, N = w.N, K = w.K;
  GemvResult r = zeros(T, N);
  for (int t = 0; t < T; ++t) {
    std::vector<double> xt(static_cast<size_t>(K));
    x.decode_row(t, xt.data());
    for (int j = 0; j < top_k; ++j) {
      const int e = ids[size_t(t) * top_k + j];
      if (e < 0 || e >= w.E) continue;
      const double wt = double(weights[size_t(t) * top_k + j]);
      detail::parallel_for(N, [&](int64_t n0, int64_t n1) {
        std::vector<double> row(static_cast<size_t>(K));
        for (int64_t n = n0; n < n1; ++n) {
          w.decode_row(e, int(n), row.data());
          double v, s;
          dot(row.data(), xt.data(), K, v, s);
          const size_t o = size_t(t) * N + size_t(n);
          r.value[o] += wt * v;
          r.abs_sum[o] += std::fabs(wt) * s;
        }
      }, 16);
    }
  }
  return r;
}

}  // namespace fusedmoe::ref
