// RoPE from a cos/sin cache (ref/ref.hpp: rope_cos_sin_cache, rope_from_cache), in double.
#include <cmath>

#include "fusedmoe/error.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {

std::vector<float> rope_cos_sin_cache(int max_position, int rope_dim, double theta) {
  FMOE_REQUIRE(max_position >= 0 && rope_dim > 0 && rope_dim % 2 == 0,
               "ref::rope_cos_sin_cache: max_position = %d, rope_dim = %d (must be even and positive)",
               max_position, rope_dim);
  const int half = rope_dim / 2;
  std::vector<float> cache(size_t(max_position) * size_t(rope_dim));
  for (int p = 0; p < max_position; ++p)
    for (int i = 0; i < half; ++i) {
      const double angle = double(p) * std::pow(theta, -2.0 * i / rope_dim);
      cache[size_t(p) * rope_dim + i] = float(std::cos(angle));
      cache[size_t(p) * rope_dim + half + i] = float(std::sin(angle));
    }
  return cache;
}

RopeFromCacheResult rope_from_cache(const float* x, int T, int heads, int head_dim, int rope_dim,
                                    const int64_t* positions, const float* cos_sin_cache,
                                    int64_t max_position, RopeStyle style, bool inverse) {
  FMOE_REQUIRE(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim,
               "ref::rope_from_cache: rope_dim=%d must be even and in (0, head_dim=%d]", rope_dim,
               head_dim);
  const int half = rope_dim / 2, first = head_dim - rope_dim;  // the rope part: [first, head_dim)
  const size_t n = size_t(T) * size_t(heads) * size_t(head_dim);
  RopeFromCacheResult r;
  r.value.assign(x, x + n);
  r.abs_terms.assign(n, 0.0);
  for (int t = 0; t < T; ++t) {
    const int64_t pos = positions[t];
    if (pos < 0 || pos >= max_position) {  // left as it is (never reads the cache)
      ++r.bad_positions;
      continue;
    }
    const float* row = cos_sin_cache + pos * rope_dim;
    for (int h = 0; h < heads; ++h) {
      const size_t head = (size_t(t) * heads + h) * head_dim + first;
      for (int i = 0; i < half; ++i) {
        const size_t i0 = head + (style == RopeStyle::gptj_interleaved ? 2 * i : i);
        const size_t i1 = head + (style == RopeStyle::gptj_interleaved ? 2 * i + 1 : i + half);
        const double c = row[i], s = inverse ? -double(row[half + i]) : double(row[half + i]);
        const double a = x[i0], b = x[i1];
        r.value[i0] = a * c - b * s;
        r.value[i1] = b * c + a * s;
        r.abs_terms[i0] = std::fabs(a * c) + std::fabs(b * s);
        r.abs_terms[i1] = std::fabs(b * c) + std::fabs(a * s);
      }
    }
  }
  return r;
}

}  // namespace fusedmoe::ref
