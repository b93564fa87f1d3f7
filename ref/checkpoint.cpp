// A checkpoint layer (include/fusedmoe/checkpoint.hpp) as the reference's LayerWeights: the
// stored codes and scales are the reference's operands as they are, so the CPU reference of a
// real layer multiplies exactly the values the checkpoint holds.
#include <cstring>

#include "fusedmoe/checkpoint.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/ref.hpp"

namespace fusedmoe::ref {
namespace {

void release(HostTensor& t) { t = HostTensor{}; }

void require_shape(const char* what, const HostTensor& t, DType dtype,
                   const std::vector<int64_t>& shape) {
  FMOE_REQUIRE(t.dtype == dtype && t.shape == shape,
               "ref::layer_from_checkpoint: %s must be %s with %zu dimensions as its config says, "
               "it is %s with %zu", what, dtype_name(dtype), shape.size(), dtype_name(t.dtype),
               t.shape.size());
}

// bf16 or f32 values as floats; the tensor is released.
std::vector<float> floats(HostTensor& t) {
  std::vector<float> out;
  if (t.dtype == DType::f32) {
    out.resize(t.bytes.size() / 4);
    std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
  } else {
    FMOE_REQUIRE(t.dtype == DType::bf16, "ref::layer_from_checkpoint: a bias or gate must be f32 "
                 "or bf16, got %s", dtype_name(t.dtype));
    out.resize(t.bytes.size() / 2);
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, t.bytes.data() + 2 * i, 2);
      out[i] = fmt::bf16_to_float(b);
    }
  }
  release(t);
  return out;
}

// E matrices [N, K] from values (+ scales, + nvfp4 global scales in `groups` row groups).
WeightSet weight_set(const char* what, Precision p, int E, int N, int K, bool stacked,
                     HostTensor& values, HostTensor& scale, HostTensor& scale_2, int groups) {
  auto lead = [&](std::vector<int64_t> s) {
    if (stacked) s.insert(s.begin(), E);
    return s;
  };
  WeightSet w;
  w.precision = p;
  w.E = E;
  w.N = N;
  w.K = K;
  switch (p) {
    case Precision::bf16:
      require_shape(what, values, DType::bf16, lead({N, K}));
      w.bf16.resize(values.bytes.size() / 2);
      std::memcpy(w.bf16.data(), values.bytes.data(), values.bytes.size());
      release(values);
      break;
    case Precision::fp8_block:
      require_shape(what, values, DType::e4m3, lead({N, K}));
      require_shape(what, scale, DType::f32, lead({(N + 127) / 128, (K + 127) / 128}));
      w.q.assign(values.bytes.begin(), values.bytes.end());
      w.scale = floats(scale);
      release(values);
      break;
    case Precision::nvfp4:
      require_shape(what, values, DType::e2m1x2, lead({N, K / 2}));
      require_shape(what, scale, DType::e4m3, lead({N, K / 16}));
      FMOE_REQUIRE(scale_2.dtype == DType::f32 && scale_2.bytes.size() == size_t(E) * groups * 4,
                   "ref::layer_from_checkpoint: %s needs %d global scales per expert", what, groups);
      w.q.assign(values.bytes.begin(), values.bytes.end());
      w.block_scale.assign(scale.bytes.begin(), scale.bytes.end());
      w.global_scale = floats(scale_2);
      w.global_groups = groups;
      release(values);
      release(scale);
      break;
    case Precision::mxfp4:
      require_shape(what, values, DType::e2m1x2, lead({N, K / 2}));
      require_shape(what, scale, DType::ue8m0, lead({N, K / 32}));
      w.q.assign(values.bytes.begin(), values.bytes.end());
      w.block_scale.assign(scale.bytes.begin(), scale.bytes.end());
      release(values);
      release(scale);
      break;
  }
  return w;
}

}  // namespace

LayerWeights layer_from_checkpoint(CheckpointLayer&& ck) {
  const MoeConfig& c = ck.config;
  c.validate();
  const Precision p = c.weight_precision;
  const int E = c.num_experts, H = c.hidden, I = c.intermediate, S = c.shared_intermediate;
  LayerWeights lw;
  lw.cfg = c;
  // NVFP4 checkpoints scale the gate and up projections apart: two global scales per expert.
  const int g13 = p == Precision::nvfp4 ? 2 : 1;
  lw.w13 = weight_set("w13", p, E, 2 * I, H, true, ck.w13, ck.w13_scale, ck.w13_scale_2, g13);
  lw.w2 = weight_set("w2", p, E, H, I, true, ck.w2, ck.w2_scale, ck.w2_scale_2, 1);
  if (c.expert_bias) {
    FMOE_REQUIRE(ck.b13.bytes.size() == size_t(E) * 2 * I * dtype_bytes(ck.b13.dtype) &&
                     ck.b2.bytes.size() == size_t(E) * H * dtype_bytes(ck.b2.dtype),
                 "ref::layer_from_checkpoint: the expert biases must be [E, 2I] and [E, H]");
    lw.b13 = floats(ck.b13);
    lw.b2 = floats(ck.b2);
  }
  if (c.routing.correction_bias || c.routing.router_bias) {
    FMOE_REQUIRE(ck.routing_bias.bytes.size() == size_t(E) * 4 && ck.routing_bias.dtype == DType::f32,
                 "ref::layer_from_checkpoint: the routing bias must be [E] f32");
    lw.route_bias = floats(ck.routing_bias);
  }
  if (c.num_shared_experts > 0) {
    lw.shared_w13 = weight_set("shared_w13", p, 1, 2 * S, H, false, ck.shared_w13,
                               ck.shared_w13_scale, ck.shared_w13_scale_2, g13);
    lw.shared_w2 = weight_set("shared_w2", p, 1, H, S, false, ck.shared_w2, ck.shared_w2_scale,
                              ck.shared_w2_scale_2, 1);
    if (c.shared_expert_gate) {
      FMOE_REQUIRE(ck.shared_gate.bytes.size() == size_t(H) * dtype_bytes(ck.shared_gate.dtype),
                   "ref::layer_from_checkpoint: the shared expert gate must hold H values");
      lw.shared_gate = floats(ck.shared_gate);
    }
  }
  ck = CheckpointLayer{};
  return lw;
}

}  // namespace fusedmoe::ref
