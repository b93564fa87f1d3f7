// load_moe_layer (include/fusedmoe/checkpoint.hpp) and ref::layer_from_checkpoint on small
// checkpoints the test writes itself, in every format read: seeded reference layers are written
// out (tests/checkpoint/checkpoint_writer.hpp), read back, and must decode to exactly the
// weights written (and give the same layer output); every malformed case gives an Error naming
// the file or the tensor key, with expected vs actual.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fusedmoe/checkpoint.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/checkpoint/checkpoint_writer.hpp"
#include "tests/checkpoint/safetensors_writer.hpp"
#include "tests/test_util.hpp"

namespace fusedmoe {
namespace {

using namespace test::st;
using test::expect_error;
namespace ck = test::ckpt;

const char* kFp8 = R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",
  "fmt": "e4m3", "weight_block_size": [128, 128]})";
const char* kModelOpt = R"("quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4",
  "group_size": 16})";
const char* kHfQuant = R"({"producer": {"name": "modelopt", "version": "0.27.1"},
  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16,
  "exclude_modules": ["lm_head"]}})";

// DeepSeek-V3 shapes shrunk: H=256, I=128, E=4, top-2 in 2 groups, one shared expert.
std::string deepseek_config(const std::string& quant) {
  return std::string(R"({"model_type": "deepseek_v3", "hidden_size": 256,
    "moe_intermediate_size": 128, "n_routed_experts": 4, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "n_group": 2, "topk_group": 1, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "norm_topk_prob": true, "routed_scaling_factor": 2.5)") +
         (quant.empty() ? "" : ", " + quant) + "}";
}
// Qwen2-MoE shapes shrunk, with its gated shared expert.
std::string qwen2_config(const std::string& quant) {
  return std::string(R"({"model_type": "qwen2_moe", "hidden_size": 256,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 128, "num_experts": 4,
    "num_experts_per_tok": 2, "norm_topk_prob": false)") + (quant.empty() ? "" : ", " + quant) + "}";
}
const char* kQwen35 = R"({"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_moe_text",
  "hidden_size": 256, "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64,
  "num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": true}})";
const char* kGptOss = R"({"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 64,
  "num_local_experts": 4, "num_experts_per_tok": 2, "swiglu_limit": 7.0})";
const char* kLlama4 = R"({"model_type": "llama4", "text_config": {"model_type": "llama4_text",
  "hidden_size": 256, "intermediate_size": 64, "num_local_experts": 4, "num_experts_per_tok": 1}})";
const char* kMixtral = R"({"model_type": "mixtral", "hidden_size": 256, "intermediate_size": 64,
  "num_local_experts": 4, "num_experts_per_tok": 2})";

// Every row of two weight sets decodes to the same values (nvfp4 global scales may be stored
// per expert or per gate/up half: the values decide). `up_mul` scales the expected rows of the
// second half (a checkpoint whose up projections have their own weight_scale_2).
void expect_same_weights(const ref::WeightSet& got, const ref::WeightSet& want, const char* what,
                         double up_mul = 1.0) {
  ASSERT_EQ(got.precision, want.precision) << what;
  ASSERT_EQ(got.E, want.E) << what;
  ASSERT_EQ(got.N, want.N) << what;
  ASSERT_EQ(got.K, want.K) << what;
  std::vector<double> a(size_t(got.K)), b(size_t(got.K));
  for (int e = 0; e < got.E; ++e)
    for (int n = 0; n < got.N; ++n) {
      got.decode_row(e, n, a.data());
      want.decode_row(e, n, b.data());
      const double m = n >= got.N / 2 ? up_mul : 1.0;
      for (int k = 0; k < got.K; ++k)
        ASSERT_EQ(a[size_t(k)], b[size_t(k)] * m) << what << " expert " << e << " row " << n << " col " << k;
    }
}

void expect_same_layer(const ref::LayerWeights& got, const ref::LayerWeights& want) {
  EXPECT_EQ(got.cfg.summary(), want.cfg.summary());
  expect_same_weights(got.w13, want.w13, "w13");
  expect_same_weights(got.w2, want.w2, "w2");
  EXPECT_EQ(got.b13, want.b13);
  EXPECT_EQ(got.b2, want.b2);
  EXPECT_EQ(got.route_bias, want.route_bias);
  EXPECT_EQ(got.shared_gate, want.shared_gate);
  if (want.cfg.num_shared_experts > 0) {
    expect_same_weights(got.shared_w13, want.shared_w13, "shared_w13");
    expect_same_weights(got.shared_w2, want.shared_w2, "shared_w2");
  }
  // And the same layer: T=7 tokens through the reference give the same bits.
  const int T = 7, H = want.cfg.hidden, E = want.cfg.num_experts;
  const std::vector<float> x = ref::random_bf16(int64_t(T) * H, 11, 1, 1.0f);
  const std::vector<float> logits = ref::tie_free_logits(T, E, 12);
  EXPECT_EQ(ref::moe_layer(got, x.data(), logits.data(), T).y,
            ref::moe_layer(want, x.data(), logits.data(), T).y);
}

struct Progress {
  uint64_t last = 0, total = 0;
  int calls = 0;
  bool monotonic = true;
  static void fn(uint64_t done, uint64_t total, void* self) {
    Progress& p = *static_cast<Progress*>(self);
    p.monotonic = p.monotonic && done >= p.last;
    p.last = done;
    p.total = total;
    ++p.calls;
  }
};

// The config load_moe_layer will see, for drawing the layer the test writes.
MoeConfig config_of(const std::string& text, const Precision* p = nullptr) {
  return config_from_hf_json_text(text, "test config", p);
}

// Writes `lw` in `tensors`' form with `config`, loads layer `layer` and checks the round trip.
CheckpointLayer round_trip(const std::string& tag, const std::string& config,
                           const std::vector<T>& tensors, const ref::LayerWeights& lw, int layer,
                           int shards = 1, const std::string& hf_quant = "") {
  const std::string dir = temp_dir(tag);
  write(dir + "/config.json", config);
  if (!hf_quant.empty()) write(dir + "/hf_quant_config.json", hf_quant);
  ck::write_model(dir, tensors, shards);
  Progress pr;
  CheckpointLayer L = load_moe_layer(dir, layer, &Progress::fn, &pr);
  EXPECT_GT(pr.calls, 0) << tag;
  EXPECT_TRUE(pr.monotonic) << tag;
  EXPECT_EQ(pr.last, pr.total) << tag;
  EXPECT_GT(L.bytes_read, 0u);
  EXPECT_EQ(L.layer, layer);
  CheckpointLayer copy = L;
  const ref::LayerWeights got = ref::layer_from_checkpoint(std::move(copy));
  EXPECT_TRUE(copy.w13.bytes.empty()) << "the conversion takes the checkpoint's buffers";
  {
    SCOPED_TRACE(tag + ": " + L.format);
    expect_same_layer(got, lw);
  }
  return L;
}

TEST(Checkpoint, DeepSeekFp8AndBf16PerExpertRoundTrip) {
  for (const bool fp8 : {true, false}) {
    const std::string cfg_text = deepseek_config(fp8 ? kFp8 : "");
    const MoeConfig cfg = config_of(cfg_text);
    ASSERT_EQ(cfg.weight_precision, fp8 ? Precision::fp8_block : Precision::bf16);
    const ref::LayerWeights lw = ref::make_random_layer(cfg, test::run_seed());
    ck::Names n;
    CheckpointLayer L = round_trip(fp8 ? "ds_fp8" : "ds_bf16", cfg_text, ck::per_expert(lw, n, 3), lw, 3);
    EXPECT_EQ(L.layout, ExpertLayout::per_expert);
    EXPECT_EQ(L.prefix, "model.layers.3.mlp.");
    // The MoeLayerWeights views: shapes and dtypes the layer documents.
    const MoeLayerWeights w = L.host_weights();
    EXPECT_EQ(w.w13.dtype, fp8 ? DType::e4m3 : DType::bf16);
    EXPECT_EQ(w.w13.describe(), std::string("[4, 256, 256] ") + (fp8 ? "e4m3" : "bf16") + " cpu");
    EXPECT_EQ(w.w2.shape[1], 256);
    EXPECT_EQ(w.w2.shape[2], 128);
    EXPECT_EQ(w.w13_scale.data != nullptr, fp8);
    if (fp8) {
      EXPECT_EQ(w.w13_scale.describe(), "[4, 2, 2] f32 cpu");
    }
    EXPECT_EQ(w.routing_bias.describe(), "[4] f32 cpu");
    EXPECT_EQ(w.shared_w13.describe(), std::string("[256, 256] ") + (fp8 ? "e4m3" : "bf16") + " cpu");
    EXPECT_EQ(w.shared_gate.data, nullptr);
    EXPECT_EQ(L.router_weight.shape, (std::vector<int64_t>{4, 256}));
    const std::vector<uint16_t> r = ck::router_bits(4, 256, 3);
    EXPECT_EQ(std::memcmp(L.router_weight.bytes.data(), r.data(), r.size() * 2), 0);
  }
}

TEST(Checkpoint, ShardedFp8ThroughTheIndex) {
  const std::string cfg_text = deepseek_config(kFp8);
  const ref::LayerWeights lw = ref::make_random_layer(config_of(cfg_text), test::run_seed() + 1);
  round_trip("ds_sharded", cfg_text, ck::per_expert(lw, ck::Names{}, 5), lw, 3, /*shards=*/3);
}

TEST(Checkpoint, ModelOptNvfp4PerExpertRoundTrip) {
  // Older ModelOpt exports: config.json without quantization_config, hf_quant_config.json
  // beside it; newer ones carry the modelopt quantization_config.
  const Precision nvfp4 = Precision::nvfp4;
  const ref::LayerWeights lw = ref::make_random_layer(config_of(qwen2_config(""), &nvfp4), test::run_seed());
  ck::Names n;
  n.block = "model.layers.0.mlp.";
  n.shared = "shared_expert.";
  const std::vector<T> ts = ck::per_expert(lw, n, 1);
  CheckpointLayer L = round_trip("nvfp4_hq", qwen2_config(""), ts, lw, 0, 1, kHfQuant);
  EXPECT_EQ(L.config.weight_precision, Precision::nvfp4);
  EXPECT_EQ(L.config.activation_precision, Precision::bf16);
  round_trip("nvfp4_qc", qwen2_config(kModelOpt), ts, lw, 0, 2);

  // The layouts: values [E, 2I, H/2], weight_scale [E, 2I, H/16], weight_scale_2 [E, 2] and the
  // input scales as written.
  EXPECT_EQ(L.w13.dtype, DType::e2m1x2);
  EXPECT_EQ(L.w13.shape, (std::vector<int64_t>{4, 128, 128}));
  EXPECT_EQ(L.w13_scale.shape, (std::vector<int64_t>{4, 128, 16}));
  EXPECT_EQ(L.w13_scale_2.shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(L.w2_scale_2.shape, (std::vector<int64_t>{4}));
  const float* in = reinterpret_cast<const float*>(L.w13_input_scale.bytes.data());
  EXPECT_EQ(in[0], 0.5f);
  EXPECT_EQ(L.shared_w13.shape, (std::vector<int64_t>{256, 128}));
  EXPECT_EQ(L.shared_w2_scale_2.shape, (std::vector<int64_t>{1}));

  // The GPU layer's views carry the global scales (not the input scales: W4A16).
  const MoeLayerWeights w = L.host_weights();
  EXPECT_EQ(w.w13_scale_2.data, L.w13_scale_2.bytes.data());
  EXPECT_EQ(w.w13_scale_2.ndim, 2);
  EXPECT_EQ(w.w2_scale_2.data, L.w2_scale_2.bytes.data());
  EXPECT_EQ(w.shared_w13_scale_2.data, L.shared_w13_scale_2.bytes.data());
  EXPECT_EQ(w.shared_w2_scale_2.data, L.shared_w2_scale_2.bytes.data());
}

TEST(Checkpoint, Nvfp4GateAndUpKeepTheirOwnGlobalScales) {
  // ModelOpt calibrates gate and up apart: an up projection whose weight_scale_2 is twice the
  // gate's decodes to twice the values (the reference keeps both scales).
  const Precision nvfp4 = Precision::nvfp4;
  const ref::LayerWeights lw = ref::make_random_layer(config_of(qwen2_config(""), &nvfp4), 7);
  ck::Names n;
  n.block = "model.layers.0.mlp.";
  n.shared = "shared_expert.";
  std::vector<T> ts = ck::per_expert(lw, n, 1);
  for (T& t : ts)
    if (t.name.find("experts.") != std::string::npos && t.name.find("up_proj.weight_scale_2") != std::string::npos &&
        t.name.find("shared") == std::string::npos) {
      float v;
      std::memcpy(&v, t.bytes.data(), 4);
      v *= 2.0f;
      std::memcpy(t.bytes.data(), &v, 4);
    }
  const std::string dir = temp_dir("nvfp4_up");
  write(dir + "/config.json", qwen2_config(kModelOpt));
  ck::write_model(dir, ts);
  const ref::LayerWeights got = ref::layer_from_checkpoint(load_moe_layer(dir, 0));
  EXPECT_EQ(got.w13.global_groups, 2);
  expect_same_weights(got.w13, lw.w13, "w13", 2.0);
  expect_same_weights(got.w2, lw.w2, "w2");
}

TEST(Checkpoint, FusedLayoutsRoundTrip) {
  struct Case {
    const char* tag;
    const char* config;
    ck::Fused fused;
    const char* block;
    ExpertLayout layout;
  };
  const Case cases[] = {
      {"qwen35", kQwen35, ck::Fused::qwen3_5, "model.language_model.layers.2.mlp.", ExpertLayout::stacked},
      {"gptoss", kGptOss, ck::Fused::gpt_oss, "model.layers.2.mlp.", ExpertLayout::gpt_oss},
      {"llama4", kLlama4, ck::Fused::llama4, "language_model.model.layers.2.feed_forward.", ExpertLayout::llama4},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag);
    const MoeConfig cfg = config_of(c.config);
    const ref::LayerWeights lw = ref::make_random_layer(cfg, test::run_seed() + 2);
    CheckpointLayer L = round_trip(c.tag, c.config, ck::fused(lw, c.fused, c.block, 4), lw, 2);
    EXPECT_EQ(L.layout, c.layout);
    EXPECT_EQ(L.prefix, c.block);
    const MoeLayerWeights w = L.host_weights();
    EXPECT_EQ(w.w13.describe(), "[4, 128, 256] bf16 cpu");
    EXPECT_EQ(w.w2.describe(), "[4, 256, 64] bf16 cpu");
    EXPECT_EQ(w.b13.data != nullptr, c.fused == ck::Fused::gpt_oss);
    if (c.fused == ck::Fused::gpt_oss) {
      EXPECT_EQ(w.b13.describe(), "[4, 128] bf16 cpu");
      EXPECT_EQ(w.routing_bias.describe(), "[4] f32 cpu");
    }
  }
}

TEST(Checkpoint, GptOssMxfp4RoundTrip) {
  // gpt-oss's MXFP4 release layout, as the model's config.json says it (quant_method "mxfp4").
  const std::string config = R"({"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 64,
    "num_local_experts": 4, "num_experts_per_tok": 2, "swiglu_limit": 7.0, "quantization_config":
    {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}})";
  const MoeConfig cfg = config_of(config);
  EXPECT_EQ(cfg.weight_precision, Precision::mxfp4);
  const ref::LayerWeights lw = ref::make_random_layer(cfg, test::run_seed() + 3);
  CheckpointLayer L = round_trip("gptoss_mx", config, ck::fused(lw, ck::Fused::gpt_oss, "model.layers.1.mlp.", 4),
                                 lw, 1, 2);
  EXPECT_EQ(L.layout, ExpertLayout::gpt_oss);
  EXPECT_NE(L.format.find("mxfp4"), std::string::npos) << L.format;
  const MoeLayerWeights w = L.host_weights();
  EXPECT_EQ(w.w13.describe(), "[4, 128, 128] e2m1x2 cpu");
  EXPECT_EQ(w.w13_scale.describe(), "[4, 128, 8] ue8m0 cpu");
  EXPECT_EQ(w.w2.describe(), "[4, 256, 32] e2m1x2 cpu");
  EXPECT_EQ(w.w2_scale.describe(), "[4, 256, 2] ue8m0 cpu");
  EXPECT_EQ(w.b13.describe(), "[4, 128] bf16 cpu");
  EXPECT_EQ(w.w13_scale_2.data, nullptr);
}

TEST(Checkpoint, MixtralNames) {
  const MoeConfig cfg = config_of(kMixtral);
  const ref::LayerWeights lw = ref::make_random_layer(cfg, 9);
  ck::Names n;
  n.block = "model.layers.1.block_sparse_moe.";
  n.gate = "w1";
  n.up = "w3";
  n.down = "w2";
  round_trip("mixtral", kMixtral, ck::per_expert(lw, n, 2), lw, 1);
}

// Writes the DeepSeek FP8 layer with `edit` applied to its tensors and returns the directory.
std::string deepseek_with(const std::string& tag, const std::function<void(std::vector<T>&)>& edit,
                          const std::string& config = deepseek_config(kFp8), int shards = 1) {
  static const ref::LayerWeights lw = ref::make_random_layer(config_of(deepseek_config(kFp8)), 5);
  std::vector<T> ts = ck::per_expert(lw, ck::Names{}, 1);
  edit(ts);
  const std::string dir = temp_dir(tag);
  write(dir + "/config.json", config);
  ck::write_model(dir, ts, shards);
  return dir;
}

void replace(std::vector<T>& ts, const std::string& name, const T& t) {
  for (T& x : ts)
    if (x.name == name) x = t;
}

TEST(Checkpoint, WrongTensorsNameTheFileTheKeyAndExpectedVsActual) {
  const std::string g = "model.layers.3.mlp.experts.1.gate_proj.weight";
  std::string dir = deepseek_with("bad_dtype", [&](std::vector<T>& ts) { replace(ts, g, make(g, "BF16", {128, 256}, 7)); });
  expect_error([&] { load_moe_layer(dir, 3); },
               "tensor " + g + " must be [128, 256] F8_E4M3, it is [128, 256] BF16 (file " + dir + "/model.safetensors)");
  dir = deepseek_with("bad_shape", [&](std::vector<T>& ts) { replace(ts, g, make(g, "F8_E4M3", {256, 128}, 7)); });
  expect_error([&] { load_moe_layer(dir, 3); }, "must be [128, 256] F8_E4M3, it is [256, 128] F8_E4M3");
  const std::string s = "model.layers.3.mlp.experts.2.down_proj.weight_scale_inv";
  dir = deepseek_with("missing", [&](std::vector<T>& ts) { replace(ts, s, make("other", "F32", {2, 1}, 7)); });
  expect_error([&] { load_moe_layer(dir, 3); }, "checkpoint " + dir + ": tensor " + s + " is missing");
  const std::string b = "model.layers.3.mlp.gate.e_score_correction_bias";
  dir = deepseek_with("bias", [&](std::vector<T>& ts) { replace(ts, b, make(b, "I32", {4}, 1)); });
  expect_error([&] { load_moe_layer(dir, 3); }, "tensor " + b + " must be [4] F32 or BF16, it is [4] I32");
  // Sharded: the index names a shard that is not there; a shard is truncated.
  dir = deepseek_with("shard_gone", [](std::vector<T>&) {}, deepseek_config(kFp8), 2);
  ASSERT_EQ(std::remove((dir + "/model-00002-of-00002.safetensors").c_str()), 0);
  expect_error([&] { load_moe_layer(dir, 3); },
               "shard model-00002-of-00002.safetensors (listed by model.safetensors.index.json) is missing");
  dir = deepseek_with("shard_cut", [](std::vector<T>&) {}, deepseek_config(kFp8), 2);
  {
    const std::string f = dir + "/model-00001-of-00002.safetensors";
    ASSERT_EQ(truncate(f.c_str(), 1000), 0);
    expect_error([&] { load_moe_layer(dir, 3); }, "safetensors file " + f + ": the header length");
  }
  write(dir + "/model.safetensors.index.json",
        R"({"weight_map": {"a": "model-00002-of-00002.safetensors", "a": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { load_moe_layer(dir, 3); }, "\"weight_map\" names tensor a twice");
  // A layer the checkpoint does not have (or a dense one): the router keys looked for, the layers there.
  dir = deepseek_with("layer", [](std::vector<T>&) {});
  expect_error([&] { load_moe_layer(dir, 7); },
               "layer 7 has no MoE router: none of model.layers.7.mlp.gate.weight, "
               "model.language_model.layers.7.mlp.gate.weight, language_model.model.layers.7.mlp.gate.weight "
               "exists; a dense layer, or an index past the last layer (the checkpoint has layers 0..3 under "
               "model.layers.)");
  expect_error([&] { load_moe_layer(dir, -1); }, "layer must be >= 0, got -1");
  const std::string none = temp_dir("ck_none");
  expect_error([&] { load_moe_layer(none, 0); }, "checkpoint " + none + " has no config.json");
  write(none + "/config.json", deepseek_config(kFp8));
  expect_error([&] { load_moe_layer(none, 0); }, "has neither model.safetensors.index.json nor model.safetensors");
}

TEST(Checkpoint, FormatsNotReadAreRefusedByName) {
  // MXFP4 tensors under a config that does not say mxfp4, and mxfp4 on a family whose layout is
  // not gpt-oss's.
  std::string dir = temp_dir("mxfp4");
  write(dir + "/config.json", kGptOss);
  write(dir + "/model.safetensors", file_of({make("model.layers.0.mlp.router.weight", "BF16", {4, 256}, 1),
                                             make("model.layers.0.mlp.experts.gate_up_proj_blocks", "U8", {4, 128, 8, 16}, 2)}));
  expect_error([&] { load_moe_layer(dir, 0); },
               "model.layers.0.mlp.experts.gate_up_proj_blocks holds MXFP4 experts but config.json's "
               "quantization_config says bf16");
  write(dir + "/config.json", qwen2_config(R"("quantization_config": {"quant_method": "mxfp4"})"));
  write(dir + "/model.safetensors", file_of({make("model.layers.0.mlp.gate.weight", "BF16", {4, 256}, 1)}));
  expect_error([&] { load_moe_layer(dir, 0); }, "MXFP4 experts are read in gpt-oss's layout");
  // Other quantizers, and ModelOpt formats other than NVFP4.
  write(dir + "/config.json", qwen2_config(R"("quantization_config": {"quant_method": "compressed-tensors"})"));
  expect_error([&] { load_moe_layer(dir, 0); }, "quant_method \"compressed-tensors\" is not a checkpoint format");
  write(dir + "/config.json", qwen2_config(""));
  write(dir + "/hf_quant_config.json", R"({"quantization": {"quant_algo": "FP8"}})");
  expect_error([&] { load_moe_layer(dir, 0); },
               dir + "/hf_quant_config.json: field \"quantization.quant_algo\" = \"FP8\" is not supported");
  write(dir + "/hf_quant_config.json", R"({"quantization": {"quant_algo": "NVFP4", "group_size": 32}})");
  expect_error([&] { load_moe_layer(dir, 0); }, "\"quantization.group_size\" must be 16 for NVFP4, got 32");
  // Fused experts in FP8: not a layout any checkpoint we know uses; refused rather than guessed.
  dir = temp_dir("fused_fp8");
  write(dir + "/config.json", deepseek_config(kFp8));
  write(dir + "/model.safetensors", file_of({make("model.layers.0.mlp.gate.weight", "BF16", {4, 256}, 1),
                                             make("model.layers.0.mlp.experts.gate_up_proj", "F8_E4M3", {4, 256, 256}, 2)}));
  expect_error([&] { load_moe_layer(dir, 0); },
               "layer 0 stores its experts fused (model.layers.0.mlp.experts.gate_up_proj) with fp8_block weights");
  // Neither per-expert nor fused tensors: the per-expert key is named.
  write(dir + "/model.safetensors", file_of({make("model.layers.0.mlp.gate.weight", "BF16", {4, 256}, 1)}));
  expect_error([&] { load_moe_layer(dir, 0); },
               "tensor model.layers.0.mlp.experts.0.gate_proj.weight is missing (nor are the experts stored fused");
}

TEST(Checkpoint, Nvfp4ScalesAreChecked) {
  const Precision nvfp4 = Precision::nvfp4;
  const ref::LayerWeights lw = ref::make_random_layer(config_of(qwen2_config(""), &nvfp4), 3);
  ck::Names n;
  n.block = "model.layers.0.mlp.";
  n.shared = "shared_expert.";
  std::vector<T> ts = ck::per_expert(lw, n, 1);
  const std::string s2 = "model.layers.0.mlp.experts.3.down_proj.weight_scale_2";
  replace(ts, s2, make(s2, "F32", {2}, 1));
  const std::string dir = temp_dir("nvfp4_bad");
  write(dir + "/config.json", qwen2_config(kModelOpt));
  ck::write_model(dir, ts);
  expect_error([&] { load_moe_layer(dir, 0); },
               "tensor " + s2 + " must be a scalar ([] or [1]) F32, it is [2] F32");
  const std::string w = "model.layers.0.mlp.experts.0.up_proj.weight";
  ts = ck::per_expert(lw, n, 1);
  replace(ts, w, make(w, "U8", {64, 256}, 1));  // unpacked: K values, not K/2 bytes
  ck::write_model(dir, ts);
  expect_error([&] { load_moe_layer(dir, 0); }, "tensor " + w + " must be [64, 128] U8, it is [64, 256] U8");
}

}  // namespace
}  // namespace fusedmoe
