// A layer read from a checkpoint runs on the GPU (MoeLayer from CheckpointLayer's tensors as
// uploaded) and matches the oracles of tests/layer/layer_test_util.hpp fed the same layer
// (ref::layer_from_checkpoint): FP8 per-expert (sharded), and the BF16 fused layouts whose
// transposes the loader does (gpt-oss with its biases, Llama 4, Qwen3.5), gpt-oss's MXFP4
// release layout, ModelOpt NVFP4 per-expert (as W4A16), x random and the logits from the
// layer's own router. Skips without an sm_90 GPU.
#include <cuda_runtime_api.h>

#include "fusedmoe/checkpoint.hpp"
#include "tests/checkpoint/checkpoint_writer.hpp"
#include "tests/layer/layer_test_util.hpp"
#include "tools/model_case.hpp"

using namespace fusedmoe;
using namespace fusedmoe::test;

namespace {

struct Format {
  const char* tag;
  const char* config;
  int fused;  // -1: per-expert (DeepSeek names), else a ckpt::Fused
  const char* block;
};

const Format kFormats[] = {
    {"fp8", R"({"model_type": "deepseek_v3", "hidden_size": 256, "moe_intermediate_size": 128,
      "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "n_group": 2,
      "topk_group": 1, "routed_scaling_factor": 2.5, "quantization_config": {"quant_method": "fp8",
      "weight_block_size": [128, 128]}})", -1, "model.layers.1.mlp."},
    {"gptoss", R"({"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 128,
      "num_local_experts": 8, "num_experts_per_tok": 2})", int(ckpt::Fused::gpt_oss), "model.layers.1.mlp."},
    {"gptoss_mx", R"({"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 128,
      "num_local_experts": 8, "num_experts_per_tok": 2, "quantization_config": {"quant_method": "mxfp4"}})",
     int(ckpt::Fused::gpt_oss), "model.layers.1.mlp."},
    {"llama4", R"({"model_type": "llama4", "text_config": {"model_type": "llama4_text",
      "hidden_size": 256, "intermediate_size": 128, "num_local_experts": 8,
      "num_experts_per_tok": 1}})", int(ckpt::Fused::llama4), "language_model.model.layers.1.feed_forward."},
    {"qwen35", R"({"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_moe_text",
      "hidden_size": 256, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
      "num_experts": 8, "num_experts_per_tok": 2}})", int(ckpt::Fused::qwen3_5),
     "model.language_model.layers.1.mlp."},
    // ModelOpt NVFP4 (calibrated with NVFP4 activations): W4A16, bf16 activations.
    {"nvfp4", R"({"model_type": "qwen3_moe", "hidden_size": 256, "moe_intermediate_size": 128,
      "num_experts": 8, "num_experts_per_tok": 2, "quantization_config": {"quant_method": "modelopt",
      "quant_algo": "NVFP4"}})", -1, "model.layers.1.mlp."},
};

std::string write_format(const Format& f, uint64_t seed) {
  const std::string dir = st::temp_dir(std::string("gpu_") + f.tag);
  st::write(dir + "/config.json", f.config);
  const ref::LayerWeights lw = ref::make_random_layer(config_from_hf_json_text(f.config, "test"), seed);
  if (f.fused < 0) {
    ckpt::Names n;
    n.block = f.block;
    ckpt::write_model(dir, ckpt::per_expert(lw, n, seed), 2);
  } else {
    ckpt::write_model(dir, ckpt::fused(lw, ckpt::Fused(f.fused), f.block, seed));
  }
  return dir;
}

}  // namespace

TEST(CheckpointGpu, LayersReadFromCheckpointsMatchTheReference) {
  FMOE_SKIP_WITHOUT_GPU();
  for (const Format& f : kFormats) {
    const uint64_t seed = seeds_for(hash_ints({int(f.tag[0]), int(f.tag[1])})).back();
    const std::string dir = write_format(f, seed);
    CheckpointLayer ck = load_moe_layer(dir, 1);
    const cli::GpuLayer g = cli::make_gpu_layer(ck, nullptr);
    for (const int T : {1, 37}) {
      LayerCase c;
      c.cfg = ck.config;
      c.T = T;
      LayerData d;
      d.lw = ref::layer_from_checkpoint(CheckpointLayer(ck));
      d.x = ref::random_bf16(int64_t(T) * c.cfg.hidden, seed, 0x78, 1.0f);
      d.x_bits.resize(d.x.size());
      for (size_t i = 0; i < d.x.size(); ++i) d.x_bits[i] = fmt::bf16_from_float(d.x[i]);
      d.logits = cli::router_logits(d.x, T, ck.router_weight);
      const LayerRun run = run_layer(*g.layer, c, d);
      const std::string ctx = strf("%s (%s) T=%d seed %llu", f.tag, ck.format.c_str(), T,
                                   (unsigned long long)seed);
      EXPECT_EQ(run.dropped, 0) << ctx;
      check_gate_up(c, d, g.layer->impl(), run, ctx);
      check_down(c, d, g.layer->impl(), run, ctx);
      check_end_to_end(c, d, run, ctx);
    }
  }
}
