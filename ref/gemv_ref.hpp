// CPU reference of the NVFP4 GEMV (both forms): double accumulation over the exact values the
// kernels multiply (codes and scales decoded by WeightSet / ActRows), with sum |a * b| per output
// for the tolerance.
#pragma once

#include <cstdint>
#include <vector>

#include "ref/ref.hpp"

namespace fusedmoe::ref {

struct GemvResult {
  int rows = 0, cols = 0;        ///< batched: [L, M]; grouped: [T, N]
  std::vector<double> value;     ///< [rows, cols]
  std::vector<double> abs_sum;   ///< [rows, cols] sum of |terms| (scales the tolerance)
};

/// Batched GEMV: c[l, m] = sum_k A_l[m, k] * b_l[k]. `a` is NVFP4 with E = L matrices of
/// [N = M, K]. Exactly one of `b_nvfp4` (NVFP4, E = L vectors of [N = 1, K], one global per
/// vector) and `b_bf16` (bf16, M = L rows of K) is non-null.
GemvResult gemv(const WeightSet& a, const WeightSet* b_nvfp4, const ActRows* b_bf16);

/// MoE decode form: y[t, n] = sum_j weights[t, j] * sum_k W_{ids[t, j]}[n, k] * x[t, k] over
/// the routes whose id is in [0, E) (others contribute nothing), j in order. abs_sum sums
/// |weights[t, j]| * sum_k |W * x|. ids, weights: [T, top_k] with T = x.M.
GemvResult moe_gemv(const WeightSet& w, const ActRows& x, const int32_t* ids, const float* weights,
                    int top_k);

}  // namespace fusedmoe::ref
