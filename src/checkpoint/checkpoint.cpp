// load_moe_layer (include/fusedmoe/checkpoint.hpp): names and layouts of the supported formats.
#include "fusedmoe/checkpoint.hpp"

#include <cstring>
#include <string>

#include "checkpoint/safetensors.hpp"
#include "common/json.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"

namespace fusedmoe {

TensorRef HostTensor::ref() {
  TensorRef r;
  if (empty()) return r;
  r.data = bytes.data();
  r.dtype = dtype;
  r.ndim = int(shape.size());
  int64_t stride = 1;
  for (int d = r.ndim - 1; d >= 0; --d) {
    r.shape[d] = shape[d];
    r.stride[d] = stride;
    stride *= shape[d];
  }
  r.device = Device::cpu;
  return r;
}

MoeLayerWeights CheckpointLayer::host_weights() {
  MoeLayerWeights w;
  w.w13 = w13.ref();
  w.w13_scale = w13_scale.ref();
  w.w2 = w2.ref();
  w.w2_scale = w2_scale.ref();
  w.routing_bias = routing_bias.ref();
  w.shared_w13 = shared_w13.ref();
  w.shared_w13_scale = shared_w13_scale.ref();
  w.shared_w2 = shared_w2.ref();
  w.shared_w2_scale = shared_w2_scale.ref();
  w.shared_gate = shared_gate.ref();
  return w;
}

namespace {

using detail::StDType;

HostTensor make(DType t, std::vector<int64_t> shape) {
  HostTensor h;
  h.dtype = t;
  h.shape = std::move(shape);
  size_t n = dtype_bytes(t);
  for (int64_t d : h.shape) n *= size_t(d);
  h.bytes.assign(n, 0);
  return h;
}

int64_t cdiv128(int64_t x) { return (x + 127) / 128; }

struct Reader {
  const detail::SafetensorsModel& model;
  const std::string& dir;
  uint64_t* bytes_read;

  // The tensor `name`, checked to hold `want` elements of `shape`.
  detail::StView get(const std::string& name, StDType want, const std::vector<int64_t>& shape) const {
    FMOE_REQUIRE(model.has(name), "checkpoint %s: tensor %s is missing", json::printable(dir).c_str(),
                 json::printable(name).c_str());
    const detail::StView v = model.get(name);
    FMOE_REQUIRE(v.tensor->dtype == want && v.tensor->shape == shape,
                 "checkpoint %s: tensor %s must be %s %s, it is %s (file %s)",
                 json::printable(dir).c_str(), json::printable(name).c_str(), detail::st_shape_text(shape).c_str(),
                 detail::st_dtype_name(want), v.tensor->describe().c_str(),
                 json::printable(*v.file).c_str());
    *bytes_read += v.tensor->bytes();
    return v;
  }
  // Copies tensor `name` (`shape`, `want`) to dst (its bytes, contiguous).
  void copy(const std::string& name, StDType want, const std::vector<int64_t>& shape, uint8_t* dst) const {
    const detail::StView v = get(name, want, shape);
    if (v.tensor->bytes()) std::memcpy(dst, v.data, v.tensor->bytes());
  }
};

}  // namespace

CheckpointLayer load_moe_layer(const std::string& dir, int layer,
                               void (*progress)(uint64_t, uint64_t, void*), void* progress_arg) {
  CheckpointLayer L;
  L.layer = layer;
  L.config = config_from_hf_json_file(dir + "/config.json");
  const MoeConfig& c = L.config;
  FMOE_REQUIRE(layer >= 0, "load_moe_layer: layer must be >= 0, got %d", layer);
  FMOE_REQUIRE(c.weight_precision == Precision::fp8_block || c.weight_precision == Precision::bf16,
               "checkpoint %s: %s weights are not read yet (per-expert FP8 128x128 block and BF16 "
               "checkpoints are)", json::printable(dir).c_str(), precision_name(c.weight_precision));
  FMOE_REQUIRE(!c.expert_bias, "checkpoint %s: %s's fused gate_up_proj layout with biases is not "
               "read yet", json::printable(dir).c_str(), json::printable(c.name).c_str());
  const bool fp8 = c.weight_precision == Precision::fp8_block;
  const StDType wt = fp8 ? StDType::f8_e4m3 : StDType::bf16;
  const DType dt = fp8 ? DType::e4m3 : DType::bf16;
  const int64_t E = c.num_experts, H = c.hidden, I = c.intermediate, S = c.shared_intermediate;
  FMOE_REQUIRE(!fp8 || I % 128 == 0, "checkpoint %s: FP8 block scales of the gate and up "
               "projections stack only when the expert intermediate size is a multiple of 128, "
               "it is %lld", json::printable(dir).c_str(), (long long)I);

  const detail::SafetensorsModel model(dir);
  const Reader rd{model, dir, &L.bytes_read};
  const std::string p = "model.layers." + std::to_string(layer) + ".mlp.";
  FMOE_REQUIRE(model.has(p + "experts.0.gate_proj.weight") || !model.has(p + "experts.gate_up_proj"),
               "checkpoint %s: layer %d stores its experts fused (experts.gate_up_proj, the gpt-oss / "
               "Llama-4 layout), which is not read yet", json::printable(dir).c_str(), layer);

  L.w13 = make(dt, {E, 2 * I, H});
  L.w2 = make(dt, {E, H, I});
  const int64_t hb = cdiv128(H), ib = cdiv128(I);
  if (fp8) {
    L.w13_scale = make(DType::f32, {E, 2 * ib, hb});
    L.w2_scale = make(DType::f32, {E, hb, ib});
  }
  const size_t eb = dtype_bytes(dt), proj = size_t(I * H) * eb, sproj = size_t(ib * hb) * 4;
  const uint64_t total = uint64_t(L.w13.bytes.size() + L.w2.bytes.size());
  for (int64_t j = 0; j < E; ++j) {
    const std::string ex = p + "experts." + std::to_string(j) + ".";
    uint8_t* w13 = L.w13.bytes.data() + size_t(j) * 2 * proj;
    rd.copy(ex + "gate_proj.weight", wt, {I, H}, w13);
    rd.copy(ex + "up_proj.weight", wt, {I, H}, w13 + proj);
    rd.copy(ex + "down_proj.weight", wt, {H, I}, L.w2.bytes.data() + size_t(j) * proj);
    if (fp8) {
      uint8_t* s13 = L.w13_scale.bytes.data() + size_t(j) * 2 * sproj;
      rd.copy(ex + "gate_proj.weight_scale_inv", StDType::f32, {ib, hb}, s13);
      rd.copy(ex + "up_proj.weight_scale_inv", StDType::f32, {ib, hb}, s13 + sproj);
      rd.copy(ex + "down_proj.weight_scale_inv", StDType::f32, {hb, ib},
              L.w2_scale.bytes.data() + size_t(j) * sproj);
    }
    if (progress) progress(uint64_t(j + 1) * 3 * proj, total, progress_arg);
  }

  // The router (its logits are the layer's input; kept for callers that compute them).
  {
    const std::string name = p + "gate.weight";
    FMOE_REQUIRE(model.has(name), "checkpoint %s: tensor %s is missing", json::printable(dir).c_str(),
                 name.c_str());
    const StDType rt = model.get(name).tensor->dtype == StDType::f32 ? StDType::f32 : StDType::bf16;
    L.router_weight = make(rt == StDType::f32 ? DType::f32 : DType::bf16, {E, H});
    rd.copy(name, rt, {E, H}, L.router_weight.bytes.data());
  }
  if (c.routing.correction_bias) {
    const std::string name = p + "gate.e_score_correction_bias";
    L.routing_bias = make(DType::f32, {E});
    FMOE_REQUIRE(model.has(name), "checkpoint %s: tensor %s is missing", json::printable(dir).c_str(),
                 name.c_str());
    if (model.get(name).tensor->dtype == StDType::bf16) {  // stored in bf16 by some exports
      const detail::StView v = rd.get(name, StDType::bf16, {E});
      float* out = reinterpret_cast<float*>(L.routing_bias.bytes.data());
      for (int64_t e = 0; e < E; ++e) {
        uint16_t bits;
        std::memcpy(&bits, v.data + 2 * e, 2);
        out[e] = fmt::bf16_to_float(bits);
      }
    } else {
      rd.copy(name, StDType::f32, {E}, L.routing_bias.bytes.data());
    }
  }

  if (c.num_shared_experts > 0) {
    // DeepSeek: mlp.shared_experts.*; Qwen: mlp.shared_expert.* and mlp.shared_expert_gate.
    const std::string sp = p + (model.has(p + "shared_experts.gate_proj.weight") ? "shared_experts."
                                                                                 : "shared_expert.");
    FMOE_REQUIRE(!fp8 || S % 128 == 0, "checkpoint %s: the shared expert's intermediate size must "
                 "be a multiple of 128 for FP8 block scales, it is %lld", json::printable(dir).c_str(),
                 (long long)S);
    const int64_t sb = cdiv128(S);
    const size_t sp_bytes = size_t(S * H) * eb, ss_bytes = size_t(sb * hb) * 4;
    L.shared_w13 = make(dt, {2 * S, H});
    L.shared_w2 = make(dt, {H, S});
    rd.copy(sp + "gate_proj.weight", wt, {S, H}, L.shared_w13.bytes.data());
    rd.copy(sp + "up_proj.weight", wt, {S, H}, L.shared_w13.bytes.data() + sp_bytes);
    rd.copy(sp + "down_proj.weight", wt, {H, S}, L.shared_w2.bytes.data());
    if (fp8) {
      L.shared_w13_scale = make(DType::f32, {2 * sb, hb});
      L.shared_w2_scale = make(DType::f32, {hb, sb});
      rd.copy(sp + "gate_proj.weight_scale_inv", StDType::f32, {sb, hb}, L.shared_w13_scale.bytes.data());
      rd.copy(sp + "up_proj.weight_scale_inv", StDType::f32, {sb, hb},
              L.shared_w13_scale.bytes.data() + ss_bytes);
      rd.copy(sp + "down_proj.weight_scale_inv", StDType::f32, {hb, sb}, L.shared_w2_scale.bytes.data());
    }
    if (c.shared_expert_gate) {
      L.shared_gate = make(DType::bf16, {1, H});
      rd.copy(p + "shared_expert_gate.weight", StDType::bf16, {1, H}, L.shared_gate.bytes.data());
    }
  }
  return L;
}

}  // namespace fusedmoe
