// Host side of rmsnorm_quant: argument validation, the config choice, kernel parameters.
#include <cuda_runtime_api.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_state.hpp"
#include "common/env.hpp"
#include "common/tensor_check.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/norm.hpp"
#include "norm/norm_launch.hpp"

namespace fusedmoe {
namespace {

using detail::NormOut;
using detail::NormParams;

constexpr const char* kOp = "rmsnorm_quant";

// The checks every tensor of the call shares: present, on the call's device, non-negative
// strides, unit inner stride (all but inv_rms), element-aligned.
struct Checker {
  int device = -1;  // device of the first tensor seen

  void common(const char* name, const TensorRef& t, bool unit_inner = true) {
    detail::check_data(kOp, name, t);
    detail::check_on_device(kOp, name, t);
    if (device < 0) device = t.device_index;
    detail::check_same_device(kOp, name, t, device);
    for (int d = 0; d < t.ndim; ++d)
      FMOE_REQUIRE(t.stride[d] >= 0, "%s: %s has a negative stride %lld in dimension %d", kOp, name,
                   (long long)t.stride[d], d);
    if (unit_inner && t.ndim >= 1) detail::check_unit_inner_stride(kOp, name, t);
    const uintptr_t a = reinterpret_cast<uintptr_t>(t.data);
    const size_t eb = dtype_bytes(t.dtype);
    FMOE_REQUIRE(a % eb == 0, "%s: %s must be %zu-byte aligned (its element size), got address %p", kOp,
                 name, eb, t.data);
  }
  // A written [rows, cols] tensor: its rows must not overlap one another.
  void rows_apart(const char* name, const TensorRef& t) const {
    FMOE_REQUIRE(t.shape[0] <= 1 || t.stride[0] >= t.shape[1],
                 "%s: %s is written, so its rows must not overlap: row stride %lld < %lld columns", kOp,
                 name, (long long)t.stride[0], (long long)t.shape[1]);
  }
};

// Bytes from the start of a tensor's row r to the start of row r + 1.
int64_t row_bytes(const TensorRef& t) { return t.stride[0] * int64_t(dtype_bytes(t.dtype)); }
bool aligned(const void* p, int64_t row_stride_bytes, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) == 0 && row_stride_bytes % bytes == 0;
}

struct Prepared {
  NormParams p;
  NormOut form = NormOut::bf16;
  detail::NormProblem prob;
  int device = 0;
};

Prepared prepare(const RmsNormQuantArgs& a) {
  Prepared pr;
  NormParams& p = pr.p;
  Checker ck;

  // x [T, H]
  detail::check_dtype(kOp, "x", a.x, DType::bf16);
  FMOE_REQUIRE(a.x.ndim == 2, "%s: x must be [T, H] (2-d), got %s", kOp, a.x.describe().c_str());
  const int64_t T = a.x.shape[0], H = a.x.shape[1];
  FMOE_REQUIRE(H >= 1, "%s: H = x.shape[1] must be >= 1, got %lld", kOp, (long long)H);
  FMOE_REQUIRE(T <= 0x7FFFFFFF && H <= (int64_t(1) << 30),
               "%s: x is %s: at most 2^31 - 1 rows of 2^30 values", kOp, a.x.describe().c_str());
  ck.common("x", a.x);

  // out: its dtype picks the form
  const TensorRef& out = a.out;
  switch (out.dtype) {
    case DType::bf16: pr.form = NormOut::bf16; break;
    case DType::e4m3: pr.form = NormOut::fp8; break;
    case DType::e2m1x2: pr.form = NormOut::nvfp4; break;
    default:
      FMOE_REQUIRE(false, "%s: out must be bf16, e4m3 or e2m1x2 (the output form follows out.dtype), got %s",
                   kOp, out.describe().c_str());
  }
  if (pr.form == NormOut::nvfp4)
    FMOE_REQUIRE(H % 16 == 0, "%s: an NVFP4 (e2m1x2) out needs H to be a multiple of 16 (one e4m3 scale per 16 values), got H = %lld",
                 kOp, (long long)H);
  detail::check_shape(kOp, "out", out, {T, pr.form == NormOut::nvfp4 ? H / 2 : H});
  ck.common("out", out);
  ck.rows_apart("out", out);

  // out_scale
  const TensorRef& sc = a.out_scale;
  if (pr.form == NormOut::bf16) {
    FMOE_REQUIRE(sc.data == nullptr, "%s: out is bf16, so out_scale must be empty (data == nullptr), got %s",
                 kOp, sc.describe().c_str());
  } else {
    FMOE_REQUIRE(sc.data != nullptr || T == 0, "%s: out is %s, so out_scale is required (%s)", kOp,
                 dtype_name(out.dtype),
                 pr.form == NormOut::fp8 ? "[T, ceil(H/128)] f32" : "[T, H/16] e4m3");
    const DType want = pr.form == NormOut::fp8 ? DType::f32 : DType::e4m3;
    const int64_t cols = pr.form == NormOut::fp8 ? (H + 127) / 128 : H / 16;
    detail::check_dtype(kOp, "out_scale", sc, want);
    detail::check_shape(kOp, "out_scale", sc, {T, cols});
    ck.common("out_scale", sc);
    ck.rows_apart("out_scale", sc);
  }

  // global_scale
  const TensorRef& gs = a.global_scale;
  if (pr.form == NormOut::nvfp4) {
    FMOE_REQUIRE(gs.data != nullptr, "%s: out is e2m1x2 (NVFP4), so global_scale ([1] f32) is required", kOp);
    detail::check_dtype(kOp, "global_scale", gs, DType::f32);
    FMOE_REQUIRE(gs.numel() == 1 && gs.ndim <= 1, "%s: global_scale must hold one f32 ([1] or 0-d), got %s",
                 kOp, gs.describe().c_str());
    ck.common("global_scale", gs);
  } else {
    FMOE_REQUIRE(gs.data == nullptr, "%s: global_scale is for an e2m1x2 (NVFP4) out only; out is %s", kOp,
                 dtype_name(out.dtype));
  }

  // residual, weight, inv_rms
  const TensorRef& res = a.residual;
  if (res.data) {
    detail::check_dtype(kOp, "residual", res, DType::bf16);
    detail::check_shape(kOp, "residual", res, {T, H});
    ck.common("residual", res);
    ck.rows_apart("residual", res);
  }
  detail::check_dtype(kOp, "weight", a.weight, DType::bf16);
  detail::check_shape(kOp, "weight", a.weight, {H});
  ck.common("weight", a.weight);
  FMOE_REQUIRE(std::isfinite(a.eps) && a.eps > 0.0f, "%s: eps must be positive and finite, got %g", kOp,
               double(a.eps));
  if (a.inv_rms.data) {
    detail::check_dtype(kOp, "inv_rms", a.inv_rms, DType::f32);
    detail::check_shape(kOp, "inv_rms", a.inv_rms, {T});
    ck.common("inv_rms", a.inv_rms, false);
    FMOE_REQUIRE(T <= 1 || a.inv_rms.stride[0] >= 1, "%s: inv_rms is written, so its stride must be >= 1, got %lld",
                 kOp, (long long)a.inv_rms.stride[0]);
  }

  p.T = int(T);
  p.H = int(H);
  p.eps = a.eps;
  p.x = static_cast<const uint16_t*>(a.x.data);
  p.x_stride = a.x.stride[0];
  p.residual = static_cast<uint16_t*>(res.data);
  p.residual_stride = res.data ? res.stride[0] : 0;
  p.weight = static_cast<const uint16_t*>(a.weight.data);
  p.out = out.data;
  p.out_stride = out.stride[0];
  p.out_scale = sc.data;
  p.scale_stride = sc.data ? sc.stride[0] : 0;
  p.global_scale = static_cast<const float*>(gs.data);
  p.inv_rms = static_cast<float*>(a.inv_rms.data);
  p.inv_rms_stride = a.inv_rms.data && a.inv_rms.ndim == 1 ? a.inv_rms.stride[0] : 0;
  p.pdl = a.pdl;

  // The rows kernel's conditions: 16-byte chunks of 8 values everywhere it loads and stores.
  detail::NormProblem& prob = pr.prob;
  prob.T = T;
  prob.H = H;
  std::string why;
  const int out_chunk_bytes = pr.form == NormOut::bf16 ? 16 : pr.form == NormOut::fp8 ? 8 : 4;
  if (H % 8 != 0)
    why = strf("H = %lld is not a multiple of 8 (16-byte chunks)", (long long)H);
  else if (!aligned(p.x, row_bytes(a.x), 16))
    why = "the rows of x are not 16-byte aligned";
  else if (res.data && !aligned(p.residual, row_bytes(res), 16))
    why = "the rows of residual are not 16-byte aligned";
  else if (!aligned(p.weight, 0, 16))
    why = "weight is not 16-byte aligned";
  else if (!aligned(p.out, row_bytes(out), out_chunk_bytes))
    why = strf("the rows of out are not %d-byte aligned", out_chunk_bytes);
  prob.vec_ok = why.empty();
  prob.vec_why_not = why;
  pr.device = ck.device;
  return pr;
}

}  // namespace

void rmsnorm_quant(const RmsNormQuantArgs& args, Stream stream) {
  Prepared pr = prepare(args);
  if (pr.p.T == 0) return;  // nothing to read or write (bad arguments still threw above)
  pr.prob.num_sms = detail::current_device_state(kOp, pr.device).sms;
  const detail::NormChoice ch = detail::select_norm_config(pr.prob, detail::knobs().force_config.c_str());
  if (detail::knobs().print_config)
    std::fprintf(stderr, "fusedmoe %s: config %s, %d threads per CTA (%s)\n", kOp,
                 detail::norm_config_info(ch.id).name, ch.threads, ch.reason.c_str());
  detail::launch_norm(ch.id, pr.form, ch.threads, pr.p, stream);
}

}  // namespace fusedmoe
