// Presets, MoeConfig validation and config.json import, including malformed files. The real
// config.json files of every family are under tests/config/data (also the fuzzer's seeds).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <cmath>
#include <sstream>

#include "fusedmoe/config.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using fusedmoe::test::expect_error;

namespace {
// tests/config/data/, next to this file (CMake compiles it by its absolute path).
std::string data_dir() {
  const std::string here = __FILE__;
  return here.substr(0, here.rfind('/')) + "/data/";
}
}  // namespace

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
  expect_error([&] { c.validate(); }, "hidden size 0 is out of range: expected [16, 65536]");
  c = find_preset("qwen3-30b-a3b");
  c.weight_precision = Precision::nvfp4;
  c.activation_precision = Precision::fp8_block;
  expect_error([&] { c.validate(); }, "nvfp4/fp8_block is not supported");
  c = find_preset("gpt-oss-120b");
  c.weight_precision = Precision::nvfp4;
  c.activation_precision = Precision::bf16;
  EXPECT_NO_THROW(c.validate());  // 2880 is a multiple of 16
  c.hidden = 2888 + 4;
  expect_error([&] { c.validate(); }, "hidden size 2892 must be a multiple of 16");
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
               "field \"model_type\" = \"llama\" is not a supported MoE family");
  expect_error([] { parse(R"({"hidden_size": 4096})"); }, "\"model_type\" is missing");
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": 4096,
      "intermediate_size": 14336, "num_local_experts": 8})"); },
               "\"num_experts_per_tok\" is missing");
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": "4096",
      "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2})"); },
               "field \"hidden_size\" must be an integer in [16, 65536], got the string \"4096\"");
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": 4096.5,
      "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2})"); },
               "got the number 4096.5 (not an integer)");
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
               "field \"scoring_func\" = \"softmax\" is not supported for deepseek_v3");
  expect_error([] { parse(R"({"model_type": "qwen3_moe", "hidden_size": 2048,
      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
      "quantization_config": {"quant_method": "fp8", "weight_block_size": [64, 64]}})"); },
               "field \"quantization_config.weight_block_size\" must be [128, 128] for fp8 "
               "weights (per-tensor and per-channel fp8 are not supported), got [64,64]");
  expect_error([] { parse(R"({"model_type": "qwen3_moe", "hidden_size": 2048,
      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
      "quantization_config": {"quant_method": "awq"}})"); },
               "field \"quantization_config.quant_method\" = \"awq\" is not a format");
  expect_error([] { parse(R"({"model_type": "gpt_oss", "hidden_size": 2880,
      "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
      "experts_per_token": 2})"); },
               "disagree");
  expect_error([] { parse(std::string(1000, '[')); }, "nested deeper than 64 levels");
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

// ---- plausible ranges, exact integers, 64-bit size products ---------------------------------
TEST(Validate, EveryFieldHasAPlausibleRange) {
  struct Case {
    std::function<void(MoeConfig&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {[](MoeConfig& c) { c.hidden = 1; }, "hidden size 1 is out of range: expected [16, 65536]"},
      {[](MoeConfig& c) { c.hidden = 131072; }, "hidden size 131072 is out of range"},
      {[](MoeConfig& c) { c.hidden = 1000; }, "hidden size 1000 must be a multiple of 16"},
      {[](MoeConfig& c) { c.intermediate = 1000; },
       "expert intermediate size 1000 must be a multiple of 16"},
      {[](MoeConfig& c) { c.intermediate = 1 << 20; },
       "expert intermediate size 1048576 is out of range: expected [16, 262144]"},
      {[](MoeConfig& c) { c.num_experts = 5000; c.top_k = 8; },
       "number of experts 5000 is out of range: expected [1, 4096]"},
      {[](MoeConfig& c) { c.top_k = 0; }, "top-k must be at least 1, got 0"},
      {[](MoeConfig& c) { c.num_shared_experts = 65; c.shared_intermediate = 512; },
       "shared expert count 65 is out of range: expected [0, 64]"},
      {[](MoeConfig& c) { c.num_shared_experts = 1; c.shared_intermediate = 24; },
       "shared intermediate size 24 must be a multiple of 16"},
      {[](MoeConfig& c) { c.routing.routed_scaling_factor = 9.2e18f; },
       "routed scaling factor 9.2e+18 is out of range: expected [0.001, 1000]"},
      {[](MoeConfig& c) { c.routing.routed_scaling_factor = 0; },
       "routed scaling factor 0 is out of range"},
      {[](MoeConfig& c) { c.routing.routed_scaling_factor = std::nanf(""); },
       "routed scaling factor nan is out of range"},
      {[](MoeConfig& c) { c.routing.softcap = -1; }, "logit softcap -1 is out of range"},
      {[](MoeConfig& c) { c.routing.softcap = INFINITY; }, "logit softcap inf is out of range"},
  };
  for (const Case& k : cases) {
    MoeConfig c = find_preset("qwen3-30b-a3b");
    for (Precision p : {Precision::fp8_block, Precision::bf16}) {  // not only for nvfp4
      c.weight_precision = c.activation_precision = p;
      k.edit(c);
      expect_error([&] { c.validate(); }, k.message);
    }
  }
  MoeConfig g = find_preset("gpt-oss-120b");
  g.activation.limit = INFINITY;
  expect_error([&] { g.validate(); },
               "clamped SwiGLU limit inf is out of range: expected [0.01, 1000]");
  g = find_preset("gpt-oss-120b");
  g.activation.alpha = 0;
  expect_error([&] { g.validate(); }, "clamped SwiGLU alpha 0 is out of range");
  // The bounds themselves are accepted.
  MoeConfig edge = find_preset("qwen3-30b-a3b");
  edge.hidden = ConfigLimits::kMaxHidden;
  edge.intermediate = ConfigLimits::kMaxIntermediate;
  edge.routing.routed_scaling_factor = 1000.0f;
  EXPECT_NO_THROW(edge.validate());
}

namespace {
// A qwen3_moe config.json with one field replaced by `value` (JSON text).
std::string qwen_with(const std::string& field, const std::string& value) {
  std::string base = R"({"model_type": "qwen3_moe", "hidden_size": 2048,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8})";
  const std::string key = "\"" + field + "\": ";
  const size_t at = base.find(key);
  if (at == std::string::npos) return base.substr(0, base.size() - 1) + ", " + key + value + "}";
  const size_t end = base.find_first_of(",}", at);
  return base.substr(0, at + key.size()) + value + base.substr(end);
}
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
}  // namespace

TEST(HfConfig, IntegerFieldsTakeIntegerValuesAndSayOutOfRange) {
  EXPECT_EQ(parse(qwen_with("hidden_size", "2048.0")).hidden, 2048);
  EXPECT_EQ(parse(qwen_with("hidden_size", "2.048e3")).hidden, 2048);
  EXPECT_EQ(parse(qwen_with("num_experts", "1.28E2")).num_experts, 128);
  expect_error([] { parse(qwen_with("hidden_size", "4096.5")); },
               "field \"hidden_size\" must be an integer in [16, 65536], got the number 4096.5 "
               "(not an integer)");
  // Out of an int's range: "out of range", not "not an integer"; no wrap-around.
  const std::string big = error_of([] { parse(qwen_with("hidden_size", "4294967296")); });
  EXPECT_NE(big.find("field \"hidden_size\" = 4294967296 is out of range: expected an integer "
                     "in [16, 65536]"), std::string::npos) << big;
  EXPECT_EQ(big.find("not an integer"), std::string::npos) << big;
  expect_error([] { parse(qwen_with("num_experts", "4294967424")); },  // 2^32 + 128
               "field \"num_experts\" = 4294967424 is out of range");
  expect_error([] { parse(qwen_with("num_experts", "-128")); },
               "field \"num_experts\" = -128 is out of range: expected an integer in [1, 4096]");
  // Large integers are exact in the message (a double would print 9007199254740992).
  expect_error([] { parse(qwen_with("hidden_size", "9007199254740993")); },
               "= 9007199254740993 is out of range");
  expect_error([] { parse(qwen_with("hidden_size", "18446744073709551615")); },
               "= 18446744073709551615 is out of range");
  expect_error([] { parse(qwen_with("hidden_size", "4.5e9")); }, "= 4.5e+09 is out of range");
  // Overflowing literals are not read as inf.
  expect_error([] { parse(qwen_with("hidden_size", "1e400")); },
               "config.json:1:44: field \"hidden_size\": the number 1e400 is beyond the range of "
               "a double");
  expect_error([] { parse(qwen_with("hidden_size", "true")); },
               "must be an integer in [16, 65536], got true");
  expect_error([] { parse(qwen_with("num_experts_per_tok", "[8]")); }, "got an array");
  // A size that fits the range but not the kernels (H % 16 == 0), for bf16 and fp8 alike.
  for (const char* quant : {"", R"(, "quantization_config": {"quant_method": "fp8",
                                  "weight_block_size": [128, 128]})"}) {
    std::string t = qwen_with("hidden_size", "1000");
    t = t.substr(0, t.size() - 1) + quant + "}";
    expect_error([&] { parse(t); }, "hidden size 1000 must be a multiple of 16");
    expect_error([&] { parse(t); }, "(from config.json)");
    t = qwen_with("moe_intermediate_size", "24");
    t = t.substr(0, t.size() - 1) + quant + "}";
    expect_error([&] { parse(t); }, "expert intermediate size 24 must be a multiple of 16");
  }
  expect_error([] { parse(qwen_with("hidden_size", "1")); }, "= 1 is out of range");
}

TEST(HfConfig, FloatFieldsAreFiniteAndPlausible) {
  const std::string ds = R"({"model_type": "deepseek_v3", "hidden_size": 7168,
      "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
      "routed_scaling_factor": SCALE})";
  auto with_scale = [&](const std::string& v) {
    std::string t = ds;
    return t.replace(t.find("SCALE"), 5, v);
  };
  EXPECT_FLOAT_EQ(parse(with_scale("2.5")).routing.routed_scaling_factor, 2.5f);
  EXPECT_FLOAT_EQ(parse(with_scale("3")).routing.routed_scaling_factor, 3.0f);
  expect_error([&] { parse(with_scale("9.2e18")); },
               "field \"routed_scaling_factor\" = 9.2e+18 is out of range: expected a number in "
               "[0.001, 1000]");
  expect_error([&] { parse(with_scale("9223372036854775807")); },
               "= 9223372036854775807 is out of range");
  expect_error([&] { parse(with_scale("0")); }, "= 0 is out of range");
  expect_error([&] { parse(with_scale("-2.5")); }, "= -2.5 is out of range");
  expect_error([&] { parse(with_scale("1e400")); },
               "field \"routed_scaling_factor\": the number 1e400 is beyond the range of a double");
  expect_error([&] { parse(with_scale("\"2.5\"")); },
               "must be a number in [0.001, 1000], got the string \"2.5\"");
  const std::string oss = R"({"model_type": "gpt_oss", "hidden_size": 2880,
      "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
      "swiglu_limit": LIMIT})";
  auto with_limit = [&](const std::string& v) {
    std::string t = oss;
    return t.replace(t.find("LIMIT"), 5, v);
  };
  const Precision p = Precision::bf16;
  EXPECT_FLOAT_EQ(config_from_hf_json_text(with_limit("7.0"), "config.json", &p).activation.limit,
                  7.0f);
  expect_error([&] { config_from_hf_json_text(with_limit("1e300"), "config.json", &p); },
               "field \"swiglu_limit\" = 1e+300 is out of range: expected a number in [0.01, 1000]");
  expect_error([&] { config_from_hf_json_text(with_limit("-1e400"), "config.json", &p); },
               "field \"swiglu_limit\": the number -1e400 is beyond the range of a double");
  // Also where nobody reads it: JSON numbers are finite doubles (Python would read inf).
  expect_error([&] { config_from_hf_json_text(R"({"rope_scaling": {"factor": [1, 1e999]}})",
                                              "config.json"); },
               "config.json:1:33: field \"rope_scaling.factor[1]\": the number 1e999 is beyond");
}

TEST(HfConfig, SizeProductsAreCheckedIn64Bits) {
  const std::string ds = R"({"model_type": "deepseek_v3", "hidden_size": 7168,
      "moe_intermediate_size": INTER, "n_routed_experts": 256, "num_experts_per_tok": 8,
      "n_shared_experts": SHARED})";
  auto with = [&](const std::string& inter, const std::string& shared) {
    std::string t = ds;
    t.replace(t.find("INTER"), 5, inter);
    return t.replace(t.find("SHARED"), 6, shared);
  };
  // The issue's inputs: 1073741824 x 2 overflowed int; 1431655766 x 3 wrapped to 2 and ran.
  expect_error([&] { parse(with("1073741824", "2")); },
               "field \"moe_intermediate_size\" = 1073741824 is out of range");
  expect_error([&] { parse(with("1431655766", "3")); },
               "field \"moe_intermediate_size\" = 1431655766 is out of range");
  // Each factor in range, the product not.
  expect_error([&] { parse(with("8192", "64")); },
               "fields \"n_shared_experts\" x \"moe_intermediate_size\" = 64 x 8192 = 524288 is "
               "out of range for the shared MLP's intermediate size: expected at most 262144");
  EXPECT_EQ(parse(with("4096", "64")).shared_intermediate, 262144);
  EXPECT_EQ(parse(with("2048", "2")).shared_intermediate, 4096);
  expect_error([&] { parse(with("2048", "65")); },
               "field \"n_shared_experts\" = 65 is out of range: expected an integer in [0, 64]");
}

TEST(HfConfig, GptOssMxfp4IsRead) {
  // The real gpt-oss-120b config.json: quant_method "mxfp4" -> MXFP4 weights, bf16 activations.
  const MoeConfig g = config_from_hf_json_file(data_dir() + "gpt_oss.json");
  EXPECT_EQ(g.weight_precision, Precision::mxfp4);
  EXPECT_EQ(g.activation_precision, Precision::bf16);
  EXPECT_EQ(g.num_experts, 128);
  EXPECT_EQ(g.top_k, 4);
  EXPECT_FLOAT_EQ(g.activation.limit, 7.0f);
  EXPECT_EQ(parse_precision("mxfp4"), Precision::mxfp4);
  EXPECT_STREQ(precision_name(Precision::mxfp4), "mxfp4");
}

TEST(HfConfig, UnsupportedQuantizationNamesThePrecisionOption) {
  const std::string text = R"({"model_type": "gpt_oss", "hidden_size": 2880,
    "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
    "quantization_config": {"quant_method": "gptq", "bits": 4}})";
  const std::string msg = error_of([&] { config_from_hf_json_text(text, "config.json"); });
  for (const char* s : {"field \"quantization_config.quant_method\" = \"gptq\"", "--precision",
                        "precision_override", "bf16", "fp8", "nvfp4", "mxfp4"})
    EXPECT_NE(msg.find(s), std::string::npos) << s << "\n" << msg;
  // The names it lists are the ones --precision takes, and each one then reads the file.
  for (const char* name : {"bf16", "fp8", "nvfp4", "mxfp4"}) {
    const Precision p = parse_precision(name);
    const MoeConfig g = config_from_hf_json_text(text, "config.json", &p);
    EXPECT_EQ(g.weight_precision, p) << name;
    EXPECT_EQ(g.num_experts, 128);
  }
}

TEST(HfConfig, DuplicateKeysMatterOnlyInFieldsThatAreRead) {
  // A duplicate nobody reads is fine (the last value wins, as in Python's json).
  const MoeConfig c = parse(R"({"model_type": "mixtral", "hidden_size": 4096,
      "rope_theta": 1, "rope_theta": 2, "intermediate_size": 14336, "num_local_experts": 8,
      "num_experts_per_tok": 2, "torch_dtype": "bfloat16", "torch_dtype": "float16"})");
  EXPECT_EQ(c.num_experts, 8);
  expect_error([] { parse(R"({"model_type": "mixtral", "hidden_size": 4096, "hidden_size": 2048,
      "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2})"); },
               "field \"hidden_size\" appears more than once");
  expect_error([] { parse(R"({"model_type": "qwen3_moe", "hidden_size": 2048,
      "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
      "quantization_config": {"quant_method": "fp8", "quant_method": "awq"}})"); },
               "field \"quantization_config.quant_method\" appears more than once");
}

TEST(HfConfig, MessagesDoNotEchoControlCharactersOrUnboundedText) {
  auto printable = [](const std::string& s) {
    for (unsigned char ch : s)
      if (ch < 0x20 || ch >= 0x7F) return false;
    return true;
  };
  // Decoded escapes: an OSC sequence that would retitle the terminal, a NUL.
  std::string m = error_of([] { parse(R"({"model_type": "\u001b]0;PWNED\u0007"})"); });
  EXPECT_TRUE(printable(m)) << m;
  EXPECT_NE(m.find("\"\\x1B]0;PWNED\\x07\" is not a supported MoE family"), std::string::npos) << m;
  m = error_of([] { parse(R"({"model_type": "llama\u0000evil"})"); });
  EXPECT_NE(m.find("\"llama\\x00evil\" is not a supported"), std::string::npos) << m;
  // A 100 KB value: quoted in part, with its length.
  const std::string huge(100 * 1024, 'q');
  m = error_of([&] { parse(R"({"model_type": ")" + huge + "\"}"); });
  EXPECT_LT(m.size(), 500u) << m.size();
  EXPECT_NE(m.find("...(102400 bytes)"), std::string::npos) << m;
  m = error_of([&] { find_preset(huge); });
  EXPECT_LT(m.size(), 1000u) << m.size();
  EXPECT_NE(m.find("unknown preset \"qqqq"), std::string::npos) << m;
  m = error_of([] { find_preset("x\x1b]0;PWNED\x07"); });
  EXPECT_TRUE(printable(m)) << m;
  m = error_of([] { parse_precision(std::string("fp8\x1b[2J", 7)); });
  EXPECT_TRUE(printable(m)) << m;
  // Every string field that reaches a message.
  for (const std::string& t : {
           std::string(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
             "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
             "scoring_func": "\u009b31m"})"),
           std::string(R"({"model_type": "deepseek_v3", "hidden_size": 7168,
             "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
             "topk_method": "\u001b[2J"})"),
           qwen_with("quantization_config", R"({"quant_method": "\u001b[2J"})"),
           qwen_with("quantization_config", R"({"quant_method": "modelopt", "quant_algo": "\r\u0007"})"),
           qwen_with("quantization_config", R"({"quant_method": "fp8", "weight_block_size": ["\u001b"]})"),
           qwen_with("quantization_config", R"({"quant_method": "fp8", "weight_block_size": [128, 128],
             "activation_scheme": "\u001b[2J"})"),
           qwen_with("hidden_size", R"("\u001b[2J")"),
           std::string(R"({"model_type": "llama4", "text_config": {"model_type": "\u001b[2J"}})"),
           std::string(R"({"model_type": "llama4\u001b[2J"})"),
       }) {
    m = error_of([&] { parse(t); });
    EXPECT_TRUE(printable(m)) << m;
    EXPECT_EQ(m.find("(no error)"), std::string::npos) << t;
  }
}

// ---- the real config.json of every family ------------------------------------------------------
TEST(HfConfig, RealConfigsOfEveryFamily) {
  struct Want {
    const char* file;
    int H, I, E, k, shared, shared_I;
    RoutingFn fn;
    Precision w;
  };
  const Want wants[] = {
      {"qwen3_moe.json", 2048, 768, 128, 8, 0, 0, RoutingFn::softmax_topk, Precision::bf16},
      {"qwen2_moe.json", 2048, 1408, 60, 4, 1, 5632, RoutingFn::softmax_topk, Precision::bf16},
      {"qwen3_next.json", 2048, 512, 512, 10, 1, 512, RoutingFn::softmax_topk, Precision::bf16},
      {"qwen3_5_moe.json", 2048, 512, 256, 8, 1, 512, RoutingFn::softmax_topk,
       Precision::fp8_block},
      {"deepseek_v3.json", 7168, 2048, 256, 8, 1, 2048, RoutingFn::sigmoid_grouped_topk,
       Precision::fp8_block},
      {"deepseek_v3_nvfp4.json", 7168, 2048, 256, 8, 1, 2048, RoutingFn::sigmoid_grouped_topk,
       Precision::nvfp4},
      {"kimi_k2.json", 7168, 2048, 384, 8, 1, 2048, RoutingFn::sigmoid_grouped_topk,
       Precision::fp8_block},
      {"mixtral.json", 4096, 14336, 8, 2, 0, 0, RoutingFn::softmax_topk, Precision::bf16},
      {"llama4.json", 5120, 8192, 128, 1, 1, 8192, RoutingFn::sigmoid_top1_on_input,
       Precision::bf16},
  };
  for (const Want& w : wants) {
    SCOPED_TRACE(w.file);
    const MoeConfig c = config_from_hf_json_file(data_dir() + w.file);
    EXPECT_EQ(c.hidden, w.H);
    EXPECT_EQ(c.intermediate, w.I);
    EXPECT_EQ(c.num_experts, w.E);
    EXPECT_EQ(c.top_k, w.k);
    EXPECT_EQ(c.num_shared_experts, w.shared);
    EXPECT_EQ(c.shared_intermediate, w.shared_I);
    EXPECT_EQ(c.routing.fn, w.fn);
    EXPECT_EQ(c.weight_precision, w.w);
  }
  EXPECT_FLOAT_EQ(config_from_hf_json_file(data_dir() + "kimi_k2.json")
                      .routing.routed_scaling_factor, 2.827f);
  EXPECT_FALSE(config_from_hf_json_file(data_dir() + "qwen2_moe.json")
                   .routing.renormalize);
}

// ---- reading the file --------------------------------------------------------------------------
TEST(HfConfigFile, RefusesWhatIsNotASmallRegularFile) {
  using namespace std::chrono;
  const std::string dir = testing::TempDir();
  expect_error([&] { config_from_hf_json_file(dir); }, "must be a regular file, it is a directory");
  expect_error([] { config_from_hf_json_file("/dev/null"); },
               "config file /dev/null must be a regular file, it is a character device");
  const auto t0 = steady_clock::now();
  expect_error([] { config_from_hf_json_file("/dev/zero"); }, "it is a character device");
  EXPECT_LT(duration<double>(steady_clock::now() - t0).count(), 1.0);
  // /proc files are regular with size 0: read (bounded); this one fails at offset 0.
  const std::string mem = error_of([] { config_from_hf_json_file("/proc/self/mem"); });
  EXPECT_NE(mem.find("cannot read config file /proc/self/mem"), std::string::npos) << mem;
  EXPECT_EQ(mem.find("malformed JSON"), std::string::npos) << mem;

  // A FIFO with no writer: refused at once, not waited on.
  const std::string fifo = dir + "fmoe_fifo_" + std::to_string(getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto pending = std::async(std::launch::async, [&] { return error_of([&] {
    config_from_hf_json_file(fifo); }); });
  if (pending.wait_for(seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "config_from_hf_json_file blocked on a FIFO";
    const int w = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // let the reader finish
    if (w >= 0) close(w);
  }
  const std::string fifo_msg = pending.get();
  EXPECT_NE(fifo_msg.find("must be a regular file, it is a FIFO"), std::string::npos) << fifo_msg;
  std::remove(fifo.c_str());

  // 50 MB of zeros (sparse): refused from its size, without reading it.
  const std::string big = dir + "fmoe_big_" + std::to_string(getpid()) + ".json";
  {
    const int fd = open(big.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 50ll << 20), 0);
    close(fd);
  }
  expect_error([&] { config_from_hf_json_file(big); },
               "is 52428800 bytes, above the limit of 4194304 bytes (4 MiB");
  // Exactly at the limit is read (and then judged as JSON).
  {
    const int fd = open(big.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_EQ(ftruncate(fd, ConfigLimits::kMaxConfigJsonBytes), 0);
    close(fd);
  }
  expect_error([&] { config_from_hf_json_file(big); }, "malformed JSON");
  std::remove(big.c_str());
  expect_error([] { config_from_hf_json_text(std::string((4 << 20) + 1, ' '), "x.json"); },
               "x.json: the config text is 4194305 bytes, above the limit of 4194304 bytes");

  // A path with control characters is echoed escaped.
  const std::string m = error_of([] { config_from_hf_json_file("/nonexistent/\x1b]0;x\x07"); });
  EXPECT_NE(m.find("cannot open config file \"/nonexistent/\\x1B]0;x\\x07\": No such file"),
            std::string::npos) << m;
}

TEST(Errors, LocationOnlyInDebugBuilds) {
  // include/fusedmoe/error.hpp: "file and line are appended in debug builds".
  try {
    fusedmoe::find_preset("no-such-preset");
    FAIL() << "an unknown preset was accepted";
  } catch (const fusedmoe::Error& e) {
    const std::string msg = e.what();
#if defined(NDEBUG)
    EXPECT_EQ(msg.find(".cpp:"), std::string::npos) << msg;
#else
    EXPECT_NE(msg.find(".cpp:"), std::string::npos) << msg;
#endif
  }
}
