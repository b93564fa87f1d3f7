// Seeded, counter-based random numbers for tests, benchmarks and `fusedmoe run`. Value i of a
// stream depends only on (seed, stream, i), so tensors are identical whatever the thread count.
#pragma once

#include <cstdint>
#include <vector>

namespace fusedmoe::ref {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The i-th 64-bit value of stream `stream` under `seed`.
inline uint64_t hash3(uint64_t seed, uint64_t stream, uint64_t i) {
  return splitmix64(splitmix64(seed ^ splitmix64(stream)) + i);
}

/// Uniform in [-1, 1) with 24 random bits.
inline float uniform_pm1(uint64_t seed, uint64_t stream, uint64_t i) {
  return float(int64_t(hash3(seed, stream, i) >> 40) - (int64_t(1) << 23)) * (1.0f / 8388608.0f);
}

/// Sequential generator for test-case choices (shapes, hot experts).
struct Rng {
  uint64_t state;
  explicit Rng(uint64_t seed) : state(seed) {}
  uint64_t next() { return splitmix64(state++); }
  int below(int n) { return int(next() % uint64_t(n)); }  ///< in [0, n)
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  ///< in [0, 1)
};

/// out[i] = scale * uniform_pm1(seed, stream, i), in parallel.
void fill_uniform(float* out, int64_t n, uint64_t seed, uint64_t stream, float scale);
/// Same, each value rounded to bf16 (inputs the kernels read as bf16).
std::vector<float> random_bf16(int64_t n, uint64_t seed, uint64_t stream, float scale);

/// Router logits [T, E] with distinct values in every row (a random permutation of an evenly
/// spaced grid, step `spread` / E): top-k selection has no ties in fp32 or after softmax.
/// hot_expert >= 0 raises that expert to the top of every row.
std::vector<float> tie_free_logits(int T, int E, uint64_t seed, float spread = 8.0f,
                                   int hot_expert = -1);

/// A fresh seed for this process (time and pid), for tests that also run fixed seeds.
uint64_t time_seed();

}  // namespace fusedmoe::ref
