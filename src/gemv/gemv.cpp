// Host side of the NVFP4 GEMV: argument validation, the config choice, kernel parameters.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/env.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/gemv.hpp"
#include "gemv/gemv_launch.hpp"

namespace fusedmoe {
namespace detail {

// ---- the config table ----------------------------------------------------------------------------
namespace {
const GemvConfigInfo kConfigs[] = {
#define FMOE_GEMV(name, mode, mt, wm, wk, stages) {#name, mode, false, mt, wm, wk, stages},
#define FMOE_GEMV_GENERIC(name, mode) {#name, mode, true, 0, 0, 0, 0},
#include "gemv/gemv_configs.def"
#undef FMOE_GEMV
#undef FMOE_GEMV_GENERIC
};
constexpr int kNumConfigs = int(sizeof(kConfigs) / sizeof(kConfigs[0]));
static_assert(kNumConfigs == int(GemvConfigId::count), "config table and ids out of step");

const char* mode_name(GemvMode m) { return m == GemvMode::batched ? "batched" : "grouped"; }
}  // namespace

GemvConfigInfo gemv_config_info(GemvConfigId id) {
  FMOE_REQUIRE(int(id) >= 0 && int(id) < kNumConfigs, "gemv: unknown config id %d", int(id));
  return kConfigs[int(id)];
}

GemvConfigId gemv_config_by_name(const std::string& name) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (name == kConfigs[i].name) return GemvConfigId(i);
  return GemvConfigId::count;
}

// ---- the choice ----------------------------------------------------------------------------------
namespace {

// Grid rows of the fast kernel (tokens_per_cta for grouped) and shared memory; 0 tokens: no fit.
struct FastFit {
  int tokens_per_cta = 1;
  size_t smem = 0;
  bool fits = false;
};

FastFit fast_fit(const GemvConfigInfo& c, const GemvProblem& p) {
  FastFit f;
  const bool grouped = p.mode == GemvMode::grouped;
  f.tokens_per_cta = grouped ? int(std::min<int64_t>(8, std::max<int64_t>(p.T, 1))) : 1;
  for (;;) {
    f.smem = gemv_smem_layout(grouped, c.block_m(), c.wk, p.K, f.tokens_per_cta,
                              grouped ? int(p.top_k) : 0).total;
    if (f.smem <= p.smem_optin) {
      f.fits = true;
      return f;
    }
    if (!grouped || f.tokens_per_cta == 1) return f;
    --f.tokens_per_cta;  // fewer tokens per CTA: smaller B rows in shared memory
  }
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

GemvChoice select_gemv_config(const GemvProblem& p, const char* forced) {
  const bool grouped = p.mode == GemvMode::grouped;
  GemvChoice ch;
  // A forced config (FMOE_FORCE_CONFIG): names of other ops' configs are theirs, not an error.
  if (forced && *forced) {
    const GemvConfigId id = gemv_config_by_name(forced);
    if (id != GemvConfigId::count) {
      const GemvConfigInfo c = gemv_config_info(id);
      FMOE_REQUIRE(c.mode == p.mode, "FMOE_FORCE_CONFIG=%s is a %s gemv config; this call is %s",
                   forced, mode_name(c.mode), mode_name(p.mode));
      ch.id = id;
      ch.reason = "forced by FMOE_FORCE_CONFIG";
      if (c.generic) {
        ch.tokens_per_cta = 1;
        return ch;
      }
      FMOE_REQUIRE(p.fast_ok, "FMOE_FORCE_CONFIG=%s needs the fast path, which this problem cannot take: %s",
                   forced, p.fast_why_not.c_str());
      const FastFit f = fast_fit(c, p);
      FMOE_REQUIRE(f.fits, "FMOE_FORCE_CONFIG=%s: K=%" PRId64 " needs %zu bytes of shared memory, the device allows %zu",
                   forced, p.K, f.smem, p.smem_optin);
      ch.tokens_per_cta = f.tokens_per_cta;
      ch.smem_bytes = f.smem;
      return ch;
    }
  }
  const GemvConfigId generic = grouped ? GemvConfigId::moe_generic : GemvConfigId::gemv_generic;
  if (!p.fast_ok) {
    ch.id = generic;
    ch.tokens_per_cta = 1;
    ch.reason = "generic kernel: " + p.fast_why_not;
    return ch;
  }
  // Memory-bound: the stream runs at full speed when every CTA is resident from the start and all
  // have the same work (no partial last wave). So: among the configs whose grid fits one wave of
  // resident CTAs, the one with the most CTAs (the most loads in flight); with no such config,
  // the smallest share of idle slots in the last wave.
  struct Cand {
    GemvConfigId id;
    FastFit fit;
    int64_t ctas, slots;
  };
  std::vector<Cand> cands;
  for (int i = 0; i < kNumConfigs; ++i) {
    const GemvConfigInfo& c = kConfigs[i];
    if (c.generic || c.mode != p.mode) continue;
    const FastFit f = fast_fit(c, p);
    if (!f.fits) continue;
    const int64_t ctas = cdiv(p.M, c.block_m()) * (grouped ? cdiv(p.T, f.tokens_per_cta) : p.L);
    // __launch_bounds__(threads, 2) for <= 256 threads: two CTAs per SM unless shared memory says no.
    const int64_t per_sm = std::min<int64_t>(c.threads() <= 256 ? 2 : 1,
                                             int64_t((228 * 1024) / (f.smem + 1024)));
    cands.push_back({GemvConfigId(i), f, ctas, std::max<int64_t>(per_sm, 1) * p.num_sms});
  }
  if (cands.empty()) {
    ch.id = generic;
    ch.tokens_per_cta = 1;
    ch.reason = "generic kernel: K=" + std::to_string(p.K) + " needs more shared memory than the device allows";
    return ch;
  }
  const Cand* best = nullptr;
  for (const Cand& c : cands)
    if (c.ctas <= c.slots && (!best || c.ctas > best->ctas)) best = &c;
  if (best) {
    ch.reason = strf("%" PRId64 " CTAs fill one wave of %" PRId64 " resident slots; the most CTAs that still fit one wave",
                     best->ctas, best->slots);
  } else {
    double best_loss = 2.0;
    for (const Cand& c : cands) {
      const double waves = double(c.ctas) / double(c.slots);
      const double loss = (std::ceil(waves) - waves) / std::ceil(waves);
      if (loss < best_loss - 1e-9) {
        best_loss = loss;
        best = &c;
      }
    }
    ch.reason = strf("%" PRId64 " CTAs over %" PRId64 " slots: %.1f waves, the least idle share of the last wave",
                     best->ctas, best->slots, double(best->ctas) / double(best->slots));
  }
  ch.id = best->id;
  ch.tokens_per_cta = best->fit.tokens_per_cta;
  ch.smem_bytes = best->fit.smem;
  return ch;
}

}  // namespace detail

// ================================================================================================
// Validation and launch.
// ================================================================================================
namespace {
using detail::GemvMode;
using detail::GemvOut;
using detail::GemvParams;

struct DeviceLimits {
  int sms = 0;
  size_t smem_optin = 0;
};

// The current device must be the one the tensors live on and an sm_90 GPU; its limits are cached.
DeviceLimits device_limits(const char* op, int tensor_device) {
  int dev = -1;
  const cudaError_t e = cudaGetDevice(&dev);
  FMOE_REQUIRE(e == cudaSuccess, "%s needs a CUDA device: %s (%s)", op, cudaGetErrorName(e),
               cudaGetErrorString(e));
  FMOE_REQUIRE(dev == tensor_device, "%s: the tensors are on cuda:%d but the current device is cuda:%d",
               op, tensor_device, dev);
  static std::mutex mu;
  static std::vector<DeviceLimits> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (int(cache.size()) <= dev) cache.resize(size_t(dev) + 1);
  DeviceLimits& lim = cache[size_t(dev)];
  if (lim.sms == 0) {
    int major = 0, minor = 0, smem = 0;
    FMOE_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    FMOE_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
    FMOE_REQUIRE(major == 9 && minor == 0, "%s: the kernels are built for sm_90a (H100/H200); cuda:%d is sm_%d%d",
                 op, dev, major, minor);
    FMOE_CUDA(cudaDeviceGetAttribute(&lim.sms, cudaDevAttrMultiProcessorCount, dev));
    FMOE_CUDA(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    lim.smem_optin = size_t(smem);
  }
  return lim;
}

// Checks against one op's name; every message names the argument and says expected vs actual.
struct Checker {
  const char* op = "";
  int device = -1;  // device of the first cuda tensor seen

  void present(const char* name, const TensorRef& t, int64_t numel) const {
    FMOE_REQUIRE(t.data != nullptr || numel == 0, "%s: %s is missing (data == nullptr)", op, name);
  }
  void dtype(const char* name, const TensorRef& t, DType want) const {
    FMOE_REQUIRE(t.dtype == want, "%s: %s must be %s, got %s", op, name, dtype_name(want), dtype_name(t.dtype));
  }
  void on_gpu(const char* name, const TensorRef& t) {
    FMOE_REQUIRE(t.device == Device::cuda, "%s: %s must be on a CUDA device, got %s", op, name,
                 t.describe().c_str());
    if (device < 0) device = t.device_index;
    FMOE_REQUIRE(t.device_index == device, "%s: %s is on cuda:%d, the other tensors on cuda:%d", op,
                 name, t.device_index, device);
  }
  // Shape equals `want` (ndim and extents).
  void shape(const char* name, const TensorRef& t, std::initializer_list<int64_t> want) const {
    std::string w = "[";
    int i = 0;
    bool ok = t.ndim == int(want.size());
    for (int64_t v : want) {
      w += strf(i ? ", %lld" : "%lld", (long long)v);
      if (ok && t.shape[i] != v) ok = false;
      ++i;
    }
    w += "]";
    FMOE_REQUIRE(ok, "%s: %s must have shape %s, got %s", op, name, w.c_str(), t.describe().c_str());
  }
  void inner_contiguous(const char* name, const TensorRef& t) const {
    if (t.ndim == 0) return;
    FMOE_REQUIRE(t.shape[t.ndim - 1] <= 1 || t.stride[t.ndim - 1] == 1,
                 "%s: the last dimension of %s must be contiguous (stride 1), got stride %lld", op,
                 name, (long long)t.stride[t.ndim - 1]);
    for (int d = 0; d < t.ndim; ++d)
      FMOE_REQUIRE(t.stride[d] >= 0, "%s: %s has a negative stride %lld in dimension %d", op, name,
                   (long long)t.stride[d], d);
  }
  void aligned(const char* name, const TensorRef& t, size_t bytes) const {
    const uintptr_t a = reinterpret_cast<uintptr_t>(t.data);
    FMOE_REQUIRE(a % bytes == 0, "%s: %s must be %zu-byte aligned, got an address with remainder %zu",
                 op, name, bytes, size_t(a % bytes));
  }
  // A 2-d output [rows, cols] whose elements must not share memory.
  void output_2d(const char* name, int64_t rows, int64_t cols, int64_t s_row, int64_t s_col) const {
    FMOE_REQUIRE(s_row >= 0 && s_col >= 0, "%s: %s has a negative stride", op, name);
    const bool col_major = rows <= 1 || s_row >= (cols - 1) * s_col + 1;
    const bool row_major = cols <= 1 || s_col >= (rows - 1) * s_row + 1;
    FMOE_REQUIRE((cols <= 1 || s_col >= 1) && (rows <= 1 || s_row >= 1) && (col_major || row_major),
                 "%s: %s strides {%lld, %lld} make elements of its [%lld, %lld] overlap", op, name,
                 (long long)s_row, (long long)s_col, (long long)rows, (long long)cols);
  }
};

GemvOut out_dtype(const Checker& ck, const char* name, const TensorRef& t) {
  switch (t.dtype) {
    case DType::f16: return GemvOut::f16;
    case DType::bf16: return GemvOut::bf16;
    case DType::f32: return GemvOut::f32;
    default: break;
  }
  FMOE_REQUIRE(false, "%s: %s must be f16, bf16 or f32, got %s", ck.op, name, dtype_name(t.dtype));
  return GemvOut::f32;
}

// The NVFP4 matrices a/a_scale/a_global: [L, M, K/2], [L, M, K/16], [L] (or without L when 2-d).
void check_nvfp4_matrices(Checker& ck, const char* a_name, const TensorRef& a, const char* s_name,
                          const TensorRef& s, const char* g_name, const TensorRef& g, bool allow_2d,
                          int64_t& L, int64_t& M, int64_t& K, GemvParams& p) {
  ck.dtype(a_name, a, DType::e2m1x2);
  FMOE_REQUIRE(a.ndim == 3 || (allow_2d && a.ndim == 2), "%s: %s must be %s, got %s", ck.op, a_name,
               allow_2d ? "[L, M, K/2] or [M, K/2]" : "[E, N, K/2]", a.describe().c_str());
  const bool three = a.ndim == 3;
  L = three ? a.shape[0] : 1;
  M = a.shape[three ? 1 : 0];
  K = 2 * a.shape[three ? 2 : 1];
  FMOE_REQUIRE(K % 16 == 0, "%s: K = 2 * %s.shape[-1] = %lld must be a multiple of 16 (one e4m3 scale per 16 values)",
               ck.op, a_name, (long long)K);
  ck.dtype(s_name, s, DType::e4m3);
  if (three) ck.shape(s_name, s, {L, M, K / 16});
  else ck.shape(s_name, s, {M, K / 16});
  ck.dtype(g_name, g, DType::f32);
  FMOE_REQUIRE((g.ndim == 1 && g.shape[0] == L) || (!three && g.numel() == 1 && g.ndim <= 1),
               "%s: %s must have shape [%lld] (one fp32 global scale per matrix), got %s", ck.op,
               g_name, (long long)L, g.describe().c_str());
  ck.present(a_name, a, a.numel());
  ck.present(s_name, s, s.numel());
  ck.present(g_name, g, L);
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{a_name, &a}, {s_name, &s}, {g_name, &g}}) {
    ck.on_gpu(name, *t);
    ck.inner_contiguous(name, *t);
  }
  if (a.numel() > 0) ck.aligned(a_name, a, 16);
  ck.aligned(g_name, g, 4);
  p.M = int(M);
  p.K = int(K);
  p.L = int(L);
  p.a = static_cast<const uint8_t*>(a.data);
  p.a_mat_stride = three ? a.stride[0] : 0;
  p.a_row_stride = a.stride[three ? 1 : 0];
  p.sfa = static_cast<const uint8_t*>(s.data);
  p.sfa_mat_stride = three ? s.stride[0] : 0;
  p.sfa_row_stride = s.stride[three ? 1 : 0];
  p.a_global = static_cast<const float*>(g.data);
  p.a_global_stride = g.ndim == 1 ? g.stride[0] : 0;
  FMOE_REQUIRE(M <= (int64_t(1) << 30) && K <= (int64_t(1) << 30) && L <= 65535,
               "%s: %s has [%lld, %lld, %lld]: at most 65535 matrices of 2^30 x 2^30", ck.op, a_name,
               (long long)L, (long long)M, (long long)K);
}

// Conditions of the fast kernels on the A side; an empty string when they hold.
std::string a_fast_why_not(const GemvParams& p) {
  if (p.K == 0) return "K = 0 (an empty sum)";
  if (p.K % 32 != 0) return strf("K = %d is not a multiple of 32 (rows of whole 16-byte chunks)", p.K);
  if (p.a_row_stride % 16 || p.a_mat_stride % 16)
    return strf("A rows are not 16-byte aligned (row stride %lld, matrix stride %lld bytes)",
                (long long)p.a_row_stride, (long long)p.a_mat_stride);
  if (reinterpret_cast<uintptr_t>(p.sfa) % 2 || p.sfa_row_stride % 2 || p.sfa_mat_stride % 2)
    return "the block scales of a row are not 2-byte aligned";
  return "";
}

void print_choice(const char* op, const detail::GemvChoice& ch) {
  if (detail::knobs().print_config)
    std::fprintf(stderr, "fusedmoe %s: config %s (%s)\n", op, detail::gemv_config_info(ch.id).name,
                 ch.reason.c_str());
}

// A validated call: kernel parameters and the problem the config choice sees.
struct Prepared {
  const char* op = "";
  GemvParams p;
  detail::GemvProblem prob;
  int device = 0;
  bool empty = false;  // nothing to write
};

detail::GemvChoice choose(Prepared& pr) {
  const DeviceLimits lim = device_limits(pr.op, pr.device);
  pr.prob.num_sms = lim.sms;
  pr.prob.smem_optin = lim.smem_optin;
  const detail::GemvChoice ch = detail::select_gemv_config(pr.prob, detail::knobs().force_config.c_str());
  pr.p.tokens_per_cta = ch.tokens_per_cta;
  return ch;
}

void run(Prepared& pr, cudaStream_t stream) {
  if (pr.empty) return;
  const detail::GemvChoice ch = choose(pr);
  print_choice(pr.op, ch);
  detail::launch_gemv(ch.id, pr.p, ch.smem_bytes, stream);
}

Prepared prepare(const GemvNvfp4Args& args) {
  Checker ck{"gemv_nvfp4"};
  Prepared pr;
  pr.op = "gemv_nvfp4";
  GemvParams& p = pr.p;
  int64_t L, M, K;
  check_nvfp4_matrices(ck, "a", args.a, "a_scale", args.a_scale, "a_global", args.a_global, true, L,
                       M, K, p);
  const bool two_d = args.a.ndim == 2;
  // b: NVFP4 [L, K/2] (+ [L, K/16] e4m3, [L] f32) or bf16 [L, K]; 1-d when a is 2-d.
  const TensorRef& b = args.b;
  p.b_nvfp4 = b.dtype == DType::e2m1x2;
  FMOE_REQUIRE(p.b_nvfp4 || b.dtype == DType::bf16, "gemv_nvfp4: b must be e2m1x2 (NVFP4) or bf16, got %s",
               dtype_name(b.dtype));
  const int64_t b_cols = p.b_nvfp4 ? K / 2 : K;
  if (two_d && b.ndim == 1) ck.shape("b", b, {b_cols});
  else ck.shape("b", b, {L, b_cols});
  ck.present("b", b, b.numel());
  ck.on_gpu("b", b);
  ck.inner_contiguous("b", b);
  ck.aligned("b", b, p.b_nvfp4 ? 1 : 2);
  p.b = b.data;
  p.b_stride = b.ndim == 2 ? b.stride[0] : 0;
  if (p.b_nvfp4) {
    const TensorRef& bs = args.b_scale;
    const TensorRef& bg = args.b_global;
    ck.dtype("b_scale", bs, DType::e4m3);
    if (two_d && bs.ndim == 1) ck.shape("b_scale", bs, {K / 16});
    else ck.shape("b_scale", bs, {L, K / 16});
    ck.dtype("b_global", bg, DType::f32);
    FMOE_REQUIRE((bg.ndim == 1 && bg.shape[0] == L) || (two_d && bg.numel() == 1 && bg.ndim <= 1),
                 "gemv_nvfp4: b_global must have shape [%lld], got %s", (long long)L, bg.describe().c_str());
    ck.present("b_scale", bs, bs.numel());
    ck.present("b_global", bg, L);
    ck.on_gpu("b_scale", bs);
    ck.on_gpu("b_global", bg);
    ck.inner_contiguous("b_scale", bs);
    ck.aligned("b_global", bg, 4);
    p.sfb = static_cast<const uint8_t*>(bs.data);
    p.sfb_stride = bs.ndim == 2 ? bs.stride[0] : 0;
    p.b_global = static_cast<const float*>(bg.data);
    p.b_global_stride = bg.ndim == 1 ? bg.stride[0] : 0;
  } else {
    FMOE_REQUIRE(args.b_scale.data == nullptr && args.b_global.data == nullptr,
                 "gemv_nvfp4: b is bf16, so b_scale and b_global must be empty (data == nullptr)");
  }
  // c: [L, M] (or [M] when a is 2-d)
  const TensorRef& c = args.c;
  p.c_dtype = out_dtype(ck, "c", c);
  if (two_d && c.ndim == 1) ck.shape("c", c, {M});
  else ck.shape("c", c, {L, M});
  ck.present("c", c, c.numel());
  ck.on_gpu("c", c);
  ck.aligned("c", c, dtype_bytes(c.dtype));
  p.c = c.data;
  p.c_stride_l = c.ndim == 2 ? c.stride[0] : 0;
  p.c_stride_m = c.stride[c.ndim - 1];
  ck.output_2d("c", L, M, p.c_stride_l, p.c_stride_m);
  p.pdl = args.pdl;

  detail::GemvProblem& prob = pr.prob;
  prob.mode = GemvMode::batched;
  prob.M = M;
  prob.K = K;
  prob.L = L;
  std::string why = a_fast_why_not(p);
  if (why.empty() && p.b_nvfp4 &&
      (reinterpret_cast<uintptr_t>(p.b) % 4 || p.b_stride % 4))
    why = "the NVFP4 b rows are not 4-byte aligned";
  if (why.empty() && !p.b_nvfp4 && (reinterpret_cast<uintptr_t>(p.b) % 16 || p.b_stride % 8))
    why = "the bf16 b rows are not 16-byte aligned";
  prob.fast_ok = why.empty();
  prob.fast_why_not = why;
  pr.device = ck.device;
  pr.empty = M == 0 || L == 0;  // nothing to write (bad arguments still threw above)
  return pr;
}

Prepared prepare(const MoeGemvNvfp4Args& args) {
  Checker ck{"moe_gemv_nvfp4"};
  Prepared pr;
  pr.op = "moe_gemv_nvfp4";
  GemvParams& p = pr.p;
  int64_t E, N, K;
  check_nvfp4_matrices(ck, "w", args.w, "w_scale", args.w_scale, "w_global", args.w_global, false,
                       E, N, K, p);
  const TensorRef& x = args.x;
  ck.dtype("x", x, DType::bf16);
  FMOE_REQUIRE(x.ndim == 2 && x.shape[1] == K, "moe_gemv_nvfp4: x must have shape [T, %lld] (K of w), got %s",
               (long long)K, x.describe().c_str());
  const int64_t T = x.shape[0];
  const TensorRef& ids = args.topk_ids;
  ck.dtype("topk_ids", ids, DType::i32);
  FMOE_REQUIRE(ids.ndim == 2 && ids.shape[0] == T, "moe_gemv_nvfp4: topk_ids must have shape [%lld, k], got %s",
               (long long)T, ids.describe().c_str());
  const int64_t top_k = ids.shape[1];
  ck.dtype("topk_weights", args.topk_weights, DType::f32);
  ck.shape("topk_weights", args.topk_weights, {T, top_k});
  const TensorRef& y = args.y;
  p.c_dtype = out_dtype(ck, "y", y);
  ck.shape("y", y, {T, N});
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"x", &x}, {"topk_ids", &ids},
                                {"topk_weights", &args.topk_weights}, {"y", &y}}) {
    ck.present(name, *t, t->numel());
    ck.on_gpu(name, *t);
  }
  for (const auto& [name, t] : {std::pair<const char*, const TensorRef*>{"x", &x}, {"topk_ids", &ids},
                                {"topk_weights", &args.topk_weights}})
    ck.inner_contiguous(name, *t);
  ck.aligned("x", x, 2);
  ck.aligned("topk_ids", ids, 4);
  ck.aligned("topk_weights", args.topk_weights, 4);
  ck.aligned("y", y, dtype_bytes(y.dtype));
  ck.output_2d("y", T, N, y.stride[0], y.stride[1]);
  if (args.bad_id_count.data) {
    ck.dtype("bad_id_count", args.bad_id_count, DType::i32);
    FMOE_REQUIRE(args.bad_id_count.numel() == 1, "moe_gemv_nvfp4: bad_id_count must hold one i32, got %s",
                 args.bad_id_count.describe().c_str());
    ck.on_gpu("bad_id_count", args.bad_id_count);
    ck.aligned("bad_id_count", args.bad_id_count, 4);
  }
  FMOE_REQUIRE(T <= 65535 && top_k <= 1024, "moe_gemv_nvfp4: T = %lld, k = %lld: at most 65535 tokens and 1024 routes per token",
               (long long)T, (long long)top_k);
  p.b_nvfp4 = false;
  p.b = x.data;
  p.b_stride = x.stride[0];
  p.ids = static_cast<const int32_t*>(ids.data);
  p.ids_stride = ids.stride[0];
  p.route_w = static_cast<const float*>(args.topk_weights.data);
  p.route_w_stride = args.topk_weights.stride[0];
  p.T = int(T);
  p.top_k = int(top_k);
  p.bad_id_count = static_cast<int*>(args.bad_id_count.data);
  p.c = y.data;
  p.c_stride_l = y.stride[0];
  p.c_stride_m = y.stride[1];
  p.pdl = args.pdl;

  detail::GemvProblem& prob = pr.prob;
  prob.mode = GemvMode::grouped;
  prob.M = N;
  prob.K = K;
  prob.T = T;
  prob.top_k = top_k;
  std::string why = a_fast_why_not(p);
  if (why.empty() && (reinterpret_cast<uintptr_t>(p.b) % 16 || p.b_stride % 8))
    why = "the rows of x are not 16-byte aligned";
  if (why.empty() && top_k > 32) why = strf("k = %lld routes per token (the fast kernel plans at most 32)", (long long)top_k);
  prob.fast_ok = why.empty();
  prob.fast_why_not = why;
  pr.device = ck.device;
  pr.empty = T == 0 || N == 0;
  return pr;
}

}  // namespace

void gemv_nvfp4(const GemvNvfp4Args& args, Stream stream) {
  Prepared pr = prepare(args);
  run(pr, stream);
}

void moe_gemv_nvfp4(const MoeGemvNvfp4Args& args, Stream stream) {
  Prepared pr = prepare(args);
  run(pr, stream);
}

namespace detail {
GemvChoice plan_gemv_nvfp4(const GemvNvfp4Args& args) {
  Prepared pr = prepare(args);
  return choose(pr);
}
GemvChoice plan_moe_gemv_nvfp4(const MoeGemvNvfp4Args& args) {
  Prepared pr = prepare(args);
  return choose(pr);
}
}  // namespace detail

}  // namespace fusedmoe
