// Inputs for one layer of a real checkpoint (`fusedmoe run --model`, the checkpoint GPU test):
// the router logits a real layer sees, computed from x with the layer's own router weights.
// Header-only, no CUDA.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "common/parallel.hpp"
#include "fusedmoe/checkpoint.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"

namespace fusedmoe::cli {

/// logits[t, e] = sum_h x[t, h] * router[e, h], accumulated in double and rounded to fp32 once.
/// x: [T, H] floats; router: [E, H] bf16 or f32 (CheckpointLayer::router_weight).
inline std::vector<float> router_logits(const std::vector<float>& x, int T, const HostTensor& router) {
  FMOE_REQUIRE(router.shape.size() == 2 && (router.dtype == DType::bf16 || router.dtype == DType::f32),
               "router_logits: the router weight must be [E, H] bf16 or f32, got %zu dimensions %s",
               router.shape.size(), dtype_name(router.dtype));
  const int64_t E = router.shape[0], H = router.shape[1];
  FMOE_REQUIRE(int64_t(x.size()) == int64_t(T) * H, "router_logits: x holds %zu values, expected T x H = %d x %lld",
               x.size(), T, (long long)H);
  std::vector<float> w(size_t(E * H));
  for (int64_t i = 0; i < E * H; ++i) {
    if (router.dtype == DType::f32) {
      std::memcpy(&w[size_t(i)], router.bytes.data() + 4 * i, 4);
    } else {
      uint16_t b;
      std::memcpy(&b, router.bytes.data() + 2 * i, 2);
      w[size_t(i)] = fmt::bf16_to_float(b);
    }
  }
  std::vector<float> logits(size_t(T) * size_t(E));
  detail::parallel_for(int64_t(T) * E, [&](int64_t b, int64_t end) {
    for (int64_t i = b; i < end; ++i) {
      const int64_t t = i / E, e = i % E;
      double s = 0;
      for (int64_t h = 0; h < H; ++h) s += double(x[size_t(t * H + h)]) * double(w[size_t(e * H + h)]);
      logits[size_t(i)] = float(s);
    }
  }, 64);
  return logits;
}

/// The routing bias of a checkpoint layer as floats (empty when it has none).
inline std::vector<float> routing_bias(const CheckpointLayer& ck) {
  std::vector<float> b(ck.routing_bias.bytes.size() / 4);
  if (!b.empty()) std::memcpy(b.data(), ck.routing_bias.bytes.data(), b.size() * 4);
  return b;
}

}  // namespace fusedmoe::cli
