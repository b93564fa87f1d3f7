// Element-wise references: activation, combine, RMSNorm, RoPE. All math in double.
#include <algorithm>
#include <cmath>

#include "fusedmoe/error.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {

void activation(const ActivationConfig& cfg, const float* gate_up, int rows, int I, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = gate_up + r * 2 * I;
    for (int i = 0; i < I; ++i) {
      double v;
      if (cfg.fn == ActivationFn::swiglu) {
        const double g = in[i], u = in[I + i];
        v = g / (1.0 + std::exp(-g)) * u;
      } else {
        const double limit = cfg.limit, alpha = cfg.alpha;
        const double g = std::min(double(in[2 * i]), limit);
        const double u = std::clamp(double(in[2 * i + 1]), -limit, limit);
        v = (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
      }
      out[r * I + i] = float(v);
    }
  }
}

void combine(const double* expert_out, const int32_t* route_slot, const float* weights, int T,
             int k, int H, double* y) {
  for (int64_t t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      double s = 0;
      for (int j = 0; j < k; ++j) {
        const int64_t route = t * k + j, row = route_slot ? route_slot[route] : route;
        s += (weights ? double(weights[route]) : 1.0) * expert_out[row * H + h];
      }
      y[t * H + h] = s;
    }
}

void rmsnorm(const float* x, const float* w, int rows, int H, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int h = 0; h < H; ++h) ss += double(x[r * H + h]) * double(x[r * H + h]);
    const double inv = 1.0 / std::sqrt(ss / H + double(eps));
    for (int h = 0; h < H; ++h) y[r * H + h] = float(double(x[r * H + h]) * inv * double(w[h]));
  }
}

void rope(float* x, const int32_t* position, int T, int heads, int head_dim, int rotary_dim,
          float theta, RopeStyle style, bool inverse) {
  FMOE_REQUIRE(rotary_dim % 2 == 0 && rotary_dim <= head_dim && rotary_dim > 0,
               "ref::rope: rotary_dim=%d must be even and in (0, head_dim=%d]", rotary_dim,
               head_dim);
  const int half = rotary_dim / 2;
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < half; ++i) {
      const double freq = std::pow(double(theta), -2.0 * i / rotary_dim);
      const double ang = double(position[t]) * freq * (inverse ? -1.0 : 1.0);
      const double c = std::cos(ang), s = std::sin(ang);
      for (int hd = 0; hd < heads; ++hd) {
        float* v = x + (int64_t(t) * heads + hd) * head_dim;
        const int i0 = style == RopeStyle::gptj_interleaved ? 2 * i : i;
        const int i1 = style == RopeStyle::gptj_interleaved ? 2 * i + 1 : i + half;
        const double a = v[i0], b = v[i1];
        v[i0] = float(a * c - b * s);
        v[i1] = float(a * s + b * c);
      }
    }
  }
}

}  // namespace fusedmoe::ref
