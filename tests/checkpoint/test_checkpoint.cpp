// load_moe_layer (include/fusedmoe/checkpoint.hpp) on small checkpoints the test writes: every
// tensor lands at its place in the MoeLayerWeights layouts; missing or mis-shaped tensors and
// unsupported layouts give an Error naming the key.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fusedmoe/checkpoint.hpp"
#include "fusedmoe/error.hpp"
#include "tests/checkpoint/safetensors_writer.hpp"
#include "tests/test_util.hpp"

namespace fusedmoe {
namespace {

using namespace test::st;
using test::expect_error;

const char* kFp8 = R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
  "fmt": "e4m3", "weight_block_size": [128, 128]})";

// A DeepSeek-shaped layer 3 (H=256, I=128, E=3, one shared expert of 128, correction bias).
std::vector<T> deepseek_tensors(bool fp8) {
  const std::string dt = fp8 ? "F8_E4M3" : "BF16";
  const std::string p = "model.layers.3.mlp.";
  std::vector<T> ts;
  int seed = 1;
  for (int j = 0; j < 3; ++j) {
    const std::string ex = p + "experts." + std::to_string(j) + ".";
    ts.push_back(make(ex + "gate_proj.weight", dt, {128, 256}, seed++));
    ts.push_back(make(ex + "up_proj.weight", dt, {128, 256}, seed++));
    ts.push_back(make(ex + "down_proj.weight", dt, {256, 128}, seed++));
    if (fp8) {
      ts.push_back(make(ex + "gate_proj.weight_scale_inv", "F32", {1, 2}, seed++));
      ts.push_back(make(ex + "up_proj.weight_scale_inv", "F32", {1, 2}, seed++));
      ts.push_back(make(ex + "down_proj.weight_scale_inv", "F32", {2, 1}, seed++));
    }
  }
  for (const char* w : {"gate", "up"}) {
    ts.push_back(make(p + "shared_experts." + w + "_proj.weight", dt, {128, 256}, seed++));
    if (fp8) ts.push_back(make(p + "shared_experts." + w + "_proj.weight_scale_inv", "F32", {1, 2}, seed++));
  }
  ts.push_back(make(p + "shared_experts.down_proj.weight", dt, {256, 128}, seed++));
  if (fp8) ts.push_back(make(p + "shared_experts.down_proj.weight_scale_inv", "F32", {2, 1}, seed++));
  ts.push_back(make(p + "gate.weight", "BF16", {3, 256}, seed++));
  ts.push_back(make(p + "gate.e_score_correction_bias", "F32", {3}, seed++));
  return ts;
}

std::string deepseek_config(bool fp8) {
  return std::string(R"({"model_type": "deepseek_v3", "hidden_size": 256,
    "moe_intermediate_size": 128, "n_routed_experts": 3, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5)") +
         (fp8 ? std::string(", ") + kFp8 : std::string()) + "}";
}

const T& find(const std::vector<T>& ts, const std::string& name) {
  for (const T& t : ts)
    if (t.name == name) return t;
  ADD_FAILURE() << name;
  return ts[0];
}

TEST(Checkpoint, PerExpertTensorsLandInTheLayerLayouts) {
  for (bool fp8 : {true, false}) {
    SCOPED_TRACE(fp8 ? "fp8" : "bf16");
    const std::string dir = temp_dir(fp8 ? "ck_fp8" : "ck_bf16");
    const std::vector<T> ts = deepseek_tensors(fp8);
    write(dir + "/config.json", deepseek_config(fp8));
    write(dir + "/model.safetensors", file_of(ts));
    uint64_t last = 0, total = 0;
    struct P { uint64_t* last; uint64_t* total; } pr{&last, &total};
    CheckpointLayer L = load_moe_layer(dir, 3, [](uint64_t d, uint64_t t, void* a) {
      *static_cast<P*>(a)->last = d; *static_cast<P*>(a)->total = t; }, &pr);
    EXPECT_EQ(L.config.num_experts, 3);
    EXPECT_EQ(last, total);
    EXPECT_GT(total, 0u);
    const size_t eb = fp8 ? 1 : 2, proj = 128 * 256 * eb;
    ASSERT_EQ(L.w13.shape, (std::vector<int64_t>{3, 256, 256}));
    ASSERT_EQ(L.w2.shape, (std::vector<int64_t>{3, 256, 128}));
    for (int j = 0; j < 3; ++j) {
      const std::string ex = "model.layers.3.mlp.experts." + std::to_string(j) + ".";
      const uint8_t* w13 = L.w13.bytes.data() + size_t(j) * 2 * proj;
      EXPECT_EQ(std::memcmp(w13, find(ts, ex + "gate_proj.weight").bytes.data(), proj), 0) << j;
      EXPECT_EQ(std::memcmp(w13 + proj, find(ts, ex + "up_proj.weight").bytes.data(), proj), 0) << j;
      EXPECT_EQ(std::memcmp(L.w2.bytes.data() + size_t(j) * proj,
                            find(ts, ex + "down_proj.weight").bytes.data(), proj), 0) << j;
      if (fp8) {
        const uint8_t* s = L.w13_scale.bytes.data() + size_t(j) * 16;  // [2 blocks of rows, 2] f32
        EXPECT_EQ(std::memcmp(s, find(ts, ex + "gate_proj.weight_scale_inv").bytes.data(), 8), 0);
        EXPECT_EQ(std::memcmp(s + 8, find(ts, ex + "up_proj.weight_scale_inv").bytes.data(), 8), 0);
        EXPECT_EQ(std::memcmp(L.w2_scale.bytes.data() + size_t(j) * 8,
                              find(ts, ex + "down_proj.weight_scale_inv").bytes.data(), 8), 0);
      }
    }
    EXPECT_EQ(L.w13_scale.empty(), !fp8);
    const std::string sp = "model.layers.3.mlp.shared_experts.";
    EXPECT_EQ(std::memcmp(L.shared_w13.bytes.data() + proj, find(ts, sp + "up_proj.weight").bytes.data(), proj), 0);
    EXPECT_EQ(std::memcmp(L.routing_bias.bytes.data(),
                          find(ts, "model.layers.3.mlp.gate.e_score_correction_bias").bytes.data(), 12), 0);
    EXPECT_EQ(L.router_weight.shape, (std::vector<int64_t>{3, 256}));
    const MoeLayerWeights w = L.host_weights();
    EXPECT_EQ(w.w13.dtype, fp8 ? DType::e4m3 : DType::bf16);
    EXPECT_EQ(w.w13.shape[1], 256);
    EXPECT_EQ(w.w13.stride[0], 256 * 256);
    EXPECT_EQ(w.shared_gate.data, nullptr);
    // Another layer index: the first missing key is named.
    expect_error([&] { load_moe_layer(dir, 4); },
                 "tensor model.layers.4.mlp.experts.0.gate_proj.weight is missing");
  }
}

TEST(Checkpoint, WrongTensorsAndLayoutsAreNamed) {
  const std::string dir = temp_dir("ck_bad");
  write(dir + "/config.json", deepseek_config(true));
  std::vector<T> ts = deepseek_tensors(true);
  auto with = [&](const std::string& name, const T& t) {
    std::vector<T> out = ts;
    for (T& x : out)
      if (x.name == name) x = t;
    write(dir + "/model.safetensors", file_of(out));
  };
  const std::string g = "model.layers.3.mlp.experts.1.gate_proj.weight";
  with(g, make(g, "BF16", {128, 256}, 7));
  expect_error([&] { load_moe_layer(dir, 3); },
               "tensor " + g + " must be [128, 256] F8_E4M3, it is [128, 256] BF16");
  with(g, make(g, "F8_E4M3", {256, 128}, 7));
  expect_error([&] { load_moe_layer(dir, 3); }, "it is [256, 128] F8_E4M3");
  const std::string s = "model.layers.3.mlp.experts.2.down_proj.weight_scale_inv";
  with(s, make("other", "F32", {2, 1}, 7));
  expect_error([&] { load_moe_layer(dir, 3); }, "tensor " + s + " is missing");
  // Fused experts (gpt-oss / Llama-4 names) are refused by name.
  write(dir + "/model.safetensors",
        file_of({make("model.layers.3.mlp.experts.gate_up_proj", "BF16", {3, 256, 256}, 1)}));
  expect_error([&] { load_moe_layer(dir, 3); }, "stores its experts fused (experts.gate_up_proj");
  expect_error([&] { load_moe_layer(dir, -1); }, "layer must be >= 0");
  // No config.json.
  const std::string empty = temp_dir("ck_none");
  expect_error([&] { load_moe_layer(empty, 0); }, "config.json");
}

TEST(Checkpoint, QwenSharedExpertAndItsGate) {
  const std::string dir = temp_dir("ck_qwen");
  write(dir + "/config.json", R"({"model_type": "qwen2_moe", "hidden_size": 256,
    "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128, "num_experts": 2,
    "num_experts_per_tok": 1, "norm_topk_prob": false})");
  const std::string p = "model.layers.0.mlp.";
  std::vector<T> ts;
  int seed = 1;
  for (int j = 0; j < 2; ++j)
    for (const char* w : {"gate", "up", "down"})
      ts.push_back(make(p + "experts." + std::to_string(j) + "." + w + "_proj.weight", "BF16",
                        std::string(w) == "down" ? std::vector<int64_t>{256, 128}
                                                 : std::vector<int64_t>{128, 256}, seed++));
  for (const char* w : {"gate", "up", "down"})
    ts.push_back(make(p + "shared_expert." + w + "_proj.weight", "BF16",
                      std::string(w) == "down" ? std::vector<int64_t>{256, 128}
                                               : std::vector<int64_t>{128, 256}, seed++));
  ts.push_back(make(p + "shared_expert_gate.weight", "BF16", {1, 256}, seed++));
  ts.push_back(make(p + "gate.weight", "BF16", {2, 256}, seed++));
  write(dir + "/model.safetensors", file_of(ts));
  CheckpointLayer L = load_moe_layer(dir, 0);
  ASSERT_TRUE(L.config.shared_expert_gate);
  EXPECT_EQ(L.shared_w13.shape, (std::vector<int64_t>{256, 256}));
  EXPECT_EQ(std::memcmp(L.shared_w2.bytes.data(), find(ts, p + "shared_expert.down_proj.weight").bytes.data(),
                        256 * 128 * 2), 0);
  EXPECT_EQ(std::memcmp(L.shared_gate.bytes.data(), find(ts, p + "shared_expert_gate.weight").bytes.data(),
                        512), 0);
  EXPECT_TRUE(L.routing_bias.empty());
  // Without its gate tensor the key is named.
  ts.erase(ts.end() - 2);
  write(dir + "/model.safetensors", file_of(ts));
  expect_error([&] { load_moe_layer(dir, 0); }, "tensor " + p + "shared_expert_gate.weight is missing");
}

}  // namespace
}  // namespace fusedmoe
