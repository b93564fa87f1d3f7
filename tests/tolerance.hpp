// Tolerances by precision, and the checker every GPU test uses.
//
// Per element: |got - want| <= c_out * u_out * |want| + c_acc * u_f32 * abs_sum + abs_floor,
// where u is the unit roundoff of the output type (rounding the result once), abs_sum is the
// reference's sum of |a*b| (fp32 accumulation error grows with it, and with cancellation), and
// c_acc allows for the K-length fp32 accumulation (about sqrt(K) in practice, K worst case).
// On top: a global relative L2 bound, and NaN/Inf must sit exactly where the reference has them.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace fusedmoe::test {

constexpr double kUnitBf16 = 0x1p-8;
constexpr double kUnitF16 = 0x1p-11;
constexpr double kUnitF32 = 0x1p-24;

struct Tol {
  double c_out = 1.0;   ///< output roundings (1 for a single final rounding)
  double u_out = kUnitBf16;
  double c_acc = 64.0;  ///< multiples of u_f32 * abs_sum
  double abs_floor = 0.0;
  double rel_l2 = 1e-2;
};

inline Tol tol_bf16_out(double c_acc = 64.0) { return Tol{1.0, kUnitBf16, c_acc, 0.0, 4e-3}; }
inline Tol tol_f16_out(double c_acc = 64.0) { return Tol{1.0, kUnitF16, c_acc, 0.0, 1e-3}; }
inline Tol tol_f32_out(double c_acc = 64.0) { return Tol{1.0, kUnitF32, c_acc, 0.0, 1e-5}; }

/// Compares n outputs. `abs_sum` may be nullptr (then only the relative term applies). Prints
/// the context (seed, shape), the number of failures and the worst element on failure.
template <class GotFn>
void check_close(GotFn got_at, const double* want, const double* abs_sum, size_t n, const Tol& tol,
                 const std::string& ctx) {
  size_t bad = 0, worst = 0;
  double worst_excess = -1, err2 = 0, ref2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = double(got_at(i)), w = want[i];
    if (!std::isfinite(w) || !std::isfinite(g)) {
      const bool same = (std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w);
      if (!same) {
        if (bad == 0 || worst_excess < INFINITY) { worst = i; worst_excess = INFINITY; }
        ++bad;
      }
      continue;
    }
    const double bound = tol.c_out * tol.u_out * std::fabs(w) +
                         (abs_sum ? tol.c_acc * kUnitF32 * abs_sum[i] : 0.0) + tol.abs_floor;
    const double err = std::fabs(g - w);
    err2 += err * err;
    ref2 += w * w;
    if (err > bound) {
      ++bad;
      if (err - bound > worst_excess) { worst_excess = err - bound; worst = i; }
    }
  }
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_EQ(bad, 0u) << ctx << ": " << bad << " of " << n << " elements out of tolerance; worst #"
                     << worst << " got " << double(got_at(worst)) << " want " << want[worst]
                     << (abs_sum ? " (abs_sum " + std::to_string(abs_sum[worst]) + ")" : std::string());
  EXPECT_LE(rel, tol.rel_l2) << ctx << ": relative L2 error " << rel;
}

}  // namespace fusedmoe::test
