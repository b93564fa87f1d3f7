#include "ref/random.hpp"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <unistd.h>

#include "common/parallel.hpp"
#include "fusedmoe/formats.hpp"

namespace fusedmoe::ref {

void fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t stream, float scale) {
  detail::parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = scale * uniform_pm1(seed, stream, uint64_t(i));
  }, 1 << 16);
}

std::vector<float> random_bf16(int64_t n, uint64_t seed, uint64_t stream, float scale) {
  std::vector<float> v(static_cast<size_t>(std::max<int64_t>(n, 0)));
  fill_uniform(v.data(), n, seed, stream, scale);
  for (float& x : v) x = fmt::round_to_bf16(x);
  return v;
}

std::vector<float> tie_free_logits(int T, int E, uint64_t seed, float spread, int hot_expert) {
  std::vector<float> out(size_t(T) * size_t(E));
  std::vector<int> perm(static_cast<size_t>(E));
  const float step = spread / float(E);
  for (int t = 0; t < T; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    Rng rng(hash3(seed, 0x6C6F67, uint64_t(t)));
    for (int i = E - 1; i > 0; --i) std::swap(perm[size_t(i)], perm[size_t(rng.below(i + 1))]);
    // Grid values (i - E/2) * step are exact in fp32 for E <= 2^20 and distinct.
    for (int e = 0; e < E; ++e)
      out[size_t(t) * E + e] = float(perm[size_t(e)] - E / 2) * step;
    if (hot_expert >= 0 && hot_expert < E) out[size_t(t) * E + hot_expert] = float(E) * step;
  }
  return out;
}

uint64_t time_seed() {
  const uint64_t ns = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  return splitmix64(ns ^ (uint64_t(getpid()) << 32)) & 0xFFFFFFFFull;
}

}  // namespace fusedmoe::ref
