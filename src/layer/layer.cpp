// Host side of the MoE layer: weight validation and the one-time preparation, the workspace, the
// config choice and the five stage launches of a forward call (see layer_plan.hpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_state.hpp"
#include "common/env.hpp"
#include "common/tensor_check.hpp"
#include "common/tma.hpp"
#include "common/parallel.hpp"
#include "fusedmoe/formats.hpp"
#include "gemm/e2m1_layout.hpp"
#include "layer/layer_plan.hpp"
#include "layer/prepare.hpp"
#include "route/route.hpp"
#include "route/routing_host.hpp"

namespace fusedmoe {
namespace {


// The tables in the GEMM's and the schedule kernel's shared memory hold every expert a layer can
// have: the routing's limit plus the shared chunks.
static_assert(detail::kGemmMaxExperts >= detail::kRouteMaxExperts + detail::kMaxSharedChunks,
              "the grouped GEMM's expert tables are smaller than the routing's limit + shared chunks");
static_assert(detail::kScheduleMaxExperts >= detail::kRouteMaxExperts + detail::kMaxSharedChunks,
              "the schedule kernel's expert tables are smaller than the routing's limit + shared chunks");

constexpr const char* kOp = "MoeLayer";
constexpr size_t kAlign = 256;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

template <class T>
std::vector<T> to_host(const TensorRef& t, cudaStream_t stream) {
  std::vector<T> out(size_t(t.numel()));
  if (!out.empty())
    FMOE_CUDA(cudaMemcpyAsync(out.data(), t.data, out.size() * sizeof(T), cudaMemcpyDeviceToHost,
                              stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  return out;
}

// A bias tensor [rows, cols] (f32 or bf16) as floats on the host.
std::vector<float> bias_to_host(const TensorRef& t, cudaStream_t stream) {
  if (t.dtype == DType::f32) return to_host<float>(t, stream);
  const std::vector<uint16_t> bits = to_host<uint16_t>(t, stream);
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = fmt::bf16_to_float(bits[i]);
  return out;
}

// align: bytes of alignment of the base and the row strides (0: 4 for f32, else 16, what the
// TMA-read layouts need; the NVFP4 tensors are re-laid on the host and take any, 1).
void check_weight(const char* name, const TensorRef& t, DType dtype,
                  std::initializer_list<int64_t> shape, int device, int align = 0) {
  using namespace detail;
  check_dtype(kOp, name, t, dtype);
  check_shape(kOp, name, t, shape);
  check_contiguous(kOp, name, t);
  check_aligned(kOp, name, t, align ? align : dtype == DType::f32 ? 4 : 16);
  check_data(kOp, name, t);
  check_on_device(kOp, name, t);
  check_same_device(kOp, name, t, device);
}

void check_bias(const char* name, const TensorRef& t, std::initializer_list<int64_t> shape,
                int device) {
  FMOE_REQUIRE(t.dtype == DType::f32 || t.dtype == DType::bf16, "%s: %s must be f32 or bf16, got %s",
               kOp, name, dtype_name(t.dtype));
  detail::check_shape(kOp, name, t, shape);
  detail::check_contiguous(kOp, name, t);
  detail::check_data(kOp, name, t);
  detail::check_on_device(kOp, name, t);
  detail::check_same_device(kOp, name, t, device);
}

// NVFP4 gate/up global scales: [E, 2] (gate, up) or [E] (one per expert); shared (E = 0): [2]
// or [1].
void check_global_scales(const char* name, const TensorRef& t, int E, int device) {
  const bool two = E > 0 ? (t.ndim == 2 && t.shape[1] == 2) : (t.ndim == 1 && t.shape[0] == 2);
  if (E > 0) {
    if (two) check_weight(name, t, DType::f32, {E, 2}, device);
    else check_weight(name, t, DType::f32, {E}, device);
  } else {
    check_weight(name, t, DType::f32, {two ? 2 : 1}, device);
  }
}

void require_absent(const char* name, const TensorRef& t, const char* why) {
  FMOE_REQUIRE(t.data == nullptr, "%s: %s was given but %s", kOp, name, why);
}

// Source row of prepared GEMM 1 row `pr` (0 .. NT1*128) of an expert: per 16 rows (group g), 8 gate
// rows of the tile's intermediate indices swiglu_intermediate(g, 0..7, thread_order), then their 8
// up rows (grouped_gemm.hpp: blocked order 8g .. 8g+7; thread order, for the fp8 gate/up GEMM
// with tokens as wgmma's M side, lets each thread store a token's 16 codes at once). Returns the
// row of the checkpoint's [2I, H] matrix, or -1 for padding (intermediate index >= n_inter).
// `i_base` shifts the intermediate index (a shared chunk's first index).
int64_t gate_up_source_row(int pr, int64_t i_base, int64_t n_inter, bool interleaved, bool thread_order) {
  const int tile = pr / 128, g = (pr % 128) / 16, r = pr % 16;
  const bool up = r >= 8;
  const int64_t i = i_base + int64_t(tile) * 64 + detail::swiglu_intermediate(g, r % 8, thread_order);
  if (i >= n_inter || i < i_base) return -1;
  if (interleaved) return 2 * i + (up ? 1 : 0);
  return up ? n_inter + i : i;
}

// Row r of a prepared GEMM 2 tile holds output row paired_output(r) (grouped_gemm.hpp), so the
// combine adds two adjacent outputs per reduction.
using detail::paired_output;

// A 4-bit matrix's scales checked on the device (the decode takes finite, non-negative block
// scales, e2m1_layout.hpp: a NaN or negative scale is a malformed checkpoint, not something to
// multiply); for MXFP4 each row's largest UE8M0 code, on the device (the prepare kernel reads it)
// and on the host (the row factors).
struct E2m1DeviceMatrix {
  detail::E2m1Source src;
  DeviceBuffer row_max;
  std::vector<int32_t> row_max_host;
};
E2m1DeviceMatrix check_e2m1(const char* name, const TensorRef& codes, const TensorRef& scales,
                            int64_t K, bool mx, cudaStream_t stream) {
  E2m1DeviceMatrix m;
  const int64_t n = scales.numel(), per_row = K / (mx ? 32 : 16);
  const int64_t rows = per_row > 0 ? n / per_row : 0;
  DeviceBuffer first_bad = DeviceBuffer::from(std::vector<unsigned long long>{(unsigned long long)n}, stream);
  if (mx) m.row_max = DeviceBuffer(size_t(std::max<int64_t>(rows, 1)) * sizeof(int32_t));
  detail::E2m1ScaleScanParams sp{static_cast<const uint8_t*>(scales.data), n,
                                 first_bad.get<unsigned long long>(), mx,
                                 mx ? m.row_max.get<int32_t>() : nullptr, per_row};
  detail::launch_e2m1_scale_scan(sp, stream);
  unsigned long long bad = 0;
  FMOE_CUDA(cudaMemcpyAsync(&bad, first_bad.get(), sizeof(bad), cudaMemcpyDeviceToHost, stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  if (int64_t(bad) < n) {
    uint8_t c = 0;
    FMOE_CUDA(cudaMemcpy(&c, static_cast<const uint8_t*>(scales.data) + bad, 1, cudaMemcpyDeviceToHost));
    const long long row = (long long)(int64_t(bad) / per_row), block = (long long)(int64_t(bad) % per_row);
    FMOE_REQUIRE(!mx, "%s: %s_scale holds the NaN scale code 0xff at row %lld, column block %lld "
                 "(MXFP4 scales must be finite)", kOp, name, row, block);
    FMOE_REQUIRE(false, "%s: %s_scale holds %s block scale code 0x%02x at row %lld, column block "
                 "%lld (NVFP4 block scales must be finite and non-negative)", kOp, name,
                 (c & 0x7F) == 0x7F ? "the NaN" : "a negative", c, row, block);
  }
  if (mx) {
    m.row_max_host.resize(size_t(rows));
    if (rows > 0)
      FMOE_CUDA(cudaMemcpy(m.row_max_host.data(), m.row_max.get(), size_t(rows) * sizeof(int32_t),
                           cudaMemcpyDeviceToHost));
  }
  m.src = {static_cast<const uint8_t*>(codes.data), static_cast<const uint8_t*>(scales.data),
           mx ? m.row_max.get<int32_t>() : nullptr, K};
  return m;
}

std::vector<float> global_scales_to_host(const char* name, const TensorRef& t, cudaStream_t stream) {
  std::vector<float> g = to_host<float>(t, stream);
  for (size_t i = 0; i < g.size(); ++i)
    FMOE_REQUIRE(std::isfinite(g[i]) && g[i] >= 0.0f,
                 "%s: %s[%zu] = %g; NVFP4 global scales must be finite and non-negative", kOp, name,
                 i, double(g[i]));
  return g;
}

// NVFP4 / MXFP4 weights: checked and re-laid into e2m1 blocks on the device, in the prepared
// row orders of the bf16/fp8 paths (GEMM 1: 8-row gate/up pairs, shared chunks appended; GEMM 2:
// paired output rows), and each prepared row's fp32 factor * 2^26 (the decode's product carries
// 2^-26): NVFP4's global scale, or MXFP4's per-row power of two. The host builds only the
// per-row tables (where each prepared row comes from, its factor).
void prepare_e2m1_weights(MoeLayer::Impl& L, const MoeLayerWeights& w, bool interleaved,
                          cudaStream_t stream) {
  const int E = L.E, H = L.H, I = L.I, S = L.S;
  const float unit = std::ldexp(1.0f, detail::e2m1::kProductShift);
  const E2m1DeviceMatrix w13 = check_e2m1("w13", w.w13, w.w13_scale, H, L.mx, stream);
  const E2m1DeviceMatrix w2 = check_e2m1("w2", w.w2, w.w2_scale, I, L.mx, stream);
  std::vector<float> g13, g2;
  if (!L.mx) {
    g13 = global_scales_to_host("w13_scale_2", w.w13_scale_2, stream);
    g2 = global_scales_to_host("w2_scale_2", w.w2_scale_2, stream);
  }
  const int g13_per = int(g13.size()) / E;  // 2: gate, up; 1: one per expert
  E2m1DeviceMatrix sw13, sw2;
  std::vector<float> sg13, sg2;
  if (L.C > 0) {
    sw13 = check_e2m1("shared_w13", w.shared_w13, w.shared_w13_scale, H, L.mx, stream);
    sw2 = check_e2m1("shared_w2", w.shared_w2, w.shared_w2_scale, S, L.mx, stream);
    if (!L.mx) {
      sg13 = global_scales_to_host("shared_w13_scale_2", w.shared_w13_scale_2, stream);
      sg2 = global_scales_to_host("shared_w2_scale_2", w.shared_w2_scale_2, stream);
    }
  }
  const int rows1 = L.NT1 * 128, rows2 = L.NB2 * 128;
  const int KB1 = int(cdiv(H, detail::e2m1::kBlockK)), KB2 = L.I_pad / detail::e2m1::kBlockK;
  auto relayout = [&](DeviceBuffer& dst, int64_t tiles, int KB, const std::vector<detail::E2m1RowRef>& refs,
                      const E2m1DeviceMatrix& main, const E2m1DeviceMatrix& shared) {
    dst = DeviceBuffer(size_t(tiles) * KB * detail::e2m1::kBlockBytes);
    const DeviceBuffer d_refs = DeviceBuffer::from(refs, stream);
    detail::E2m1PrepareParams pp{dst.get<uint8_t>(), tiles, KB, d_refs.get<detail::E2m1RowRef>(),
                                 {main.src, shared.src}, L.mx};
    detail::launch_e2m1_prepare(pp, stream);
    FMOE_CUDA(cudaStreamSynchronize(stream));  // before the row table is freed
  };

  // GEMM 1: prepared expert e < E is expert e; e >= E is shared chunk e - E.
  std::vector<detail::E2m1RowRef> refs1(size_t(L.E_total) * rows1);
  std::vector<float> rs1(size_t(L.E_total) * rows1, 0.0f);
  for (int e = 0; e < L.E_total; ++e)
    for (int pr = 0; pr < rows1; ++pr) {
      const bool shared = e >= E;
      const int64_t n_inter = shared ? S : I, i_base = shared ? int64_t(e - E) * L.I_pad : 0;
      const int64_t src = gate_up_source_row(pr, i_base, n_inter, interleaved, false);
      if (src < 0) continue;
      const int64_t row = shared ? src : int64_t(e) * 2 * I + src;
      refs1[size_t(e) * rows1 + pr] = {row, 0, H, shared ? 1 : 0, 0};
      if (L.mx) {
        const int32_t c_max = (shared ? sw13 : w13).row_max_host[size_t(row)];
        rs1[size_t(e) * rows1 + pr] = std::ldexp(unit, detail::e2m1::mx_row_factor_log2(c_max));
        continue;
      }
      const int up = interleaved ? int(src % 2) : int(src >= n_inter);
      const float g = shared ? sg13[sg13.size() == 2 ? up : 0] : g13[size_t(e) * g13_per + (g13_per == 2 ? up : 0)];
      rs1[size_t(e) * rows1 + pr] = g * unit;
    }
  relayout(L.w13, int64_t(L.E_total) * L.NT1, KB1, refs1, w13, sw13);
  L.w13_row_scale = DeviceBuffer::from(rs1, stream);

  // GEMM 2: rows paired; shared chunk c takes the shared MLP's columns [c I_pad, (c+1) I_pad).
  std::vector<detail::E2m1RowRef> refs2(size_t(L.E_total) * rows2);
  std::vector<float> rs2(size_t(L.E_total) * rows2, 0.0f);
  for (int e = 0; e < L.E_total; ++e)
    for (int pr = 0; pr < H; ++pr) {
      const int out = paired_output(pr);
      detail::E2m1RowRef& r = refs2[size_t(e) * rows2 + pr];
      if (e < E) {
        r = {int64_t(e) * H + out, 0, I, 0, 0};
      } else {
        const int64_t col0 = int64_t(e - E) * L.I_pad;
        r = {out, int32_t(col0), int32_t(std::min<int64_t>(L.I_pad, S - col0)), 1, 0};
      }
      rs2[size_t(e) * rows2 + pr] =
          L.mx ? std::ldexp(unit, detail::e2m1::mx_row_factor_log2((e < E ? w2 : sw2).row_max_host[size_t(r.row)]))
               : (e < E ? g2[size_t(e)] : sg2[0]) * unit;
    }
  relayout(L.w2, int64_t(L.E_total) * L.NB2, KB2, refs2, w2, sw2);
  L.w2_row_scale = DeviceBuffer::from(rs2, stream);
}

}  // namespace

// ================================================================================================
// Construction: validation and the one-time preparation.
// ================================================================================================
MoeLayer::MoeLayer(const MoeConfig& cfg, const MoeLayerWeights& w, Stream stream_in)
    : impl_(std::make_unique<Impl>()) {
  using namespace detail;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_in);
  Impl& L = *impl_;
  cfg.validate();
  L.cfg = cfg;
  L.mx = cfg.weight_precision == Precision::mxfp4;
  L.e2m1 = L.mx || cfg.weight_precision == Precision::nvfp4;
  if (L.e2m1) {
    // Hopper has no FP4 tensor cores: the weights are decoded to bf16 in registers (W4A16).
    FMOE_REQUIRE(cfg.activation_precision == Precision::bf16,
                 "%s: the GPU layer runs %s weights with bf16 activations (W4A16); the config "
                 "has %s activations (set activation_precision to bf16)", kOp,
                 L.mx ? "MXFP4" : "NVFP4", precision_name(cfg.activation_precision));
  } else {
    FMOE_REQUIRE(cfg.activation_precision == cfg.weight_precision,
                 "%s: activations must be in the weights' precision on the GPU (%s weights, %s "
                 "activations)", kOp, precision_name(cfg.weight_precision),
                 precision_name(cfg.activation_precision));
  }
  L.fp8 = cfg.weight_precision == Precision::fp8_block;
  L.E = cfg.num_experts;
  L.k = cfg.top_k;
  L.H = cfg.hidden;
  L.I = cfg.intermediate;
  L.S = cfg.num_shared_experts > 0 ? cfg.shared_intermediate : 0;
  L.on_input = cfg.routing.fn == RoutingFn::sigmoid_top1_on_input;
  const bool interleaved = cfg.activation.fn == ActivationFn::swiglu_clamped;
  FMOE_REQUIRE(L.H % 16 == 0 && L.I % 16 == 0 && L.S % 16 == 0,
               "%s: hidden=%d, intermediate=%d and shared_intermediate=%d must be multiples of 16",
               kOp, L.H, L.I, L.S);
  FMOE_REQUIRE(L.E <= kRouteMaxExperts, "%s: %d experts; the GPU routing takes at most %d", kOp,
               L.E, kRouteMaxExperts);
  L.I_pad = int(cdiv(L.I, 64) * 64);
  L.NT1 = L.I_pad / 64;
  L.NB2 = int(cdiv(L.H, 128));
  L.C = L.S > 0 ? int(cdiv(L.S, L.I_pad)) : 0;
  FMOE_REQUIRE(L.C <= kMaxSharedChunks,
               "%s: the shared MLP (intermediate %d) would need %d chunks of the expert "
               "intermediate %d; at most %d are supported", kOp, L.S, L.C, L.I_pad, kMaxSharedChunks);
  FMOE_REQUIRE(!L.fp8 || L.C <= 1 || L.I_pad % 128 == 0,
               "%s: an FP8 shared MLP split into %d chunks needs the expert intermediate (%d) to "
               "be a multiple of 128, so each chunk starts on a 128-column scale block", kOp, L.C,
               L.I);
  L.E_total = L.E + L.C;
  L.k_total = L.k + L.C;
  FMOE_REQUIRE(L.k_total <= 32, "%s: top_k + shared chunks = %d exceeds 32", kOp, L.k_total);
  FMOE_REQUIRE(int64_t(L.E_total) * L.NT1 * 128 < (int64_t(1) << 31) &&
                   int64_t(L.E_total) * L.H < (int64_t(1) << 31),
               "%s: %d experts x %d rows exceed the int32 TMA coordinate range", kOp, L.E_total,
               std::max(L.NT1 * 128, L.H));

  FMOE_CUDA(cudaGetDevice(&L.device));
  const DeviceState& ds = current_device_state(kOp, w.w13.device_index);
  (void)ds;
  const DType wt = L.fp8 ? DType::e4m3 : L.e2m1 ? DType::e2m1x2 : DType::bf16;
  const int eb = L.fp8 ? 1 : 2;
  const int E = L.E, H = L.H, I = L.I, S = L.S;
  const int64_t KBh = cdiv(H, 128);
  const int vd = L.e2m1 ? 2 : 1;  // elements per stored byte unit of the last dimension
  const int walign = L.e2m1 ? 1 : 0;
  check_weight("w13", w.w13, wt, {E, 2 * I, H / vd}, L.device, walign);
  check_weight("w2", w.w2, wt, {E, H, I / vd}, L.device, walign);
  if (!L.e2m1 || L.mx) {
    for (auto [name, t] : {std::pair{"w13_scale_2", &w.w13_scale_2}, {"w2_scale_2", &w.w2_scale_2},
                           {"shared_w13_scale_2", &w.shared_w13_scale_2},
                           {"shared_w2_scale_2", &w.shared_w2_scale_2}})
      require_absent(name, *t, "only NVFP4 weights have global scales");
  }
  if (L.mx) {
    check_weight("w13_scale", w.w13_scale, DType::ue8m0, {E, 2 * I, H / 32}, L.device, 1);
    check_weight("w2_scale", w.w2_scale, DType::ue8m0, {E, H, I / 32}, L.device, 1);
  } else if (L.e2m1) {
    check_weight("w13_scale", w.w13_scale, DType::e4m3, {E, 2 * I, H / 16}, L.device, 1);
    check_weight("w2_scale", w.w2_scale, DType::e4m3, {E, H, I / 16}, L.device, 1);
    check_global_scales("w13_scale_2", w.w13_scale_2, E, L.device);
    check_weight("w2_scale_2", w.w2_scale_2, DType::f32, {E}, L.device);
  } else if (L.fp8) {
    check_weight("w13_scale", w.w13_scale, DType::f32, {E, cdiv(2 * I, 128), KBh}, L.device);
    check_weight("w2_scale", w.w2_scale, DType::f32, {E, cdiv(H, 128), cdiv(I, 128)}, L.device);
  } else {
    require_absent("w13_scale", w.w13_scale, "bf16 weights have no scales");
    require_absent("w2_scale", w.w2_scale, "bf16 weights have no scales");
  }
  if (cfg.expert_bias) {
    check_bias("b13", w.b13, {E, 2 * I}, L.device);
    check_bias("b2", w.b2, {E, H}, L.device);
  } else {
    require_absent("b13", w.b13, "the config has no expert biases (expert_bias)");
    require_absent("b2", w.b2, "the config has no expert biases (expert_bias)");
  }
  if (routing_needs_bias(cfg.routing)) {
    check_weight("routing_bias", w.routing_bias, DType::f32, {E}, L.device);
  } else {
    require_absent("routing_bias", w.routing_bias, "the routing function uses no bias");
  }
  if (L.S > 0) {
    check_weight("shared_w13", w.shared_w13, wt, {2 * S, H / vd}, L.device, walign);
    check_weight("shared_w2", w.shared_w2, wt, {H, S / vd}, L.device, walign);
    if (L.mx) {
      check_weight("shared_w13_scale", w.shared_w13_scale, DType::ue8m0, {2 * S, H / 32}, L.device, 1);
      check_weight("shared_w2_scale", w.shared_w2_scale, DType::ue8m0, {H, S / 32}, L.device, 1);
    } else if (L.e2m1) {
      check_weight("shared_w13_scale", w.shared_w13_scale, DType::e4m3, {2 * S, H / 16}, L.device, 1);
      check_weight("shared_w2_scale", w.shared_w2_scale, DType::e4m3, {H, S / 16}, L.device, 1);
      check_global_scales("shared_w13_scale_2", w.shared_w13_scale_2, 0, L.device);
      check_weight("shared_w2_scale_2", w.shared_w2_scale_2, DType::f32, {1}, L.device);
    } else if (L.fp8) {
      check_weight("shared_w13_scale", w.shared_w13_scale, DType::f32, {cdiv(2 * S, 128), KBh}, L.device);
      check_weight("shared_w2_scale", w.shared_w2_scale, DType::f32, {cdiv(H, 128), cdiv(S, 128)}, L.device);
    }
  } else {
    require_absent("shared_w13", w.shared_w13, "the config has no shared experts");
  }
  if (cfg.shared_expert_gate) {
    FMOE_REQUIRE(w.shared_gate.numel() == H, "%s: shared_gate must hold H=%d values ([H] or [1, H]), got %s",
                 kOp, H, w.shared_gate.describe().c_str());
    check_dtype(kOp, "shared_gate", w.shared_gate, DType::bf16);
    check_contiguous(kOp, "shared_gate", w.shared_gate);
    check_aligned(kOp, "shared_gate", w.shared_gate, 16);
    check_on_device(kOp, "shared_gate", w.shared_gate);
    check_same_device(kOp, "shared_gate", w.shared_gate, L.device);
  } else {
    require_absent("shared_gate", w.shared_gate, "the config has no shared_expert_gate");
  }

  if (L.e2m1) {
    prepare_e2m1_weights(L, w, interleaved, stream);
  } else {
    // ---- GEMM 1 weights: 8-row gate/up pairs, padded to NT1 tiles, shared chunks appended ----
    const int rows1 = L.NT1 * 128;
    const int64_t row1_bytes = int64_t(H) * eb;
    L.w13.resize(size_t(L.E_total) * rows1 * row1_bytes);
    L.w2.resize(size_t(L.E_total) * H * L.I_pad * eb);
    auto gather = [&](DeviceBuffer& dst, int64_t dst_row0, int64_t dst_row_bytes, const void* src,
                      const std::vector<int64_t>& offs, const std::vector<int32_t>& bytes) {
      const DeviceBuffer d_offs = DeviceBuffer::from(offs, stream), d_bytes = DeviceBuffer::from(bytes, stream);
      GatherRowsParams gp{dst.get<uint8_t>() + dst_row0 * dst_row_bytes, dst_row_bytes,
                          static_cast<const uint8_t*>(src), d_offs.get<int64_t>(),
                          d_bytes.get<int32_t>(), int64_t(offs.size())};
      launch_gather_rows(gp, stream);
      FMOE_CUDA(cudaStreamSynchronize(stream));  // before the index buffers are freed
    };
    // ---- GEMM 2 weights: [E_total, H, I_pad], zero columns past I (or past S for the last chunk),
    // rows paired: in each 16, rows r < 8 are outputs 2r and rows r >= 8 outputs 2(r-8)+1, so the
    // combine adds two adjacent outputs per reduction (paired_rows; scales stay per 128 rows) ----
    const int64_t row2_bytes = int64_t(L.I_pad) * eb;
    {
      std::vector<int64_t> offs(size_t(E) * H);
      std::vector<int32_t> bytes(offs.size(), int32_t(int64_t(I) * eb));
      for (int e = 0; e < E; ++e)
        for (int r = 0; r < H; ++r)
          offs[size_t(e) * H + r] = (int64_t(e) * H + paired_output(r)) * I * eb;
      gather(L.w2, 0, row2_bytes, w.w2.data, offs, bytes);
    }
    if (L.C > 0) {
      std::vector<int64_t> offs(size_t(L.C) * H);
      std::vector<int32_t> bytes(offs.size());
      for (int c = 0; c < L.C; ++c)
        for (int r = 0; r < H; ++r) {
          const int64_t col0 = int64_t(c) * L.I_pad, cols = std::min<int64_t>(L.I_pad, S - col0);
          offs[size_t(c) * H + r] = (int64_t(paired_output(r)) * S + col0) * eb;
          bytes[size_t(c) * H + r] = int32_t(std::max<int64_t>(cols, 0) * eb);
        }
      gather(L.w2, int64_t(E) * H, row2_bytes, w.shared_w2.data, offs, bytes);
    }
    // ---- scales (fp8): one per 8-row group for GEMM 1, DeepSeek's per 128x128 block for GEMM 2 --
    if (L.fp8) {
      const std::vector<float> s13 = to_host<float>(w.w13_scale, stream);
      const std::vector<float> s2 = to_host<float>(w.w2_scale, stream);
      std::vector<float> sh13, sh2;
      if (L.C > 0) {
        sh13 = to_host<float>(w.shared_w13_scale, stream);
        sh2 = to_host<float>(w.shared_w2_scale, stream);
      }
      std::vector<float> p13(size_t(L.E_total) * L.NT1 * KBh * 16, 0.0f);
      std::vector<char> real13(p13.size(), 0);  // the group has rows of the checkpoint
      for (int e = 0; e < L.E_total; ++e) {
        const bool shared = e >= E;
        const int64_t n_inter = shared ? S : I, i_base = shared ? int64_t(e - E) * L.I_pad : 0;
        const int64_t blocks_per_row = KBh;
        for (int t = 0; t < L.NT1; ++t)
          for (int g2 = 0; g2 < 16; ++g2) {
            // Group g2 = 2 g + half: rows 16 g + 8 half .. + 7 of tile t.
            const int pr = t * 128 + 16 * (g2 / 2) + 8 * (g2 % 2);
            // (the blocked order's groups: see w13_thread_order below)
            const int64_t src = gate_up_source_row(pr, i_base, n_inter, interleaved, false);
            for (int64_t kb = 0; kb < KBh; ++kb) {
              float v = 0.0f;
              if (src >= 0) {
                const int64_t blk_row = src / 128;
                v = shared ? sh13[size_t(blk_row * blocks_per_row + kb)]
                           : s13[size_t((int64_t(e) * cdiv(2 * I, 128) + blk_row) * blocks_per_row + kb)];
              }
              p13[size_t(((int64_t(e) * L.NT1 + t) * KBh + kb) * 16 + g2)] = v;
              real13[size_t(((int64_t(e) * L.NT1 + t) * KBh + kb) * 16 + g2)] = src >= 0;
            }
          }
      }
      // Two scales per tile and k-block (one for the gate half, one for the up half; true whenever
      // I is a multiple of 64, as a 64-aligned run of rows never crosses a 128-row scale block)?
      // Then padding groups (zero rows) take their half's scale, so groups 0 and 1 hold the two.
      L.w13_two_scales = true;
      for (size_t base = 0; base < p13.size(); base += 16)
        for (int half = 0; half < 2; ++half) {
          int first = -1;
          for (int g2 = half; g2 < 16; g2 += 2)
            if (real13[base + g2]) {
              if (first < 0) first = g2;
              else if (p13[base + g2] != p13[base + first]) L.w13_two_scales = false;
            }
          if (first >= 0 && L.w13_two_scales)
            for (int g2 = half; g2 < 16; g2 += 2)
              if (!real13[base + g2]) p13[base + g2] = p13[base + first];
        }
      L.w13_scale = DeviceBuffer::from(p13, stream);
      const int64_t KB2 = cdiv(L.I_pad, 128), KB2s = cdiv(S, 128);
      std::vector<float> p2(size_t(L.E_total) * L.NB2 * KB2, 0.0f);
      std::copy(s2.begin(), s2.end(), p2.begin());  // routed: [E, NB2, ceil(I/128)] = KB2 columns
      for (int c = 0; c < L.C; ++c)
        for (int nb = 0; nb < L.NB2; ++nb)
          for (int64_t kb = 0; kb < KB2; ++kb) {
            const int64_t src_kb = int64_t(c) * L.I_pad / 128 + kb;  // I_pad % 128 == 0 when C > 1
            if (src_kb < KB2s)
              p2[size_t(((int64_t(E) + c) * L.NB2 + nb) * KB2 + kb)] = sh2[size_t(nb * KB2s + src_kb)];
          }
      L.w2_scale = DeviceBuffer::from(p2, stream);
      // Thread order (grouped_gemm.hpp: swiglu_intermediate) where a tile's gate groups share one
      // scale and its up groups another, as the per-8-row-group scales above are the blocked
      // order's: then any order within a tile reads the same scales.
      L.w13_thread_order = L.w13_two_scales;
    }
    // ---- GEMM 1 weights, in the order just chosen ----
    {
      std::vector<int64_t> offs(size_t(E) * rows1);
      std::vector<int32_t> bytes(offs.size());
      for (int e = 0; e < E; ++e)
        for (int pr = 0; pr < rows1; ++pr) {
          const int64_t src = gate_up_source_row(pr, 0, I, interleaved, L.w13_thread_order);
          offs[size_t(e) * rows1 + pr] = src < 0 ? 0 : (int64_t(e) * 2 * I + src) * row1_bytes;
          bytes[size_t(e) * rows1 + pr] = src < 0 ? 0 : int32_t(row1_bytes);
        }
      gather(L.w13, 0, row1_bytes, w.w13.data, offs, bytes);
    }
    if (L.C > 0) {
      std::vector<int64_t> offs(size_t(L.C) * rows1);
      std::vector<int32_t> bytes(offs.size());
      for (int c = 0; c < L.C; ++c)
        for (int pr = 0; pr < rows1; ++pr) {
          // Chunk c holds the shared MLP's intermediate indices [c*I_pad, (c+1)*I_pad).
          const int64_t i0 = int64_t(c) * L.I_pad;
          const int64_t src = gate_up_source_row(pr, i0, S, interleaved, L.w13_thread_order);
          offs[size_t(c) * rows1 + pr] = src < 0 ? 0 : src * row1_bytes;
          bytes[size_t(c) * rows1 + pr] = src < 0 ? 0 : int32_t(row1_bytes);
        }
      gather(L.w13, int64_t(E) * rows1, row1_bytes, w.shared_w13.data, offs, bytes);
    }
    const CUtensorMapDataType tma_t = L.fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    L.w13_desc = make_tma_2d("MoeLayer: w13", L.w13.get(), tma_t, eb, uint64_t(L.E_total) * rows1,
                             uint64_t(H), uint64_t(row1_bytes), 128, 128 / eb,
                             CU_TENSOR_MAP_SWIZZLE_128B);
    L.w2_desc = make_tma_2d("MoeLayer: w2", L.w2.get(), tma_t, eb, uint64_t(L.E_total) * H,
                            uint64_t(L.I_pad), uint64_t(row2_bytes), 128, 128 / eb,
                            CU_TENSOR_MAP_SWIZZLE_128B);
  }
  // ---- biases, routing bias, shared gate ----
  if (cfg.expert_bias) {
    const int rows1 = L.NT1 * 128;
    const std::vector<float> b13 = bias_to_host(w.b13, stream), b2 = bias_to_host(w.b2, stream);
    std::vector<float> p13(size_t(L.E_total) * rows1, 0.0f), p2(size_t(L.E_total) * H, 0.0f);
    for (int e = 0; e < E; ++e)
      for (int pr = 0; pr < rows1; ++pr) {
        const int64_t src = gate_up_source_row(pr, 0, I, interleaved, L.w13_thread_order);
        if (src >= 0) p13[size_t(e) * rows1 + pr] = b13[size_t(int64_t(e) * 2 * I + src)];
      }
    std::copy(b2.begin(), b2.end(), p2.begin());
    L.b13 = DeviceBuffer::from(p13, stream);
    L.b2 = DeviceBuffer::from(p2, stream);
  }
  if (w.routing_bias.data) L.routing_bias = DeviceBuffer::from(to_host<float>(w.routing_bias, stream), stream);
  if (cfg.shared_expert_gate) L.shared_gate = DeviceBuffer::from(to_host<uint16_t>(w.shared_gate, stream), stream);

  FMOE_CUDA(cudaStreamSynchronize(stream));
}

MoeLayer::~MoeLayer() = default;
MoeLayer::MoeLayer(MoeLayer&&) noexcept = default;
MoeLayer& MoeLayer::operator=(MoeLayer&&) noexcept = default;

const MoeConfig& MoeLayer::config() const { return impl_->cfg; }

size_t MoeLayer::prepared_bytes() const {
  const Impl& L = *impl_;
  return L.w13.bytes() + L.w13_scale.bytes() + L.w2.bytes() + L.w2_scale.bytes() +
         L.w13_row_scale.bytes() + L.w2_row_scale.bytes() + L.b13.bytes() +
         L.b2.bytes() + L.routing_bias.bytes() + L.shared_gate.bytes();
}

// ================================================================================================
// The workspace and one forward call.
// ================================================================================================
namespace detail {

namespace {
// Fast mode's down GEMM: fp32 atomics into the sums [T, H] (zeroed by route_quant), or one bf16
// row per route into [T * k, H] that finalize sums in route order (so deterministic too). The
// atomics read-modify-write their sums in L2 (each sum's sectors counted again by the far L2
// partition: ncu, session 43, 4.56 M sectors from the SMs, 6.84 M in all); the rows leave by TMA
// stores and finalize reads k rows a token.
// - Session 23 (H100, before the rows' TMA stores and finalize's bulk copies): rows won once the
//   sums outgrow the 50 MB L2 (qwen3.5 T=8192 1204 -> 1095 µs) and lost below (T=2048 463 -> 470).
// - Session 43 (H200, FP8 weights, layer µs atomics -> rows, unbiased routing): the rows win from
//   4 MiB of sums: qwen3-30b-a3b T=512 206.7 -> 204.1, T=1024-4096 0.954-0.960; qwen3.5-35b-a3b
//   T=512 0.997, T=1024-4096 0.956-0.982; deepseek-v3 T=512-1536 0.979-0.992; qwen3-235b-a22b
//   T=512-3072 0.960-0.987; gpt-oss-120b T=1024-4096 0.987-0.993 (T=512 1.001); mixtral-8x7b
//   0.994-1.013 (noise). Below they lose: qwen3-30b-a3b T=256 1.021, T=8 1.136 (finalize's
//   fixed cost). NVFP4 / MXFP4 weights gain nothing there (qwen3.5 T=1024 / 2048 1.014 / 1.015,
//   gpt-oss-120b 1.002-1.009), so they keep the 50 MiB line.
// - Session 44 (H200, bf16 weights, same A/B): the same 4 MiB line: qwen3-30b-a3b / qwen3.5-35b-a3b
//   T=256 1.003 / 1.007, T=512 0.999 / 0.998, T=1024 0.994 / 0.991, T=2048 0.949 / 0.988, T=4096
//   0.970 / 0.941.
// Fixed constants, so that workspace_size needs no device. FMOE_ROWS16_MIN_T=n: from T >= n
// instead (0: never).
constexpr int64_t kRows16MinSumBytesE2m1 = int64_t(50) << 20;
constexpr int64_t kRows16MinSumBytes = int64_t(4) << 20;
bool rows16_combine(int T, int H, bool e2m1, ReductionMode mode) {
  if (mode != ReductionMode::fast) return false;
  const int knob = knobs().rows16_min_t;
  if (knob >= 0) return knob > 0 && T >= knob;
  const int64_t sums = int64_t(T) * H * 4;
  return e2m1 ? sums > kRows16MinSumBytesE2m1 : sums >= kRows16MinSumBytes;
}

// GEMM 1 can split K at decode when even T=1's tiles fit the partial buffers: the smallest
// T decides whether the workspace carries them (the plan checks the call's T again).
bool split_possible(const MoeLayer::Impl& L) {
  return int64_t(L.NT1) * (std::min(L.E_total, L.k_total) + 2) <= kSplitMaxTiles;
}
}  // namespace

// Status words first: their place does not depend on T, so dropped_routes finds them.
size_t layer_workspace_layout(const MoeLayer::Impl& L, int T, ReductionMode mode, void* base,
                              LayerWorkspace* ws) {
  FMOE_REQUIRE(T >= 0, "%s: max_tokens must be >= 0, got %d", kOp, T);
  const int64_t R = int64_t(T) * L.k_total;
  FMOE_REQUIRE(R * std::max(L.H, L.I_pad) < (int64_t(1) << 40) && int64_t(T) * L.E_total < (int64_t(1) << 31),
               "%s: max_tokens=%d is too large for this layer", kOp, T);
  const int64_t t_rows = int64_t(T) * (L.on_input && L.C > 0 ? 2 : 1);
  const int eb = L.fp8 ? 1 : 2;
  size_t off = 0;
  auto take = [&](auto*& ptr, int64_t count, int64_t elem_bytes = 0) {
    using T_ = std::remove_pointer_t<std::remove_reference_t<decltype(ptr)>>;
    const int64_t b = elem_bytes ? elem_bytes : int64_t(sizeof(T_));
    if (base) ptr = reinterpret_cast<T_*>(static_cast<uint8_t*>(base) + off);
    off = align_up(off + size_t(count * b));
  };
  LayerWorkspace dummy;
  LayerWorkspace& w = ws ? *ws : dummy;
  take(w.status, kStatusWords);
  take(w.counts, L.E_total);
  take(w.tile_offsets, L.E_total + 1);
  take(w.route_offsets, L.E_total + 1);
  take(w.topk_ids, R);
  take(w.topk_weights, R);
  take(w.route_slot, R);
  take(w.route_row, rows16_combine(T, L.H, L.e2m1, mode) ? R : 0);
  take(w.sorted_route, int64_t(L.E_total) * T);
  // The rows GEMM 1 reads: fp8 always; bf16 only when they differ from x (weight on the input).
  const bool own_rows = L.fp8 || L.on_input;
  take(w.rows, own_rows ? t_rows * L.H : 0, eb);
  take(w.row_scales, L.fp8 ? t_rows * cdiv(L.H, 128) : 0);
  take(w.h, R * L.I_pad, eb);
  take(w.h_scale, L.fp8 ? R * (L.I_pad / 64) : 0);
  // fp32 sums [T, H] (fast) or rows [R, H] (deterministic: fp32; fast at prefill: bf16).
  const int64_t acc_bytes = mode == ReductionMode::fast ? int64_t(T) * L.H * 4 : R * L.H * 4;
  take(w.acc, std::max(acc_bytes, rows16_combine(T, L.H, L.e2m1, mode) ? R * L.H * 2 : 0), 1);
  const bool split = T > 0 && split_possible(L);
  take(w.split_partials, split ? int64_t(kMaxSplit) * kSplitMaxTiles * 256 * (kSplitBlockT / 2) : 0);
  take(w.split_counters, split ? kSplitMaxTiles : 0);
  return off;
}

namespace {

void fill_gemm_common(GroupedGemmParams& g, const MoeLayer::Impl& L, const LayerWorkspace& ws,
                      int T, bool fused, bool static_tiles) {
  g.counts = ws.counts;
  g.tile_offsets = ws.tile_offsets;
  g.route_offsets = ws.route_offsets;
  g.sorted_route = ws.sorted_route;
  g.topk_weights = ws.topk_weights;
  g.topk_ids = ws.topk_ids;
  g.status = ws.status;
  g.T = T;
  g.E = L.E_total;
  g.k = L.k_total;
  g.k_routed = L.k;
  g.weight_on_input = L.on_input;
  g.fused_schedule = fused;
  g.R = T * L.k_total;
  g.static_tiles = static_tiles;
  g.prefetch_units = knobs().prefetch_units;
  g.narrow_tails = knobs().narrow_tails;
}

}  // namespace

LayerPlan plan_layer_forward(const MoeLayer::Impl& L, const MoeForwardArgs& a, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream) {
  LayerPlan plan;
  const MoeConfig& cfg = L.cfg;
  // Pre-quantized rows (x_fp8): x itself may then be absent; T comes from whichever is given
  // (given: a tensor with dimensions, even an empty one).
  const bool pre = a.x_fp8.ndim > 0;
  const bool has_x = !pre || a.x.ndim > 0;
  const TensorRef& tx = has_x ? a.x : a.x_fp8;
  const char* tx_name = has_x ? "x" : "x_fp8";
  FMOE_REQUIRE(tx.ndim == 2, "%s: %s must be [T, H=%d] %s, got %s", kOp, tx_name, L.H,
               has_x ? "bf16" : "e4m3", tx.describe().c_str());
  const int T = int(tx.shape[0]), H = L.H, E = L.E, k = L.k;
  FMOE_REQUIRE(tx.shape[0] >= 0 && tx.shape[0] < (int64_t(1) << 31), "%s: %s has %lld rows", kOp,
               tx_name, (long long)tx.shape[0]);
  if (has_x) check_rows(kOp, "x", a.x, DType::bf16, T, H, 16);
  if (pre) {
    FMOE_REQUIRE(L.fp8, "%s: x_fp8 was given, but this layer's activations are %s, not fp8_block "
                 "(it quantizes nothing)", kOp, precision_name(cfg.activation_precision));
    FMOE_REQUIRE(!L.on_input, "%s: x_fp8 cannot be used with %s routing: the weight goes on the "
                 "input, so the rows are bf16(x * w), quantized after the routing", kOp,
                 routing_fn_name(cfg.routing.fn));
    FMOE_REQUIRE(has_x || L.shared_gate.get<__nv_bfloat16>() == nullptr,
                 "%s: x_fp8 was given without x, but the shared expert's gate "
                 "(shared_expert_gate) reads x: give x too", kOp);
    check_rows(kOp, "x_fp8", a.x_fp8, DType::e4m3, T, H, 16);
    check_rows(kOp, "x_fp8_scales", a.x_fp8_scales, DType::f32, T, cdiv(H, 128), 4);
  } else {
    FMOE_REQUIRE(a.x_fp8_scales.ndim == 0, "%s: x_fp8_scales was given without x_fp8", kOp);
  }
  check_rows(kOp, "y", a.y, DType::bf16, T, H, 16);
  std::vector<std::pair<const char*, const TensorRef*>> on_gpu = {{"y", &a.y}};
  if (has_x) on_gpu.push_back({"x", &a.x});
  if (pre) {
    on_gpu.push_back({"x_fp8", &a.x_fp8});
    on_gpu.push_back({"x_fp8_scales", &a.x_fp8_scales});
  }
  if (a.routing_given) {
    check_dtype(kOp, "topk_ids", a.topk_ids, DType::i32);
    check_shape(kOp, "topk_ids", a.topk_ids, {T, k});
    check_contiguous(kOp, "topk_ids", a.topk_ids);
    check_aligned(kOp, "topk_ids", a.topk_ids, 4);
    check_data(kOp, "topk_ids", a.topk_ids);
    check_dtype(kOp, "topk_weights", a.topk_weights, DType::f32);
    check_shape(kOp, "topk_weights", a.topk_weights, {T, k});
    check_contiguous(kOp, "topk_weights", a.topk_weights);
    check_aligned(kOp, "topk_weights", a.topk_weights, 4);
    check_data(kOp, "topk_weights", a.topk_weights);
    on_gpu.push_back({"topk_ids", &a.topk_ids});
    on_gpu.push_back({"topk_weights", &a.topk_weights});
  } else {
    check_dtype(kOp, "router_logits", a.router_logits, DType::f32);
    check_shape(kOp, "router_logits", a.router_logits, {T, E});
    check_unit_inner_stride(kOp, "router_logits", a.router_logits);
    check_aligned(kOp, "router_logits", a.router_logits, 4);
    check_data(kOp, "router_logits", a.router_logits);
    on_gpu.push_back({"router_logits", &a.router_logits});
  }
  for (const auto& [name, t] : on_gpu) {
    check_on_device(kOp, name, *t);
    check_same_device(kOp, name, *t, L.device);
  }
  const size_t need = layer_workspace_layout(L, T, a.mode, nullptr, nullptr);
  FMOE_REQUIRE(workspace != nullptr, "%s: workspace is null", kOp);
  FMOE_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % kAlign == 0,
               "%s: workspace must be %zu-byte aligned, got %p", kOp, kAlign, workspace);
  FMOE_REQUIRE(workspace_bytes >= need,
               "%s: workspace of %zu bytes is smaller than the %zu bytes T=%d needs (size it with "
               "workspace_size)", kOp, workspace_bytes, need, T);
  const DeviceState& ds = current_device_state(kOp, L.device);
  LayerWorkspace& ws = plan.ws;
  layer_workspace_layout(L, T, a.mode, workspace, &ws);
  if (T == 0) {
    // y is empty: nothing to compute; the status words still describe this call.
    FMOE_CUDA(cudaMemsetAsync(ws.status, 0, kStatusWords * sizeof(int32_t), stream));
    return plan;
  }
  if (a.routing_given && a.validate_routing) check_given_ids(kOp, a.topk_ids, E, stream);
  plan.T = T;
  FMOE_REQUIRE(a.max_sms >= 0, "%s: max_sms=%d must be >= 0 (0: every SM)", kOp, a.max_sms);
  const int sms = a.max_sms > 0 ? std::min(ds.sms, a.max_sms) : ds.sms;
  plan.num_sms = sms;
  const bool det = a.mode == ReductionMode::deterministic;
  const int eb = L.fp8 ? 1 : 2;
  const GemmWeights gw = L.fp8 ? GemmWeights::fp8_block : L.e2m1 ? GemmWeights::e2m1 : GemmWeights::bf16;

  // ---- configs: one token-tile width for both GEMMs (they share the schedule's table) ----
  const GemmFamily up_fam{gw, GemmRows::gathered, GemmEpilogue::swiglu};
  const GemmFamily down64_fam{gw, GemmRows::tma, GemmEpilogue::combine};
  const GemmFamily down128_fam{gw, GemmRows::tma_s128, GemmEpilogue::combine};
  int bt = select_block_t(T, k, E, knobs().force_config, {up_fam, down64_fam, down128_fam},
                          &plan.config_reason);
  const double rows = double(T) * k / E;  // expected routes per expert (select_block_t's measure)
  if (knobs().force_config.empty()) {
    if (bt < 128 && layer_wide_tiles(gw, rows, H, L.NT1, L.NB2, &plan.config_reason))
      bt = 128;
    else if (bt == 64 && layer_narrow_tiles(gw, rows, &plan.config_reason))
      bt = 32;
  }
  // Weight waves per GEMM (each has its own count of 128-row weight tiles).
  const int up_waves = select_waves(up_fam, bt, L.NT1, H, knobs().force_config, &plan.config_reason);
  const GemmOperands up_operands =
      select_operands(up_fam, bt, H, L.w13_two_scales, knobs().force_config, &plan.config_reason);
  const double hit = 1.0 - std::pow(1.0 - double(k) / E, double(T));  // P(a routed expert is hit)
  // Expected output tiles of each GEMM: token tiles of the hit experts (and the shared chunks)
  // times the weight tiles.
  const double per_hit = E * hit > 0 ? double(T) * k / (E * hit) : 0.0;
  const double token_tiles = E * hit * std::max(1.0, std::ceil(per_hit / bt)) + L.C * std::ceil(double(T) / bt);
  const int up_ctas = select_ctas(up_fam, bt, up_waves, up_operands, token_tiles * L.NT1 / up_waves, sms,
                                  knobs().force_config, &plan.config_reason);
  plan.up_config = gemm_config_of(up_fam.weights, up_fam.rows, up_fam.epilogue, bt, up_waves, up_operands, up_ctas);
  // FMOE_FORCE_CONFIG's config (checked against the families above), or count. A forced config
  // that differs from a GEMM's choice only in its k-stages (count or shape) is taken as named;
  // the other GEMM follows the rules, two-block stages included (what a tuning run compares).
  const GemmConfigId forced = knobs().force_config.empty() ? GemmConfigId::count
                                                           : gemm_config_by_name(knobs().force_config);
  if (forced != GemmConfigId::count && gemm_configs_same_tile(forced, plan.up_config))
    plan.up_config = forced;
  else
    plan.up_config = layer_two_block_stages(plan.up_config, &plan.config_reason);
  // The fp8 intermediate's scale block. A two-wave tokens-as-M gate/up tile holds 128
  // intermediate values of each token, so it can quantize them with one scale, and the down GEMM
  // then promotes once per k-stage instead of twice (measured on H200, docs/performance.md issue
  // 10 step 5: deepseek-v3's down GEMM -20% at T=8192, the qwen3 ones -22..-30% with their
  // configs). Fast mode only: deterministic mode keeps 64 columns per scale at every T, so its
  // intermediate is quantized the same whatever the token-tile width (the expert-parallel
  // layer's bitwise equality with this layer was verified on several GPUs with 64 only; with
  // 128 forced, deterministic mode measured -8..-12% at T=8192, docs/performance.md).
  // FMOE_FORCE_CONFIG naming a down config decides (and a two-wave tokens-as-M gate/up must
  // exist for 128).
  {
    const GemmConfigInfo up = gemm_config_info(plan.up_config);
    const bool up_pairs = L.fp8 && up.operands == GemmOperands::tokens_m && up.waves == 2;
    const int asked = a.intermediate_scale_block;
    FMOE_REQUIRE(asked == 0 || asked == 64 || asked == 128, "%s: intermediate_scale_block=%d must be "
                 "0 (the layer's choice), 64 or 128", kOp, asked);
    FMOE_REQUIRE(asked != 128 || !L.fp8 || up_pairs, "%s: intermediate_scale_block=128 needs GEMM 1 in "
                 "two-wave tokens-as-M tiles (fp8, BLOCK_T=128); at T=%d it runs %s", kOp, T, up.name);
    bool s128 = L.fp8 && (asked == 0 ? up_pairs && !det : asked == 128);
    if (forced != GemmConfigId::count) {
      const GemmConfigInfo f = gemm_config_info(forced);
      if (f.weights == gw && f.epilogue == GemmEpilogue::combine && f.rows != GemmRows::gathered)
        s128 = f.rows == GemmRows::tma_s128;
    }
    FMOE_REQUIRE(!s128 || up_pairs, "FMOE_FORCE_CONFIG=%s reads the intermediate with one fp8 scale per "
                 "128 columns, which only a two-wave tokens-as-M gate/up config writes; this layer's "
                 "gate/up runs %s", knobs().force_config.c_str(), up.name);
    plan.h_block = s128 ? 128 : 64;
  }
  const GemmFamily down_fam = plan.h_block == 128 ? down128_fam : down64_fam;
  const int down_waves = select_waves(down_fam, bt, L.NB2, L.I, knobs().force_config, &plan.config_reason);
  const GemmOperands down_operands =
      select_operands(down_fam, bt, L.I, true, knobs().force_config, &plan.config_reason);
  const int down_ctas = select_ctas(down_fam, bt, down_waves, down_operands, token_tiles * L.NB2 / down_waves,
                                    sms, knobs().force_config, &plan.config_reason);
  plan.down_config = gemm_config_of(down_fam.weights, down_fam.rows, down_fam.epilogue, bt, down_waves,
                                    down_operands, down_ctas);
  const int R = T * L.k_total;
  plan.fused_schedule = knobs().fused_schedule && bt <= 64 && R <= kFusedScheduleRoutes;
  // Static numbering (each expert's token tile 0 numbered before the routing exists, the rest
  // after all of them) where the experts average <= half a token tile and an expert's weights are
  // small enough that re-reading an overflowing one's is cheaper than the routing-numbered walk:
  // static_tile_numbering has the measurements. (docs/tried/walk_warp_search.diff, a cheaper
  // search in the routing-numbered walk: 0.96-1.00 of it on the qwen presets, still up to 1.05x
  // slower than static numbering there; not kept.)
  const double expert_weight_bytes = 2.0 * L.I * H * (L.fp8 ? 1.0 : L.e2m1 ? 0.5 : 2.0);  // codes, no scales
  const bool static_tiles = knobs().static_tiles &&
      static_tile_numbering(hit, rows, bt, expert_weight_bytes, &plan.config_reason);
  // GEMM 1 (whole tiles: its epilogue needs the full sum) at decode has few tiles: deepseek-v3 at
  // T=1 has 9 experts x 32 = 288, 2.2 waves on 132 SMs, so a third of the SMs idle through the
  // last wave (measured on H100: gate_up 107 us for 264 MB, 2.5 TB/s). Split K in S parts so that
  // S x the expected tiles cover >= 4 waves, when the tiles surely fit the partial buffers. The
  // parts are summed in a fixed order, so deterministic mode may split too. A part must stay long
  // enough to fill its pipeline: measured on H100 (docs/performance.md, session 21), NVFP4
  // deepseek-v3 T=1 with two parts of 56 k-blocks: gate_up 79.3 -> 70.6 us, layer 135.3 -> 129.2;
  // qwen3-30b-a3b T=1 with four parts of 8: layer 29.6 -> 34.4. So the e2m1 gate/up splits by
  // default where every part keeps >= 32 k-blocks (2048 K). FMOE_SPLIT_K=1 splits wherever a part
  // keeps 2 (for experiments; with fp8 gate_up gained at deepseek-v3 T=1, 108.4 -> 104.0 us, but
  // the layer lost, 176.2 -> 178.4, for a reason not found).
  // 4-bit weights at a few tokens: both GEMMs as decode GEMVs (decode_gemv.hpp says why). With B
  // through shared memory they beat the engine at every T they can run, measured on H100
  // (docs/performance.md, session 22, GEMVs / engine, us): qwen3-30b-a3b T=1 24.1 / 29.3, T=8
  // 75.6 / 87.9; deepseek-v3 T=1 110.9 / 128.8 (the engine with split K), T=8 481.7 / 516.4;
  // gpt-oss-120b T=1 43.0 / 48.5, T=8 153.7 / 162.4. So they run up to kDecodeGemvMaxT.
  const int gemv_max_t = knobs().gemv_max_t >= 0 ? knobs().gemv_max_t : kDecodeGemvMaxT;
  plan.gemv = L.e2m1 && T <= std::min(gemv_max_t, kDecodeGemvMaxT);
  if (plan.gemv) plan.fused_schedule = false;
  // The decode GEMVs combine by their own rule (fp32 atomics in fast mode).
  const bool rows16 = !plan.gemv && rows16_combine(T, H, L.e2m1, a.mode);
  // Configs that differ only in their k-stages: a forced one is taken as named; else the bf16
  // route rows take the twin that stages them (gemm_configs.def: a full token tile's rows leave
  // in slot order by TMA stores) where the experts average >= 128 routes, so most routes sit in
  // full tiles. Measured on H200 (session 39, call 3, layer): 256-512 routes per expert (all three
  // presets at T=8192) 0.979-0.988 of the route-order rows, the down GEMM 0.94-0.97; 64
  // (deepseek-v3 T=2048, nearly every tile partial) 1.003, the down GEMM 1.017 (3 stages, no TMA
  // store to gain). In between it was not measured. (4-bit tiles: their two-block twins.)
  {
    const GemmConfigId twin = gemm_config_staged_twin(plan.down_config);
    if (forced != GemmConfigId::count && gemm_configs_same_tile(forced, plan.down_config)) {
      plan.down_config = forced;
    } else if (rows16 && !plan.fused_schedule && twin != GemmConfigId::count && rows >= 128) {
      plan.down_config = twin;
      plan.config_reason += "; bf16 route rows: the down config that stores them in slot order by TMA";
    } else {
      plan.down_config = layer_two_block_stages(plan.down_config, &plan.config_reason);
    }
  }
  const int min_part_kb = plan.gemv ? 0 : knobs().split_k ? 2 : L.e2m1 ? 32 : 0;
  if (min_part_kb > 0 && bt == kSplitBlockT && !static_tiles && split_possible(L) &&
      int64_t(L.NT1) * (std::min<int64_t>(L.E_total, R) + R / bt + 1) <= kSplitMaxTiles) {
    const double tiles = L.NT1 * (E * hit + L.C);
    const int kb1 = int(cdiv(int64_t(H) * eb, 128));
    while (plan.split < kMaxSplit && plan.split * tiles < 4.0 * sms && kb1 / (2 * plan.split) >= min_part_kb)
      plan.split *= 2;
  }
  if (knobs().print_config)
    std::fprintf(stderr, "[fusedmoe] %s T=%d E=%d+%d k=%d+%d H=%d I=%d %s %s: %s (split K %d) + %s%s%s%s (%s)\n",
                 kOp, T, E, L.C, k, L.C, H, L.I, precision_name(cfg.weight_precision),
                 reduction_mode_name(a.mode), gemm_config_info(plan.up_config).name, plan.split,
                 gemm_config_info(plan.down_config).name,
                 plan.fused_schedule ? ", fused schedule" : plan.gemv ? ", as decode GEMVs" : "",
                 rows16 ? ", bf16 route rows" : "", plan.h_block == 128 ? ", intermediate scales per 128" : "",
                 plan.config_reason.c_str());

  // ---- stage 1: route + rows ----
  const int64_t KBh = cdiv(H, 128);
  RouteQuantParams& rq = plan.route_quant;
  set_routing_params(rq, cfg.routing, L.routing_bias.get<float>(), E, k);
  rq.logits = static_cast<const float*>(a.router_logits.data);
  rq.logits_ld = a.router_logits.ndim == 2 ? a.router_logits.stride[0] : E;
  rq.routing_given = a.routing_given;
  rq.given_ids = a.routing_given ? static_cast<const int32_t*>(a.topk_ids.data) : nullptr;
  rq.given_weights = a.routing_given ? static_cast<const float*>(a.topk_weights.data) : nullptr;
  rq.k_total = L.k_total;
  rq.shared_gate = L.shared_gate.get<__nv_bfloat16>();
  rq.x = has_x ? static_cast<const __nv_bfloat16*>(a.x.data) : nullptr;  // (read: rows, the gate)
  rq.ldx = has_x ? a.x.stride[0] : 0;
  rq.T = T;
  rq.K = H;
  rq.KB = int(KBh);
  rq.row_format = pre ? RowFormat::none  // the caller's rows: nothing to quantize
                 : L.fp8 ? RowFormat::fp8 : (L.on_input ? RowFormat::bf16 : RowFormat::none);
  rq.shared_rows = L.on_input && L.C > 0;
  rq.topk_ids = ws.topk_ids;
  rq.topk_weights = ws.topk_weights;
  rq.rows = ws.rows;
  rq.row_scales = ws.row_scales;
  rq.zero_rows = det || rows16 ? nullptr : ws.acc;
  rq.N = H;
  rq.E_total = L.E_total;
  rq.counts = ws.counts;
  rq.status = ws.status;
  rq.zero_ints = plan.split > 1 ? ws.split_counters : nullptr;
  rq.num_zero_ints = plan.split > 1 ? kSplitMaxTiles : 0;

  // ---- stage 2: schedule ----
  ScheduleParams& sp = plan.schedule;
  sp.topk_ids = ws.topk_ids;
  sp.T = T;
  sp.k = L.k_total;
  sp.E = L.E_total;
  sp.block_t = bt;
  sp.static_tiles = static_tiles;
  sp.counts = ws.counts;
  sp.tile_offsets = ws.tile_offsets;
  sp.route_offsets = ws.route_offsets;
  sp.sorted_route = ws.sorted_route;
  sp.route_slot = ws.route_slot;
  sp.status = ws.status;

  // ---- GEMM 1: gate/up, gathered rows, swiglu epilogue -> h ----
  GroupedGemmParams& g1 = plan.up;
  fill_gemm_common(g1, L, ws, T, plan.fused_schedule, static_tiles);
  g1.w_desc = L.w13_desc;
  g1.w_scale = L.w13_scale.get<float>();
  g1.w_blocks = L.e2m1 ? L.w13.get<uint8_t>() : nullptr;
  g1.row_scale = L.w13_row_scale.get<float>();
  g1.sb_groups = 16;
  g1.n_rows = L.NT1 * 128;
  if (pre) {
    g1.a = static_cast<const uint8_t*>(a.x_fp8.data);
    g1.lda = a.x_fp8.stride[0];
  } else if (L.fp8 || L.on_input) {
    g1.a = ws.rows;
    g1.lda = int64_t(H) * eb;
  } else {
    g1.a = static_cast<const uint8_t*>(a.x.data);  // bf16 rows straight from x
    g1.lda = a.x.stride[0] * 2;
  }
  g1.sa = pre ? static_cast<const float*>(a.x_fp8_scales.data) : ws.row_scales;
  g1.sa_ld = pre ? a.x_fp8_scales.stride[0] : KBh;
  g1.shared_row_offset = rq.shared_rows ? T : 0;
  g1.N = L.NT1 * 128;
  g1.K = H;
  g1.KB = int(cdiv(int64_t(H) * eb, 128));
  g1.NB = L.NT1;
  g1.bias = L.b13.get<float>();
  g1.h = ws.h;
  g1.ldh = int64_t(L.I_pad) * eb;
  g1.h_scale = ws.h_scale;
  g1.h_scale_ld = L.I_pad / plan.h_block;
  g1.h_block = plan.h_block;
  g1.thread_order = L.w13_thread_order;
  g1.act_clamped = cfg.activation.fn == ActivationFn::swiglu_clamped;
  g1.act_alpha = cfg.activation.alpha;
  g1.act_limit = cfg.activation.limit;
  g1.split = plan.split;
  g1.fetch_counters = knobs().dynamic_items & 1 && select_counter_walk(plan.up_config, g1.KB, per_hit)
                          ? ws.status + kStatusUpItems
                          : nullptr;
  g1.split_partials = ws.split_partials;
  g1.split_counters = ws.split_counters;

  // ---- GEMM 2: down, compact rows of h by TMA, combine epilogue -> acc ----
  GroupedGemmParams& g2 = plan.down;
  fill_gemm_common(g2, L, ws, T, plan.fused_schedule, static_tiles);
  g2.lean_producer = layer_lean_producer(gemm_config_info(plan.down_config).weights, bt, knobs().lean_producer);
  g2.w_desc = L.w2_desc;
  g2.w_scale = L.w2_scale.get<float>();
  g2.w_blocks = L.e2m1 ? L.w2.get<uint8_t>() : nullptr;
  g2.row_scale = L.w2_row_scale.get<float>();
  g2.sb_groups = 1;
  g2.n_rows = H;
  g2.a_desc = make_tma_2d("MoeLayer: intermediate", ws.h,
                          L.fp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                          eb, uint64_t(R), uint64_t(L.I_pad), uint64_t(L.I_pad) * eb, uint32_t(bt),
                          128 / eb, CU_TENSOR_MAP_SWIZZLE_128B);
  g2.sa = ws.h_scale;
  g2.sa_ld = L.I_pad / plan.h_block;
  g2.N = H;
  g2.K = L.I_pad;
  g2.KB = int(cdiv(int64_t(L.I_pad) * eb, 128));
  g2.NB = L.NB2;
  g2.deterministic = det || rows16;  // rows16: one (bf16) row per route, as deterministic mode
  g2.paired_rows = 1;
  g2.status = nullptr;  // GEMM 1 counts the dropped routes (both see the same ids)
  g2.fetch_counters = knobs().dynamic_items & 2 && select_counter_walk(plan.down_config, g2.KB, per_hit)
                          ? ws.status + kStatusDownItems
                          : nullptr;
  g2.out = rows16 ? nullptr : ws.acc;
  g2.out_type = rows16 ? GemmOut::bf16 : GemmOut::f32;
  g2.out_lowp = rows16 ? static_cast<void*>(ws.acc) : nullptr;
  // The staged-rows config writes its bf16 rows in slot order by TMA stores (grouped_gemm.hpp:
  // sorted_rows), and finalize reads them there.
  const bool sorted_rows = rows16 && gemm_config_staged_rows(plan.down_config) && !plan.fused_schedule;
  g2.sorted_rows = sorted_rows ? 1 : 0;
  g2.route_row = sorted_rows ? ws.route_row : nullptr;
  if (sorted_rows)
    g2.out_desc = make_tma_2d("MoeLayer: bf16 route rows", ws.acc, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                              uint64_t(R), uint64_t(H), uint64_t(H) * 2, 128, 64, CU_TENSOR_MAP_SWIZZLE_128B);
  g2.bias = L.b2.get<float>();

  // ---- or both as decode GEMVs: the same weights, routing, activations and outputs ----
  if (plan.gemv) {
    DecodeGemvParams& u = plan.gemv_up;
    u.w_blocks = g1.w_blocks;
    u.row_scale = g1.row_scale;
    u.NB = L.NT1;
    u.KB = g1.KB;
    u.bias = g1.bias;
    u.topk_ids = ws.topk_ids;
    u.topk_weights = ws.topk_weights;
    u.T = T;
    u.k = L.k_total;
    u.k_routed = L.k;
    u.E = L.E_total;
    u.weight_on_input = L.on_input;
    u.status = ws.status;
    u.a = g1.a;
    u.lda = g1.lda;
    u.shared_row_offset = g1.shared_row_offset;
    u.K = H;
    u.h = ws.h;
    u.ldh = g1.ldh;
    u.act_clamped = g1.act_clamped;
    u.act_alpha = g1.act_alpha;
    u.act_limit = g1.act_limit;
    DecodeGemvParams& dn = plan.gemv_down;
    dn = u;
    dn.w_blocks = g2.w_blocks;
    dn.row_scale = g2.row_scale;
    dn.NB = L.NB2;
    dn.KB = g2.KB;
    dn.bias = g2.bias;
    dn.status = nullptr;  // the up GEMV counted the dropped routes
    dn.a = ws.h;
    dn.lda = g1.ldh;
    dn.shared_row_offset = 0;
    dn.K = L.I_pad;
    dn.h = nullptr;
    dn.out = ws.acc;
    dn.N = H;
    dn.deterministic = det;
    // The down finds its columns and loads its first weights before its wait on the up (the
    // kernel says why it may). Measured on H200 (session 54, call 3, ABBA, even loads, layer):
    // qwen3-30b-a3b T=1 / 2 / 4 0.961 / 0.966 / 0.98, qwen3.5-35b-a3b T=1-4 0.972-0.978,
    // qwen3-235b-a22b T=1 0.976-0.979, gpt-oss-120b T=1 0.964-0.967, deepseek-v3 T=1-4
    // 0.98-0.99; geomean 0.990 / 0.983 (nvfp4, 80 rows), 0.987 / 0.993 (mxfp4).
    dn.early = knobs().gemv_down_early >= 0 ? knobs().gemv_down_early : 1;
  }

  // ---- finalize ----
  FinalizeParams& fp = plan.finalize;
  fp.deterministic = det || rows16;
  fp.T = T;
  fp.N = H;
  fp.k = L.k_total;
  fp.acc = rows16 ? nullptr : ws.acc;
  fp.rows16 = rows16 ? reinterpret_cast<const __nv_bfloat16*>(ws.acc) : nullptr;
  fp.route_slot = plan.fused_schedule || plan.gemv ? nullptr : ws.route_slot;  // rows by route
  fp.route_row = g2.sorted_rows ? ws.route_row : nullptr;
  fp.topk_ids = ws.topk_ids;
  fp.E = L.E_total;
  fp.y = static_cast<__nv_bfloat16*>(a.y.data);
  fp.ldy = a.y.stride[0];
  return plan;
}

const char* layer_stage_name(LayerStage s) {
  switch (s) {
    case LayerStage::route_quant: return "route_quant";
    case LayerStage::schedule: return "schedule";
    case LayerStage::gate_up: return "gate_up";
    case LayerStage::down: return "down";
    case LayerStage::finalize: return "finalize";
  }
  return "?";
}

void run_layer_stage(const LayerPlan& plan, LayerStage stage, cudaStream_t stream) {
  if (plan.T == 0) return;
  switch (stage) {
    case LayerStage::route_quant: return launch_route_quant(plan.route_quant, stream);
    case LayerStage::schedule:
      if (plan.fused_schedule || plan.gemv) return;  // the GEMMs build it, or the GEMVs need none
      return launch_schedule(plan.schedule, plan.num_sms, stream);
    case LayerStage::gate_up:
      if (plan.gemv) return launch_decode_gemv_up(plan.gemv_up, plan.num_sms, stream);
      return launch_grouped_gemm(plan.up_config, plan.up, plan.num_sms, stream);
    case LayerStage::down:
      if (plan.gemv) return launch_decode_gemv_down(plan.gemv_down, plan.num_sms, stream);
      return launch_grouped_gemm(plan.down_config, plan.down, plan.num_sms, stream);
    case LayerStage::finalize: return launch_finalize(plan.finalize, stream);
  }
}

}  // namespace detail

size_t MoeLayer::workspace_size(int max_tokens, ReductionMode mode) const {
  return detail::layer_workspace_layout(*impl_, max_tokens, mode, nullptr, nullptr);
}

void MoeLayer::forward(const MoeForwardArgs& args, void* workspace, size_t workspace_bytes,
                       Stream stream_in) const {
  using namespace detail;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_in);
  const LayerPlan plan = plan_layer_forward(*impl_, args, workspace, workspace_bytes, stream);
  for (LayerStage s : kLayerStages) run_layer_stage(plan, s, stream);
}

int MoeLayer::dropped_routes(const void* workspace, Stream stream) const {
  FMOE_REQUIRE(workspace, "MoeLayer::dropped_routes: workspace is null");
  int32_t dropped = 0;
  FMOE_CUDA(cudaMemcpyAsync(&dropped, static_cast<const int32_t*>(workspace) + detail::kStatusDropped,
                            sizeof(dropped), cudaMemcpyDeviceToHost,
                            reinterpret_cast<cudaStream_t>(stream)));
  FMOE_CUDA(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  return dropped;
}

}  // namespace fusedmoe
