// Random NVFP4 / bf16 operands for the GEMV tests, built from codes (every E2M1 code, including
// -0 and +-6, and e4m3 scales from subnormal to large), so the kernels see the same values the
// reference decodes.
#pragma once

#include <cstdint>
#include <vector>

#include "fusedmoe/formats.hpp"
#include "ref/gemv_ref.hpp"
#include "ref/random.hpp"

namespace fusedmoe::test {

/// One e4m3 block scale: mostly 2^-4 .. 2^5, now and then subnormal (products that are fp16
/// subnormals in the kernel's decode), large, or negative. Never NaN.
inline uint8_t random_scale_code(uint64_t h) {
  const uint32_t pick = uint32_t(h >> 40) % 64;
  uint8_t code;
  if (pick == 0) code = uint8_t(1 + (h >> 8) % 7);            // subnormal 2^-9 .. 7 * 2^-9
  else if (pick == 1) code = uint8_t(0x70 + (h >> 8) % 15);   // 256 .. 448
  else code = uint8_t(0x18 + (h >> 8) % 0x48);                // 2^-4 .. ~2^5
  if (pick == 2) code |= 0x80;                                // negative scale
  return code;
}

/// E matrices of [N, K] NVFP4: random packed codes, random block scales, global scales near
/// 1/64 (so dot products of K ~ 16k stay well inside fp16).
inline ref::WeightSet random_nvfp4(int E, int N, int K, uint64_t seed) {
  ref::WeightSet w;
  w.precision = Precision::nvfp4;
  w.E = E;
  w.N = N;
  w.K = K;
  const size_t values = size_t(E) * size_t(N) * size_t(K);
  w.q.resize(values / 2);
  w.block_scale.resize(values / 16);
  w.global_scale.resize(size_t(E));
  for (size_t i = 0; i < w.q.size(); i += 8) {
    const uint64_t h = ref::hash3(seed, 1, i / 8);
    for (size_t j = 0; j < 8 && i + j < w.q.size(); ++j) w.q[i + j] = uint8_t(h >> (8 * j));
  }
  for (size_t i = 0; i < w.block_scale.size(); ++i) w.block_scale[i] = random_scale_code(ref::hash3(seed, 2, i));
  for (int e = 0; e < E; ++e)
    w.global_scale[size_t(e)] = (1.0f + ref::uniform_pm1(seed, 3, uint64_t(e)) * 0.5f) / 64.0f;
  return w;
}

/// M rows of K bf16 values, uniform in [-scale, scale).
inline ref::ActRows random_bf16_rows(int M, int K, uint64_t seed, float scale = 1.0f) {
  const std::vector<float> v = ref::random_bf16(int64_t(M) * K, seed, 4, scale);
  return ref::make_acts(Precision::bf16, v.data(), M, K);
}

}  // namespace fusedmoe::test
