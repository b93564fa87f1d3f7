// Presets, MoeConfig validation and config.json import, including malformed files.
#include <cstdio>
#include <fstream>

#include "fusedmoe/config.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using fusedmoe::test::expect_error;

TEST(Presets, AllValidAndDefaultFirst) {
  ASSERT_EQ(model_presets().size(), 8u);
  EXPECT_EQ(model_presets().front().name, default_preset_name());
  for (const MoeConfig& c : model_presets()) EXPECT_NO_THROW(c.validate()) << c.name;
  const MoeConfig& q = find_preset("qwen3.5-35b-a3b");
  EXPECT_EQ(q.hidden, 2048);
  EXPECT_EQ(q.intermediate, 512);
  EXPECT_EQ(q.num_experts, 256);
  EXPECT_EQ(q.top_k, 8);
  EXPECT_EQ(q.num_shared_experts, 1);
  EXPECT_EQ(q.shared_intermediate, 512);
  const MoeConfig& d = find_preset("deepseek-v3");
  EXPECT_EQ(d.routing.fn, RoutingFn::sigmoid_grouped_topk);
  EXPECT_EQ(d.routing.num_groups, 8);
  EXPECT_EQ(d.routing.topk_groups, 4);
  EXPECT_FLOAT_EQ(d.routing.routed_scaling_factor, 2.5f);
  EXPECT_EQ(find_preset("gpt-oss-120b").activation.fn, ActivationFn::swiglu_clamped);
  EXPECT_EQ(find_preset("llama4-maverick").routing.fn, RoutingFn::sigmoid_top1_on_input);
  EXPECT_EQ(find_preset("kimi-k2").num_experts, 384);
  EXPECT_EQ(find_preset("mixtral-8x7b").top_k, 2);
}

TEST(Presets, UnknownNameListsTheValidOnes) {
  expect_error([] { find_preset("qwen9"); }, "unknown preset \"qwen9\"");
  expect_error([] { find_preset("qwen9"); }, "deepseek-v3");
}

TEST(Validate, RejectsInconsistentConfigs) {
  MoeConfig c = find_preset("qwen3-30b-a3b");
  c.top_k = 129;
  expect_error([&] { c.validate(); }, "top-k=129 is larger than the number of experts (128)");
  c = find_preset("deepseek-v3");
  c.routing.num_groups = 7;
  expect_error([&] { c.validate(); }, "7 expert groups must divide the 256 experts");
  c = find_preset("deepseek-v3");
  c.routing.topk_groups = 9;
  expect_error([&] { c.validate(); }, "topk_groups=9");
  c = find_preset("deepseek-v3");
  c.routing.topk_groups = 1;  // 32 experts in one group: top-8 still fits
  EXPECT_NO_THROW(c.validate());
  c.top_k = 33;
  expect_error([&] { c.validate(); }, "top-k=33");
  c = find_preset("qwen3-30b-a3b");
  c.hidden = 0;
  expect_error([&] { c.validate(); }, "hidden size must be positive");
  c = find_preset("qwen3-30b-a3b");
  c.weight_precision = Precision::nvfp4;
  c.activation_precision = Precision::fp8_block;
  expect_error([&] { c.validate(); }, "nvfp4/fp8_block is not supported");
  c = find_preset("gpt-oss-120b");
  c.weight_precision = Precision::nvfp4;
  c.activation_precision = Precision::bf16;
  EXPECT_NO_THROW(c.validate());  // 2880 is a multiple of 16
  c.hidden = 2888 + 4;
  expect_error([&] { c.validate(); }, "multiples of 16");
  c = find_preset("llama4-maverick");
  c.top_k = 2;
  expect_error([&] { c.validate(); }, "needs top-k=1");
}

TEST(Precision, Parse) {
  EXPECT_EQ(parse_precision("fp8"), Precision::fp8_block);
  EXPECT_EQ(parse_precision("nvfp4"), Precision::nvfp4);
  expect_error([] { parse_precision("int4"); }, "\"int4\" is not one of");
}

// ---- config.json -------------------------------------------------------------------------------
namespace {
MoeConfig parse(const std::string& text) { return config_from_hf_json_text(text, "config.json"); }
}  // namespace

TEST(HfConfig, Qwen3Moe) {
  const MoeConfig c = parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 2048, "moe_intermediate_size": 768, "num_experts": 128,
    "num_experts_per_tok": 8, "norm_topk_prob": true, "num_attention_heads": 32,
    "rope_theta": 1000000.0, "torch_dtype": "bfloat16"})");
  EXPECT_EQ(c.hidden, 2048);
  EXPECT_EQ(c.intermediate, 768);
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_TRUE(c.routing.renormalize);
  EXPECT_EQ(c.num_shared_experts, 0);
  EXPECT_EQ(c.weight_precision, Precision::bf16);
}

TEST(HfConfig, Qwen35MoeNestedTextConfigWithFp8) {
  const MoeConfig c = parse(R"({
    "model_type": "qwen3_5_moe",
    "text_config": {"model_type": "qwen3_5_moe_text", "hidden_size": 2048,
      "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
      "num_experts": 256, "num_experts_per_tok": 8, "norm_topk_prob": true},
    "quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
      "fmt": "e4m3", "weight_block_size": [128, 128]}})");
  EXPECT_EQ(c.num_experts, 256);
  EXPECT_EQ(c.num_shared_experts, 1);
  EXPECT_EQ(c.shared_intermediate, 512);
  EXPECT_TRUE(c.shared_expert_gate);
  EXPECT_EQ(c.weight_precision, Precision::fp8_block);
  EXPECT_EQ(c.activation_precision, Precision::fp8_block);
}

TEST(HfConfig, DeepSeekV3AndKimi) {
  const MoeConfig d = parse(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5,
    "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3",
      "quant_method": "fp8", "weight_block_size": [128, 128]}})");
  EXPECT_EQ(d.routing.fn, RoutingFn::sigmoid_grouped_topk);
  EXPECT_EQ(d.routing.num_groups, 8);
  EXPECT_EQ(d.routing.topk_groups, 4);
  EXPECT_TRUE(d.routing.correction_bias);
  EXPECT_FLOAT_EQ(d.routing.routed_scaling_factor, 2.5f);
  EXPECT_EQ(d.shared_intermediate, 2048);
  const MoeConfig k = parse(R"({"model_type": "kimi_k2", "hidden_size": 7168,
    "moe_intermediate_size": 2048, "n_routed_experts": 384, "n_shared_experts": 1,
    "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.827})");
  EXPECT_EQ(k.num_experts, 384);
  EXPECT_EQ(k.routing.num_groups, 1);
}

TEST(HfConfig, MixtralGptOssLlama4) {
  const MoeConfig m = parse(R"({"model_type": "mixtral", "hidden_size": 4096,
    "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2})");
  EXPECT_EQ(m.top_k, 2);
  EXPECT_EQ(m.intermediate, 14336);
  const MoeConfig g = parse(R"({"model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_local_experts": 128, "experts_per_token": 4,
    "num_experts_per_tok": 4, "swiglu_limit": 7.0,
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}})");
  EXPECT_EQ(g.top_k, 4);
  EXPECT_EQ(g.activation.fn, ActivationFn::swiglu_clamped);
  EXPECT_FLOAT_EQ(g.activation.limit, 7.0f);
  EXPECT_EQ(g.weight_precision, Precision::nvfp4);
  EXPECT_EQ(g.activation_precision, Precision::bf16);
  const MoeConfig l = parse(R"({"model_type": "llama4", "text_config": {"hidden_size": 5120,
    "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_local_experts": 128,
    "num_experts_per_tok": 1, "interleave_moe_layer_step": 2}})");
  EXPECT_EQ(l.routing.fn, RoutingFn::sigmoid_top1_on_input);
  EXPECT_EQ(l.num_shared_experts, 1);
  EXPECT_EQ(l.shared_intermediate, 8192);
}

TEST(HfConfig, PrecisionOverride) {
  const Precision p = Precision::fp8_block;
  const MoeConfig g = config_from_hf_json_text(R"({"model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
    "quantization_config": {"quant_method": "mxfp4"}})", "config.json", &p);
  EXPECT_EQ(g.weight_precision, Precision::fp8_block);
}

TEST(HfConfig, BadFilesGiveClearErrors) {
  expect_error([] { parse(R"({"model_type": "qwen3_moe", "hidden_size": 2048,)"); },
               "config.json:1:");
  expect_error([] { parse(R"({"model_type": "qwen3_moe" "hidden_size": 1})"); },
               "malformed JSON");
  expect_error([] { parse("[1, 2]"); }, "must hold a JSON object");
  expect_error([] { parse(R"({"model_type": "llama", "hidden_size": 4096})"); },
               "model_type \"llama\" is not a supported MoE family");
  expect_error([] { parse(R"({"hidden_size": 4096})"); }, "\"model_type\" is missing");
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": 4096,
      "intermediate_size": 14336, "num_local_experts": 8})"); },
               "\"num_experts_per_tok\" is missing");
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": "4096",
      "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2})"); },
               "\"hidden_size\" must be an integer, got the string \"4096\"");
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": 4096.5,
      "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2})"); },
               "must be an integer");
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": 4096,
      "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 9})"); },
               "top-k=9 is larger than the number of experts (8)");
  expect_error([] { parse(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
      "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
      "n_group": 6, "topk_group": 4})"); },
               "6 expert groups must divide the 256 experts");
  expect_error([] { parse(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
      "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
      "scoring_func": "softmax"})"); },
               "scoring_func \"softmax\" is not supported");
  expect_error([] { parse(R"({"model_type": "qwen3_moe", "hidden_size": 2048,
      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
      "quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}})"); },
               "weight_block_size must be [128, 128]");
  expect_error([] { parse(R"({"model_type": "qwen3_moe", "hidden_size": 2048,
      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
      "quantization_config": {"quant_method": "awq"}})"); },
               "quant_method \"awq\" is not supported");
  expect_error([] { parse(R"({"model_type": "gpt_oss", "hidden_size": 2880,
      "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
      "experts_per_token": 2})"); },
               "disagree");
  expect_error([] { parse(R"({"a": 1, "a": 2})"); }, "duplicate key");
  expect_error([] { parse(std::string(1000, '[')); }, "nesting deeper");
  expect_error([] { parse(""); }, "unexpected end of input");
}

TEST(HfConfig, ReadsFilesAndReportsMissingOnes) {
  const std::string path = testing::TempDir() + "fmoe_config_test.json";
  {
    std::ofstream out(path);
    out << R"({"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
               "num_local_experts": 8, "num_experts_per_tok": 2})";
  }
  EXPECT_EQ(config_from_hf_json_file(path).num_experts, 8);
  std::remove(path.c_str());
  expect_error([&] { config_from_hf_json_file(path); }, "cannot open config file");
}
