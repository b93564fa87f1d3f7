// CPU reference of the fused RMSNorm + quantize (ref::rmsnorm_quant, declared in ref/ref.hpp):
// the sum of squares in double, the quantization by the library's host quantizers (fmt::), which
// are bit-exact with the device ones.
#include <cfloat>
#include <cmath>
#include <limits>

#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {

RmsNormQuantResult rmsnorm_quant(const float* x, const float* residual, const float* w, int T, int H,
                                 float eps, NormOutForm form, float global_scale,
                                 const float* inv_rms_given) {
  FMOE_REQUIRE(T >= 0 && H >= 1, "ref::rmsnorm_quant: T = %d, H = %d", T, H);
  FMOE_REQUIRE(form != NormOutForm::nvfp4 || H % 16 == 0,
               "ref::rmsnorm_quant: NVFP4 needs H %% 16 == 0, got H = %d", H);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t n = int64_t(T) * H;
  RmsNormQuantResult r;
  r.T = T;
  r.H = H;
  r.h.resize(size_t(n));
  r.inv_rms.resize(size_t(T));
  r.y.resize(size_t(n));
  for (int64_t t = 0; t < T; ++t) {
    float* h = r.h.data() + t * H;
    double ss = 0;
    bool finite = true;
    for (int c = 0; c < H; ++c) {
      const int64_t i = t * H + c;
      h[c] = residual ? fmt::round_to_bf16(x[i] + residual[i]) : x[i];
      finite = finite && std::isfinite(h[c]);
      ss += double(h[c]) * double(h[c]);
    }
    // The kernel sums in fp32: a sum past FLT_MAX is Inf there, and the row is poisoned.
    const bool poisoned = !finite || !(ss <= double(FLT_MAX));
    const double inv = poisoned ? double(nan) : 1.0 / std::sqrt(ss / H + double(eps));
    r.inv_rms[size_t(t)] = inv;
    float* y = r.y.data() + t * H;
    for (int c = 0; c < H; ++c) {
      if (inv_rms_given) {
        const float prod = h[c] * inv_rms_given[t];  // -ffp-contract=off: two roundings, as on the GPU
        y[c] = prod * w[c];
      } else {
        y[c] = float(double(h[c]) * inv * double(w[c]));
      }
    }
  }
  if (form == NormOutForm::bf16) {
    r.out_bf16.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) r.out_bf16[size_t(i)] = fmt::bf16_from_float(r.y[size_t(i)]);
    return r;
  }
  // The quantizers see Inf as NaN: a block with an Inf y gets a NaN scale (fmt's NVFP4 rule alone
  // would saturate it to a finite 448).
  std::vector<float> yq(r.y);
  for (float& v : yq)
    if (!std::isfinite(v)) v = nan;
  if (form == NormOutForm::fp8) {
    r.q.resize(size_t(n));
    r.fp8_scale.resize(size_t(T) * size_t((H + 127) / 128));
    fmt::quantize_fp8_per_token_128(yq.data(), T, H, r.q.data(), r.fp8_scale.data());
    return r;
  }
  r.q.resize(size_t(n / 2));
  r.nvfp4_scale.resize(size_t(n / 16));
  if (global_scale > 0.0f && std::isfinite(global_scale)) {
    fmt::quantize_nvfp4(yq.data(), T, H, global_scale, r.q.data(), r.nvfp4_scale.data());
  } else {
    for (uint8_t& s : r.nvfp4_scale) s = 0x7F;
    for (uint8_t& q : r.q) q = 0;
  }
  return r;
}

}  // namespace fusedmoe::ref
