// Writes a reference layer (ref::LayerWeights) as a Hugging Face checkpoint directory in the
// formats load_moe_layer reads, laid out by hand from the formats' definitions (per-expert
// gate/up/down tensors, gpt-oss's and Llama 4's [E, H, 2I] stacks, Qwen3.5's [E, 2I, H]), so a
// round trip through the loader and ref::layer_from_checkpoint must give the weights back.
#pragma once

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusedmoe/formats.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/checkpoint/safetensors_writer.hpp"

namespace fusedmoe::test::ckpt {

using st::T;

inline T tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                const void* data, size_t bytes) {
  T t{name, dtype, std::move(shape), std::vector<uint8_t>(bytes)};
  if (bytes) std::memcpy(t.bytes.data(), data, bytes);
  return t;
}

inline std::vector<uint16_t> bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = fmt::bf16_from_float(v[i]);
  return b;
}

/// Rows [r0, r0 + rows) of expert e of `w` as the tensors of one projection named `p` (+
/// ".weight" and its scales). nvfp4: weight_scale_2 = the expert's global scale times `s2_mul`,
/// input_scale = `input_scale`.
inline void projection(std::vector<T>& out, const std::string& p, const ref::WeightSet& w, int e,
                       int r0, int rows, float s2_mul = 1.0f, float input_scale = 0.5f) {
  const int64_t N = w.N, K = w.K;
  switch (w.precision) {
    case Precision::bf16:
      out.push_back(tensor(p + ".weight", "BF16", {rows, K}, w.bf16.data() + (e * N + r0) * K,
                           size_t(rows * K) * 2));
      return;
    case Precision::fp8_block: {
      out.push_back(tensor(p + ".weight", "F8_E4M3", {rows, K}, w.q.data() + (e * N + r0) * K,
                           size_t(rows * K)));
      const int64_t kb = (K + 127) / 128, nb = (N + 127) / 128, rb = (rows + 127) / 128;
      out.push_back(tensor(p + ".weight_scale_inv", "F32", {rb, kb},
                           w.scale.data() + (e * nb + r0 / 128) * kb, size_t(rb * kb) * 4));
      return;
    }
    case Precision::nvfp4: {
      out.push_back(tensor(p + ".weight", "U8", {rows, K / 2},
                           w.q.data() + (e * N + r0) * (K / 2), size_t(rows * K / 2)));
      out.push_back(tensor(p + ".weight_scale", "F8_E4M3", {rows, K / 16},
                           w.block_scale.data() + (e * N + r0) * (K / 16), size_t(rows * K / 16)));
      const float s2 = w.global_scale[size_t(e)] * s2_mul;
      out.push_back(tensor(p + ".weight_scale_2", "F32", {}, &s2, 4));
      out.push_back(tensor(p + ".input_scale", "F32", {}, &input_scale, 4));
      return;
    }
    case Precision::mxfp4:  // no per-expert MXFP4 layout exists: fused() writes gpt-oss's
      throw std::logic_error("ckpt::projection: MXFP4 is written by ckpt::fused (gpt-oss)");
  }
}

/// Seeded bf16 router weights [E, H] (a checkpoint's router is independent of the experts).
inline std::vector<uint16_t> router_bits(int E, int H, uint64_t seed) {
  return bf16_bits(ref::random_bf16(int64_t(E) * H, seed, 0xB0, 0.1f));
}

struct Names {
  std::string block = "model.layers.3.mlp.";  // the layer's MoE block
  std::string gate = "gate_proj", up = "up_proj", down = "down_proj";
  std::string shared = "shared_experts.";     // DeepSeek; Qwen: "shared_expert."
  std::string router = "gate.weight";
};

/// Per-expert tensors (DeepSeek / Qwen / ModelOpt / Mixtral names).
inline std::vector<T> per_expert(const ref::LayerWeights& lw, const Names& n, uint64_t seed) {
  const MoeConfig& c = lw.cfg;
  const int E = c.num_experts, H = c.hidden, I = c.intermediate, S = c.shared_intermediate;
  std::vector<T> out;
  for (int j = 0; j < E; ++j) {
    const std::string ex = n.block + "experts." + std::to_string(j) + ".";
    projection(out, ex + n.gate, lw.w13, j, 0, I);
    projection(out, ex + n.up, lw.w13, j, I, I);
    projection(out, ex + n.down, lw.w2, j, 0, H);
  }
  const std::vector<uint16_t> r = router_bits(E, H, seed);
  out.push_back(tensor(n.block + n.router, "BF16", {E, H}, r.data(), r.size() * 2));
  if (c.routing.correction_bias)
    out.push_back(tensor(n.block + "gate.e_score_correction_bias", "F32", {E},
                         lw.route_bias.data(), size_t(E) * 4));
  if (c.num_shared_experts > 0) {
    projection(out, n.block + n.shared + n.gate, lw.shared_w13, 0, 0, S);
    projection(out, n.block + n.shared + n.up, lw.shared_w13, 0, S, S);
    projection(out, n.block + n.shared + n.down, lw.shared_w2, 0, 0, H);
    if (c.shared_expert_gate) {
      const std::vector<uint16_t> g = bf16_bits(lw.shared_gate);
      out.push_back(tensor(n.block + "shared_expert_gate.weight", "BF16", {1, H}, g.data(), g.size() * 2));
    }
  }
  return out;
}

/// [E, R, C] bf16 -> [E, C, R].
inline std::vector<uint16_t> transpose(const std::vector<uint16_t>& v, int E, int R, int C) {
  std::vector<uint16_t> t(v.size());
  for (int e = 0; e < E; ++e)
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        t[(size_t(e) * C + c) * R + r] = v[(size_t(e) * R + r) * C + c];
  return t;
}

enum class Fused { qwen3_5, gpt_oss, llama4 };

/// Fused expert tensors (bf16 layers): Qwen3.5's experts.gate_up_proj [E, 2I, H] and
/// down_proj [E, H, I]; gpt-oss's and Llama 4's [E, H, 2I] and [E, I, H] (gpt-oss with its
/// biases and router bias; Llama 4 with its shared expert). An mxfp4 gpt-oss layer is written as
/// its release ships it: gate_up_proj_blocks U8 [E, 2I, H/32, 16] + _scales U8 [E, 2I, H/32],
/// down_proj_blocks [E, H, I/32, 16] + _scales [E, H, I/32] (rows [out, in], not transposed).
inline std::vector<T> fused(const ref::LayerWeights& lw, Fused f, const std::string& block, uint64_t seed) {
  const MoeConfig& c = lw.cfg;
  const int E = c.num_experts, H = c.hidden, I = c.intermediate, S = c.shared_intermediate;
  std::vector<T> out;
  const std::string ex = block + "experts.";
  if (lw.w13.precision == Precision::mxfp4) {
    out.push_back(tensor(ex + "gate_up_proj_blocks", "U8", {E, 2 * I, H / 32, 16}, lw.w13.q.data(), lw.w13.q.size()));
    out.push_back(tensor(ex + "gate_up_proj_scales", "U8", {E, 2 * I, H / 32}, lw.w13.block_scale.data(),
                         lw.w13.block_scale.size()));
    out.push_back(tensor(ex + "down_proj_blocks", "U8", {E, H, I / 32, 16}, lw.w2.q.data(), lw.w2.q.size()));
    out.push_back(tensor(ex + "down_proj_scales", "U8", {E, H, I / 32}, lw.w2.block_scale.data(),
                         lw.w2.block_scale.size()));
  } else if (f == Fused::qwen3_5) {
    out.push_back(tensor(ex + "gate_up_proj", "BF16", {E, 2 * I, H}, lw.w13.bf16.data(), lw.w13.bf16.size() * 2));
    out.push_back(tensor(ex + "down_proj", "BF16", {E, H, I}, lw.w2.bf16.data(), lw.w2.bf16.size() * 2));
  } else {
    const std::vector<uint16_t> gu = transpose(lw.w13.bf16, E, 2 * I, H), d = transpose(lw.w2.bf16, E, H, I);
    out.push_back(tensor(ex + "gate_up_proj", "BF16", {E, H, 2 * I}, gu.data(), gu.size() * 2));
    out.push_back(tensor(ex + "down_proj", "BF16", {E, I, H}, d.data(), d.size() * 2));
  }
  const std::vector<uint16_t> r = router_bits(E, H, seed);
  const std::string router = block + (f == Fused::qwen3_5 ? "gate.weight" : "router.weight");
  out.push_back(tensor(router, "BF16", {E, H}, r.data(), r.size() * 2));
  if (f == Fused::gpt_oss) {
    const std::vector<uint16_t> b13 = bf16_bits(lw.b13), b2 = bf16_bits(lw.b2), rb = bf16_bits(lw.route_bias);
    out.push_back(tensor(ex + "gate_up_proj_bias", "BF16", {E, 2 * I}, b13.data(), b13.size() * 2));
    out.push_back(tensor(ex + "down_proj_bias", "BF16", {E, H}, b2.data(), b2.size() * 2));
    out.push_back(tensor(block + "router.bias", "BF16", {E}, rb.data(), rb.size() * 2));
  }
  if (c.num_shared_experts > 0) {
    const std::string sp = block + "shared_expert.";
    projection(out, sp + "gate_proj", lw.shared_w13, 0, 0, S);
    projection(out, sp + "up_proj", lw.shared_w13, 0, S, S);
    projection(out, sp + "down_proj", lw.shared_w2, 0, 0, H);
    if (c.shared_expert_gate) {
      const std::vector<uint16_t> g = bf16_bits(lw.shared_gate);
      out.push_back(tensor(block + "shared_expert_gate.weight", "BF16", {1, H}, g.data(), g.size() * 2));
    }
  }
  return out;
}

/// Writes `ts` as model.safetensors (shards == 1) or as `shards` files listed by
/// model.safetensors.index.json (tensor i in shard i % shards).
inline void write_model(const std::string& dir, const std::vector<T>& ts, int shards = 1) {
  if (shards == 1) {
    st::write(dir + "/model.safetensors", st::file_of(ts));
    return;
  }
  std::string wm;
  for (int s = 0; s < shards; ++s) {
    std::vector<T> part;
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    for (size_t i = size_t(s); i < ts.size(); i += size_t(shards)) {
      part.push_back(ts[i]);
      wm += std::string(wm.empty() ? "" : ",") + "\"" + ts[i].name + "\":\"" + file + "\"";
    }
    st::write(dir + "/" + file, st::file_of(part));
  }
  st::write(dir + "/model.safetensors.index.json", "{\"metadata\":{},\"weight_map\":{" + wm + "}}");
}

}  // namespace fusedmoe::test::ckpt
