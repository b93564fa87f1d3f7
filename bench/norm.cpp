// `fusedmoe bench --op rmsnorm_quant`: the fused RMSNorm + quantize at a model's hidden size over
// token counts, for each output form, with and without the residual, cold L2.
//
// Bytes: x read, residual read and written, weight read once, out (+ scales) written. Cold L2:
// input and output sets rotate so that consecutive launches touch more than twice the L2. The
// ceiling of the harness is a 1 GiB copy, which small launches cannot reach (launch and DRAM
// latency dominate a 2 MB transfer), so each row also times a device-to-device copy of the same
// bytes (half read, half written, rotated the same way) in the same run, and reports both ratios.
// Each configuration is checked first: sampled rows bit for bit against the reference computed
// from the kernel's own inv_rms.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/env.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/norm.hpp"
#include "norm/norm_config.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::bench {
namespace {

TensorRef dref(const void* p, DType t, std::initializer_list<int64_t> shape) {
  return TensorRef::contiguous(const_cast<void*>(p), t, shape, Device::cuda, 0);
}

const char* form_name(ref::NormOutForm f) {
  return f == ref::NormOutForm::bf16 ? "bf16" : f == ref::NormOutForm::fp8 ? "fp8" : "nvfp4";
}

struct ConfigScope : detail::ScopedKnob<std::string> {  // a forced config for one measurement
  explicit ConfigScope(const std::string& name) : ScopedKnob(&detail::Knobs::force_config, name) {}
};

// One rotated set of a launch's tensors.
struct Set {
  DeviceBuffer x, res, out, scale, inv;
};

void bench_one(const Context& ctx, const cli::Args& args, int H, int T, ref::NormOutForm form, bool residual) {
  const Ceilings& c = *ctx.ceil;
  const bool nv = form == ref::NormOutForm::nvfp4, f8 = form == ref::NormOutForm::fp8;
  if (nv && H % 16) return;
  const int64_t n = int64_t(T) * H;
  const int64_t out_bytes = nv ? n / 2 : f8 ? n : 2 * n;
  const int64_t scale_cols = f8 ? (H + 127) / 128 : nv ? H / 16 : 0;
  const int64_t scale_bytes = T * scale_cols * (f8 ? 4 : 1);
  const double bytes = double(2 * n) + (residual ? 4.0 * double(n) : 0.0) + 2.0 * H + double(out_bytes) +
                       double(scale_bytes) + (nv ? 4.0 : 0.0);
  const int copies = int(std::max<double>(2, std::ceil(2.0 * c.l2_bytes / bytes)));

  const std::vector<float> xf = ref::random_bf16(n, 51, 1, 2.0f), rf = ref::random_bf16(n, 51, 2, 2.0f);
  const std::vector<float> wf = ref::random_bf16(H, 51, 3, 1.0f);
  std::vector<uint16_t> xb(static_cast<size_t>(n)), rb(static_cast<size_t>(n)), wb(static_cast<size_t>(H));
  for (int64_t i = 0; i < n; ++i) {
    xb[size_t(i)] = fmt::bf16_from_float(xf[size_t(i)]);
    rb[size_t(i)] = fmt::bf16_from_float(rf[size_t(i)]);
  }
  for (int h = 0; h < H; ++h) wb[size_t(h)] = fmt::bf16_from_float(wf[size_t(h)]);
  // The global scale a calibration would give: amax of the normalized values / (6 * 448).
  const auto probe = ref::rmsnorm_quant(xf.data(), residual ? rf.data() : nullptr, wf.data(), std::min(T, 64), H,
                                        1e-6f, ref::NormOutForm::bf16);
  float amax = 0;
  for (float y : probe.y) amax = std::max(amax, std::fabs(y));
  const float g = fmt::nvfp4_global_scale(amax);
  std::vector<Set> sets(static_cast<size_t>(copies));
  for (Set& s : sets) {
    s.x = DeviceBuffer::from(xb);
    if (residual) s.res = DeviceBuffer::from(rb);
    s.out.resize(size_t(std::max<int64_t>(out_bytes, 1)));
    if (scale_bytes) s.scale.resize(size_t(scale_bytes));
    s.inv.resize(size_t(T) * 4);
  }
  DeviceBuffer w = DeviceBuffer::from(wb), gd = DeviceBuffer::from(std::vector<float>{g});
  auto make_args = [&](int i, bool pdl) {
    Set& s = sets[size_t(i)];
    RmsNormQuantArgs a;
    a.x = dref(s.x.get(), DType::bf16, {T, H});
    if (residual) a.residual = dref(s.res.get(), DType::bf16, {T, H});
    a.weight = dref(w.get(), DType::bf16, {H});
    a.out = dref(s.out.get(), f8 ? DType::e4m3 : nv ? DType::e2m1x2 : DType::bf16, {T, nv ? H / 2 : H});
    if (f8) a.out_scale = dref(s.scale.get(), DType::f32, {T, scale_cols});
    if (nv) {
      a.out_scale = dref(s.scale.get(), DType::e4m3, {T, scale_cols});
      a.global_scale = dref(gd.get(), DType::f32, {1});
    }
    a.inv_rms = dref(s.inv.get(), DType::f32, {T});
    a.pdl = pdl;
    return a;
  };
  // Sampled rows of set 0, bit for bit (the residual of set 0 is restored first: timing rewrites it).
  auto verify = [&](const std::string& what) {
    Set& s = sets[0];
    if (residual) s.res.upload(rb.data(), rb.size() * 2);
    s.out.fill(0xFF);
    rmsnorm_quant(make_args(0, false), ctx.stream);
    FMOE_CUDA(cudaStreamSynchronize(ctx.stream));
    const std::vector<uint8_t> out = s.out.to_host<uint8_t>();
    const std::vector<uint8_t> scale = scale_bytes ? s.scale.to_host<uint8_t>() : std::vector<uint8_t>();
    const std::vector<float> inv = s.inv.to_host<float>();
    for (int k = 0; k < std::min(T, 8); ++k) {
      const int t = int((int64_t(k) * 7919) % T);
      const auto want = ref::rmsnorm_quant(xf.data() + int64_t(t) * H, residual ? rf.data() + int64_t(t) * H : nullptr,
                                           wf.data(), 1, H, 1e-6f, form, g, &inv[size_t(t)]);
      const size_t ob = size_t(out_bytes / T), sb = size_t(scale_bytes / T);
      const uint8_t* want_out = nv || f8 ? want.q.data() : reinterpret_cast<const uint8_t*>(want.out_bf16.data());
      const uint8_t* want_scale = f8 ? reinterpret_cast<const uint8_t*>(want.fp8_scale.data()) : want.nvfp4_scale.data();
      FMOE_REQUIRE(std::memcmp(out.data() + size_t(t) * ob, want_out, ob) == 0 &&
                       (sb == 0 || std::memcmp(scale.data() + size_t(t) * sb, want_scale, sb) == 0),
                   "bench rmsnorm_quant: %s: row %d differs from the reference: the kernel is wrong, not timing it",
                   what.c_str(), t);
    }
  };
  std::vector<std::string> configs = {""};
  if (args.str("configs", "auto") == "all")
    for (int i = 0; i < int(detail::NormConfigId::count); ++i) configs.push_back(detail::norm_config_info(detail::NormConfigId(i)).name);
  const std::string shape = strf("H%d %s res=%s", H, form_name(form), residual ? "on" : "off");

  // The same bytes as a device-to-device copy, rotated over as many buffer pairs.
  const size_t copy_bytes = size_t(std::ceil(bytes / 2 / 16)) * 16;
  std::vector<DeviceBuffer> src(static_cast<size_t>(copies)), dst(static_cast<size_t>(copies));
  for (int i = 0; i < copies; ++i) {
    src[size_t(i)].resize(copy_bytes);
    src[size_t(i)].fill(0x3C);
    dst[size_t(i)].resize(copy_bytes);
  }
  const Stats copy_t = time_graph([&](cudaStream_t s, int i) {
    launch_stream_kernel(StreamKernel::copy_nc8, src[size_t(i % copies)].get(), dst[size_t(i % copies)].get(), copy_bytes, s);
  }, ctx.stream);

  for (const std::string& forced : configs) {
    ConfigScope scope(forced);
    if (!forced.empty()) {  // skip configs that cannot run this problem (too long a row)
      const detail::NormConfigInfo info = detail::norm_config_info(detail::norm_config_by_name(forced));
      if (!info.generic && (H % 8 || info.threads_for(H / 8) == 0)) continue;
    }
    detail::NormProblem prob;
    prob.T = T;
    prob.H = H;
    prob.num_sms = c.sm_count;
    prob.vec_ok = H % 8 == 0;  // the bench's buffers are 16-byte aligned
    const detail::NormChoice ch = detail::select_norm_config(prob, forced.c_str());
    const std::string name = detail::norm_config_info(ch.id).name;
    verify(shape + " " + name);
    {
      Row r;
      r.op = "rmsnorm_quant";
      r.shape = shape;
      r.tokens = T;
      r.config = strf("%s/%d", name.c_str(), ch.threads) + (forced.empty() ? "" : "*");
      r.mode = "cold";
      r.t = time_graph([&](cudaStream_t s, int i) { rmsnorm_quant(make_args(i % copies, false), s); }, ctx.stream);
      r.bytes = bytes;
      set_floor(r, c, "bf16");
      r.note = strf("%.1f%% of copy bw; same-bytes copy %.2f us: %.1f%% of it", 100.0 * r.floor_us / r.t.median_us,
                    copy_t.median_us, 100.0 * copy_t.median_us / r.t.median_us) +
               (forced.empty() ? " (auto: " + ch.reason + ")" : "");
      print_row(r, c);
      ctx.rows->push_back(r);
    }
  }
}

void run(const Context& ctx, const cli::Args& args) {
  int H = 7168;  // DeepSeek-V3
  if (args.has("preset")) H = find_preset(args.str("preset", "")).hidden;
  if (args.has("hidden")) H = int(args.integer("hidden", 7168, 1, 1 << 20));
  const std::vector<long long> tokens = args.int_list("tokens", {1, 16, 128, 1024, 4096, 16384}, 1, 1 << 20);
  const std::string out = args.str("out", "all"), res = args.str("residual", "both");
  std::vector<ref::NormOutForm> forms;
  if (out == "all" || out == "bf16") forms.push_back(ref::NormOutForm::bf16);
  if (out == "all" || out == "fp8") forms.push_back(ref::NormOutForm::fp8);
  if (out == "all" || out == "nvfp4") forms.push_back(ref::NormOutForm::nvfp4);
  std::vector<bool> residuals;
  if (res != "on") residuals.push_back(false);
  if (res != "off") residuals.push_back(true);
  for (ref::NormOutForm f : forms)
    for (bool r : residuals)
      for (long long T : tokens) bench_one(ctx, args, H, int(T), f, r);
}

using Kind = BenchOption::Kind;
const Register kRegister({"rmsnorm_quant",
                          "fused RMSNorm + quantize (bf16 / fp8 per 128 / nvfp4 out, +- residual) "
                          "over token counts at a model's hidden size",
                          {{"preset", "NAME", "take H from this model preset (default: H = 7168, "
                            "deepseek-v3)", Kind::preset},
                           {"hidden", "N", "H directly (overrides --preset)", Kind::integer, {}, 1, 1 << 20},
                           {"tokens", "LIST", "token counts (default 1,16,128,1024,4096,16384)",
                            Kind::int_list, {}, 1, 1 << 20},
                           {"out", "bf16|fp8|nvfp4|all", "output forms (default all)", Kind::choice,
                            {"bf16", "fp8", "nvfp4", "all"}},
                           {"residual", "on|off|both", "with the residual add (default both)",
                            Kind::choice, {"on", "off", "both"}},
                           {"configs", "auto|all", "time the automatic config only, or every "
                            "config that can run the shape (default auto)", Kind::choice, {"auto", "all"}}},
                          run});

}  // namespace
}  // namespace fusedmoe::bench
