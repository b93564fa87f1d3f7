// One MoE layer of a model on the GPU from the CPU reference's weights, and the check of its
// output against the reference. Shared by `fusedmoe run` (tools/run.cpp), `fusedmoe bench --op
// layer` (bench/layer.cpp) and the GPU layer tests. Header-only, CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/parallel.hpp"
#include "fusedmoe/checkpoint.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/layer.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::cli {

/// The reference's weights uploaded in checkpoint layouts, and the layer prepared from them.
struct GpuLayer {
  std::vector<DeviceBuffer> buffers;  // the checkpoint-layout tensors (MoeLayer copies them)
  MoeLayerWeights weights;            // views of `buffers`: more MoeLayers can be built from them
  std::unique_ptr<MoeLayer> layer;
};

namespace layer_case_detail {

inline DType weight_dtype(const ref::WeightSet& w) {
  switch (w.precision) {
    case Precision::bf16: return DType::bf16;
    case Precision::fp8_block: return DType::e4m3;
    case Precision::nvfp4:
    case Precision::mxfp4: return DType::e2m1x2;
  }
  return DType::bf16;
}

// The matrices of `w` with `lead` leading dimensions ({E} or none), each [N, K].
inline TensorRef upload_values(std::vector<DeviceBuffer>& bufs, const ref::WeightSet& w,
                               std::vector<int64_t> shape) {
  if (w.precision == Precision::nvfp4 || w.precision == Precision::mxfp4) shape.back() /= 2;  // two e2m1 per byte
  bufs.push_back(w.precision == Precision::bf16 ? DeviceBuffer::from(w.bf16) : DeviceBuffer::from(w.q));
  TensorRef t = TensorRef::contiguous(bufs.back().get(), weight_dtype(w), {}, Device::cuda);
  t.ndim = int(shape.size());
  for (int d = 0; d < t.ndim; ++d) t.shape[d] = shape[size_t(d)];
  for (int d = t.ndim - 1; d >= 0; --d) t.stride[d] = d == t.ndim - 1 ? 1 : t.stride[d + 1] * t.shape[d + 1];
  return t;
}

// fp8: the 128x128 block scales (`fp8_shape`); nvfp4: the e4m3 block scales [lead.., N, K/16]
// (`nvfp4_shape`); mxfp4: the ue8m0 scales [lead.., N, K/32] (nvfp4_shape's last dimension halved).
inline TensorRef upload_scales(std::vector<DeviceBuffer>& bufs, const ref::WeightSet& w,
                               std::vector<int64_t> fp8_shape, std::vector<int64_t> nvfp4_shape = {}) {
  TensorRef t;
  if (w.precision == Precision::fp8_block) {
    bufs.push_back(DeviceBuffer::from(w.scale));
    t = TensorRef::contiguous(bufs.back().get(), DType::f32, {}, Device::cuda);
  } else if (w.precision == Precision::nvfp4) {
    bufs.push_back(DeviceBuffer::from(w.block_scale));
    t = TensorRef::contiguous(bufs.back().get(), DType::e4m3, {}, Device::cuda);
    fp8_shape = nvfp4_shape;
  } else if (w.precision == Precision::mxfp4) {
    bufs.push_back(DeviceBuffer::from(w.block_scale));
    t = TensorRef::contiguous(bufs.back().get(), DType::ue8m0, {}, Device::cuda);
    fp8_shape = nvfp4_shape;
    fp8_shape.back() /= 2;
  } else {
    return {};
  }
  t.ndim = int(fp8_shape.size());
  for (int d = 0; d < t.ndim; ++d) t.shape[d] = fp8_shape[size_t(d)];
  for (int d = t.ndim - 1; d >= 0; --d) t.stride[d] = d == t.ndim - 1 ? 1 : t.stride[d + 1] * t.shape[d + 1];
  return t;
}

// nvfp4: the global scales, [E, groups] ([E] for one group) or, for a shared MLP (E = 0),
// [groups].
inline TensorRef upload_globals(std::vector<DeviceBuffer>& bufs, const ref::WeightSet& w, int64_t E) {
  if (w.precision != Precision::nvfp4) return {};
  bufs.push_back(DeviceBuffer::from(w.global_scale));
  const int64_t g = w.global_groups;
  if (E == 0) return TensorRef::contiguous(bufs.back().get(), DType::f32, {g}, Device::cuda);
  return g == 1 ? TensorRef::contiguous(bufs.back().get(), DType::f32, {E}, Device::cuda)
                : TensorRef::contiguous(bufs.back().get(), DType::f32, {E, g}, Device::cuda);
}

inline TensorRef upload_f32(std::vector<DeviceBuffer>& bufs, const std::vector<float>& v,
                            std::initializer_list<int64_t> shape) {
  if (v.empty()) return {};
  bufs.push_back(DeviceBuffer::from(v));
  return TensorRef::contiguous(bufs.back().get(), DType::f32, shape, Device::cuda);
}

// Every tensor of `w` marked as on the current CUDA device (uploads made there): TensorRef's
// default index is 0, which the layer refuses on any other device (a rank of `run --ep` on GPU r).
inline void on_current_device(MoeLayerWeights& w) {
  int device = 0;
  FMOE_CUDA(cudaGetDevice(&device));
  for (TensorRef* t : {&w.w13, &w.w13_scale, &w.w13_scale_2, &w.w2, &w.w2_scale, &w.w2_scale_2,
                       &w.b13, &w.b2, &w.routing_bias, &w.shared_w13, &w.shared_w13_scale,
                       &w.shared_w13_scale_2, &w.shared_w2, &w.shared_w2_scale,
                       &w.shared_w2_scale_2, &w.shared_gate})
    if (t->data) t->device_index = device;
}

}  // namespace layer_case_detail

/// Uploads `lw` (in the checkpoint layouts MoeLayerWeights documents) and prepares the layer.
inline GpuLayer make_gpu_layer(const ref::LayerWeights& lw, cudaStream_t stream) {
  using namespace layer_case_detail;
  const MoeConfig& c = lw.cfg;
  const int64_t E = c.num_experts, H = c.hidden, I = c.intermediate, S = c.shared_intermediate;
  auto blocks = [](int64_t n) { return (n + 127) / 128; };
  GpuLayer g;
  g.buffers.reserve(16);
  MoeLayerWeights w;
  w.w13 = upload_values(g.buffers, lw.w13, {E, 2 * I, H});
  w.w13_scale = upload_scales(g.buffers, lw.w13, {E, blocks(2 * I), blocks(H)}, {E, 2 * I, H / 16});
  w.w13_scale_2 = upload_globals(g.buffers, lw.w13, E);
  w.w2 = upload_values(g.buffers, lw.w2, {E, H, I});
  w.w2_scale = upload_scales(g.buffers, lw.w2, {E, blocks(H), blocks(I)}, {E, H, I / 16});
  w.w2_scale_2 = upload_globals(g.buffers, lw.w2, E);
  if (c.expert_bias) {
    w.b13 = upload_f32(g.buffers, lw.b13, {E, 2 * I});
    w.b2 = upload_f32(g.buffers, lw.b2, {E, H});
  }
  w.routing_bias = upload_f32(g.buffers, lw.route_bias, {E});
  if (c.num_shared_experts > 0) {
    w.shared_w13 = upload_values(g.buffers, lw.shared_w13, {2 * S, H});
    w.shared_w13_scale = upload_scales(g.buffers, lw.shared_w13, {blocks(2 * S), blocks(H)}, {2 * S, H / 16});
    w.shared_w13_scale_2 = upload_globals(g.buffers, lw.shared_w13, 0);
    w.shared_w2 = upload_values(g.buffers, lw.shared_w2, {H, S});
    w.shared_w2_scale = upload_scales(g.buffers, lw.shared_w2, {blocks(H), blocks(S)}, {H, S / 16});
    w.shared_w2_scale_2 = upload_globals(g.buffers, lw.shared_w2, 0);
    if (c.shared_expert_gate) {
      std::vector<uint16_t> bits(lw.shared_gate.size());
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = fmt::bf16_from_float(lw.shared_gate[i]);
      g.buffers.push_back(DeviceBuffer::from(bits));
      w.shared_gate = TensorRef::contiguous(g.buffers.back().get(), DType::bf16, {H}, Device::cuda);
    }
  }
  on_current_device(w);
  g.weights = w;
  g.layer = std::make_unique<MoeLayer>(c, w, stream);
  return g;
}

/// Uploads a checkpoint layer's tensors (CheckpointLayer::host_weights()) as they are and
/// prepares the layer (NVFP4: W4A16, the input scales unused). `progress(bytes_done,
/// bytes_total)` is called as the bytes go up, in pieces of at most 256 MB.
inline GpuLayer make_gpu_layer(CheckpointLayer& ck, cudaStream_t stream,
                               const std::function<void(int64_t, int64_t)>& progress = {}) {
  const MoeLayerWeights host = ck.host_weights();
  MoeLayerWeights w = host;
  TensorRef MoeLayerWeights::*const fields[] = {
      &MoeLayerWeights::w13, &MoeLayerWeights::w13_scale, &MoeLayerWeights::w13_scale_2,
      &MoeLayerWeights::w2, &MoeLayerWeights::w2_scale, &MoeLayerWeights::w2_scale_2,
      &MoeLayerWeights::b13, &MoeLayerWeights::b2, &MoeLayerWeights::routing_bias,
      &MoeLayerWeights::shared_w13, &MoeLayerWeights::shared_w13_scale,
      &MoeLayerWeights::shared_w13_scale_2, &MoeLayerWeights::shared_w2,
      &MoeLayerWeights::shared_w2_scale, &MoeLayerWeights::shared_w2_scale_2,
      &MoeLayerWeights::shared_gate};
  int64_t total = 0, done = 0;
  for (auto f : fields)
    if ((host.*f).data) total += (host.*f).numel() * int64_t(dtype_bytes((host.*f).dtype));
  GpuLayer g;
  g.buffers.reserve(std::size(fields));
  constexpr int64_t kPiece = 256 << 20;
  for (auto f : fields) {
    const TensorRef& t = host.*f;
    if (!t.data) continue;
    const int64_t bytes = t.numel() * int64_t(dtype_bytes(t.dtype));
    g.buffers.emplace_back(size_t(bytes));
    for (int64_t at = 0; at < bytes; at += kPiece) {
      const int64_t n = std::min(kPiece, bytes - at);
      g.buffers.back().upload(static_cast<const uint8_t*>(t.data) + at, size_t(n), size_t(at));
      done += n;
      if (progress) progress(done, total);
    }
    (w.*f).data = g.buffers.back().get();
    (w.*f).device = Device::cuda;
  }
  layer_case_detail::on_current_device(w);
  g.weights = w;
  g.layer = std::make_unique<MoeLayer>(ck.config, w, stream);
  return g;
}

/// Random layer weights drawn directly as codes (fp8: e4m3 codes over the non-NaN codes and
/// block scales in [0.5, 1.5) * sqrt(3/K) / 448; bf16: values uniform in +-sqrt(3/K)): seconds
/// for the largest presets, where quantizing random floats (ref::make_random_layer) takes
/// minutes. Biases, routing bias and shared gate as the reference draws them.
inline ref::WeightSet random_weight_codes(Precision p, int E, int N, int K, uint64_t seed,
                                          uint64_t stream) {
  ref::WeightSet w;
  w.precision = p;
  w.E = E;
  w.N = N;
  w.K = K;
  const int64_t n = int64_t(E) * N * K;
  const double amp = std::sqrt(3.0 / K);
  if (p == Precision::bf16) {
    w.bf16.resize(size_t(n));
    detail::parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        w.bf16[size_t(i)] = fmt::bf16_from_float(float(amp * ref::uniform_pm1(seed, stream, uint64_t(i))));
    }, 1 << 16);
    return w;
  }
  if (p == Precision::nvfp4) {
    // Random bytes (every e2m1 code), e4m3 block scales 0.5..0.94 (codes 0x30..0x3F) and one
    // global per expert, amp / 4.5: values up to about 6 * 0.94 * global ~ amp.
    w.q.resize(size_t(n / 2));
    w.block_scale.resize(size_t(n / 16));
    w.global_scale.assign(size_t(E), float(amp / (6.0 * 0.75)));
    w.global_groups = 1;
    detail::parallel_for(int64_t(w.q.size() + 7) / 8, [&](int64_t b, int64_t e) {
      for (int64_t word = b; word < e; ++word) {
        uint64_t bits = ref::hash3(seed, stream, uint64_t(word));
        for (int j = 0; j < 8 && word * 8 + j < int64_t(w.q.size()); ++j, bits >>= 8)
          w.q[size_t(word * 8 + j)] = uint8_t(bits);
      }
    }, 1 << 14);
    for (size_t i = 0; i < w.block_scale.size(); ++i)
      w.block_scale[i] = uint8_t(0x30 + (ref::hash3(seed, stream ^ 0x5CA1E, i) & 0xF));
    return w;
  }
  if (p == Precision::mxfp4) {
    // Random bytes (every e2m1 code) and UE8M0 scales 2^(e0-1) .. 2^(e0+1), 2^e0 ~ amp / 4.5 (so
    // values reach about amp, as for nvfp4); the rows' scales span 2 binades (real gpt-oss rows
    // span a few), so the 17-binade window of the prepared layout holds them all.
    w.q.resize(size_t(n / 2));
    w.block_scale.resize(size_t(n / 32));
    const int e0 = int(std::lround(std::log2(amp / 4.5)));
    detail::parallel_for(int64_t(w.q.size() + 7) / 8, [&](int64_t b, int64_t e) {
      for (int64_t word = b; word < e; ++word) {
        uint64_t bits = ref::hash3(seed, stream, uint64_t(word));
        for (int j = 0; j < 8 && word * 8 + j < int64_t(w.q.size()); ++j, bits >>= 8)
          w.q[size_t(word * 8 + j)] = uint8_t(bits);
      }
    }, 1 << 14);
    for (size_t i = 0; i < w.block_scale.size(); ++i)
      w.block_scale[i] = uint8_t(127 + e0 - 1 + int(ref::hash3(seed, stream ^ 0x5CA1E, i) % 3));
    return w;
  }
  FMOE_REQUIRE(p == Precision::fp8_block, "random_weight_codes: %s weights are not drawn as codes",
               precision_name(p));
  w.q.resize(size_t(n));
  const int64_t nb = (N + 127) / 128, kb = (K + 127) / 128;
  w.scale.resize(size_t(E * nb * kb));
  detail::parallel_for((n + 7) / 8, [&](int64_t b, int64_t e) {
    for (int64_t word = b; word < e; ++word) {
      uint64_t bits = ref::hash3(seed, stream, uint64_t(word));
      for (int j = 0; j < 8 && word * 8 + j < n; ++j, bits >>= 8) {
        uint8_t code = uint8_t(bits);
        if ((code & 0x7F) == 0x7F) code ^= 0x01;  // no NaN codes
        w.q[size_t(word * 8 + j)] = code;
      }
    }
  }, 1 << 14);
  for (size_t i = 0; i < w.scale.size(); ++i)
    w.scale[i] = float((0.5 + 0.5 * (ref::uniform_pm1(seed, stream ^ 0x5CA1E, i) + 1.0)) * amp / 448.0);
  return w;
}

inline ref::LayerWeights random_layer_codes(const MoeConfig& cfg, uint64_t seed) {
  ref::LayerWeights lw;
  lw.cfg = cfg;
  const int H = cfg.hidden, I = cfg.intermediate, E = cfg.num_experts;
  lw.w13 = random_weight_codes(cfg.weight_precision, E, 2 * I, H, seed, 0x131);
  lw.w2 = random_weight_codes(cfg.weight_precision, E, H, I, seed, 0x132);
  if (cfg.expert_bias) {
    lw.b13 = ref::random_bf16(int64_t(E) * 2 * I, seed, 0x133, 0.1f);
    lw.b2 = ref::random_bf16(int64_t(E) * H, seed, 0x134, 0.1f);
  }
  if (cfg.routing.correction_bias) lw.route_bias = ref::random_bf16(E, seed, 0x135, 0.05f);
  if (cfg.routing.router_bias) lw.route_bias = ref::random_bf16(E, seed, 0x135, 0.5f);
  if (cfg.num_shared_experts > 0) {
    const int S = cfg.shared_intermediate;
    lw.shared_w13 = random_weight_codes(cfg.weight_precision, 1, 2 * S, H, seed, 0x136);
    lw.shared_w2 = random_weight_codes(cfg.weight_precision, 1, H, S, seed, 0x137);
    if (cfg.shared_expert_gate)
      lw.shared_gate = ref::random_bf16(H, seed, 0x138, float(std::sqrt(3.0 / H)));
  }
  return lw;
}

/// The fewest bytes and the FLOPs of one layer forward on `routing`: the weights (+ fp8 scales)
/// of the routed experts it hits and of the shared MLP, x, logits and y; 2 T 3 H (k I + S).
struct LayerCost {
  double bytes = 0, weight_bytes = 0, flops = 0;
  int hit = 0;
};
inline double mlp_weight_bytes(const MoeConfig& c, int inter) {
  const double params = 3.0 * c.hidden * double(inter);
  if (c.weight_precision == Precision::bf16) return 2 * params;
  if (c.weight_precision == Precision::nvfp4) return params / 2 + params / 16 + 4.0 * 3;  // + globals
  if (c.weight_precision == Precision::mxfp4) return params / 2 + params / 32;
  const double hb = std::ceil(c.hidden / 128.0);
  return params + 4 * (std::ceil(2.0 * inter / 128) * hb + hb * std::ceil(inter / 128.0));
}
inline LayerCost layer_cost(const MoeConfig& c, const ref::Routing& routing, int T) {
  LayerCost r;
  std::vector<char> hit(size_t(c.num_experts), 0);
  for (int32_t e : routing.ids)
    if (e >= 0 && e < c.num_experts) hit[size_t(e)] = 1;
  for (char h : hit) r.hit += h;
  const int S = c.num_shared_experts > 0 ? c.shared_intermediate : 0;
  r.weight_bytes = r.hit * mlp_weight_bytes(c, c.intermediate) + (S ? mlp_weight_bytes(c, S) : 0.0);
  r.bytes = r.weight_bytes + double(T) * (4.0 * c.hidden + 4.0 * c.num_experts);
  r.flops = 2.0 * T * 3.0 * c.hidden * (double(c.top_k) * c.intermediate + S);
  return r;
}

/// GPU output y (bf16 bits) [T, H] against the reference (bf16-valued floats): the relative L2
/// error over all of y and over each token's row. The two sides round the intermediate from sums
/// a few fp32 ulps apart, so an fp8 intermediate code can differ by a step (1/16 relative) here
/// and there: the bounds are statistical (fp8 2e-2 overall, 6e-2 per row; bf16 5e-3 / 1.5e-2),
/// while a wrong expert, scale or row gives errors of order 1 in its row. NaN and Inf must sit
/// where the reference has them. (The GPU tests check each GEMM against an oracle fed the exact
/// values the kernel saw: tests/layer.)
struct LayerCheck {
  double max_abs_err = 0, rel_l2 = 0, worst_row_rel = 0, bound = 0, row_bound = 0;
  int64_t nonfinite_mismatch = 0, worst_row = -1, worst = -1;
  bool ok() const { return nonfinite_mismatch == 0 && rel_l2 <= bound && worst_row_rel <= row_bound; }
};

inline LayerCheck check_layer_output(const std::vector<uint16_t>& got_bits,
                                     const std::vector<float>& want, int H, bool fp8) {
  LayerCheck r;
  r.bound = fp8 ? 2e-2 : 5e-3;
  r.row_bound = 3 * r.bound;
  double num = 0, den = 0;
  const int64_t T = H > 0 ? int64_t(want.size()) / H : 0;
  for (int64_t t = 0; t < T; ++t) {
    double rn = 0, rd = 0;
    for (int64_t i = t * H; i < (t + 1) * H; ++i) {
      const double g = fmt::bf16_to_float(got_bits[size_t(i)]), w = want[size_t(i)];
      if (!std::isfinite(w) || !std::isfinite(g)) {
        const bool same = (std::isnan(w) && std::isnan(g)) || (std::isinf(w) && g == w);
        if (!same && r.nonfinite_mismatch++ == 0) r.worst = i;
        continue;
      }
      const double d = std::fabs(g - w);
      if (d > r.max_abs_err) {
        r.max_abs_err = d;
        if (r.nonfinite_mismatch == 0) r.worst = i;
      }
      rn += d * d;
      rd += w * w;
    }
    num += rn;
    den += rd;
    const double row_rel = rd > 0 ? std::sqrt(rn / rd) : (rn > 0 ? 1.0 : 0.0);
    if (row_rel > r.worst_row_rel) {
      r.worst_row_rel = row_rel;
      r.worst_row = t;
    }
  }
  r.rel_l2 = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
  return r;
}

inline std::string describe_layer_check(const LayerCheck& c, const std::vector<uint16_t>& got,
                                        const std::vector<float>& want, int H) {
  std::string s = strf("relative L2 %.2e (bound %.0e), worst token row %lld at %.2e (bound %.0e)",
                       c.rel_l2, c.bound, (long long)c.worst_row, c.worst_row_rel, c.row_bound);
  if (c.nonfinite_mismatch) s += strf(", %lld NaN/Inf where the reference has none", (long long)c.nonfinite_mismatch);
  if (c.worst >= 0)
    s += strf("; largest error at y[%lld, %lld]: got %.6g want %.6g", (long long)(c.worst / H),
              (long long)(c.worst % H), double(fmt::bf16_to_float(got[size_t(c.worst)])),
              double(want[size_t(c.worst)]));
  return s;
}

}  // namespace fusedmoe::cli
