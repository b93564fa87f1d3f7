// The whole MoE layer on the GPU (MoeLayer) against the three oracles of layer_test_util.hpp:
// every preset's routing, activation and shared experts (shrunk, and a few at full size), FP8 and
// BF16 weights, T in {0, 1, 5, 128, 300, 3000}, hot-expert and caller-given routing, both
// reduction modes, tail tiles at every width, odd sizes (I not a multiple of 64, H not a multiple
// of 128, a shared MLP in several chunks), CUDA-graph replays, and bad ids dropped the same way
// by every schedule path.
#include <cuda_runtime_api.h>

#include "gemm/gemm_config.hpp"
#include "tests/layer/layer_test_util.hpp"
#include "tools/projection_case.hpp"

using namespace fusedmoe;
using namespace fusedmoe::test;

namespace {

constexpr ReductionMode kModes[] = {ReductionMode::fast, ReductionMode::deterministic};

// Caller-given routing with counts[e] routes on expert label[e], the labels in a seeded order:
// route j of token t is entry j * T + t of the experts' runs laid end to end, so a token never
// repeats an expert (every run is at most T long). The counts sum to T * k.
std::vector<int32_t> ids_from_counts(const std::vector<int>& counts, int T, int k, uint64_t seed) {
  const int E = int(counts.size());
  std::vector<int> label(static_cast<size_t>(E));
  for (int e = 0; e < E; ++e) label[size_t(e)] = e;
  uint64_t h = seed;
  for (int e = E - 1; e > 0; --e) {
    h = ref::splitmix64(h);
    std::swap(label[size_t(e)], label[size_t(h % uint64_t(e + 1))]);
  }
  std::vector<int32_t> runs;
  for (int e = 0; e < E; ++e) runs.insert(runs.end(), size_t(counts[size_t(e)]), label[size_t(e)]);
  std::vector<int32_t> ids(size_t(T) * k);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j) ids[size_t(t) * k + j] = runs[size_t(j) * T + t];
  return ids;
}

// end_to_end: also against ref::moe_layer (slow for full-size presets, whose weights are then
// drawn as codes: seconds instead of minutes). Returns the plan of the last seed's forward.
detail::LayerPlan run_case(const LayerCase& c, int seeds = 1, bool end_to_end = true) {
  std::vector<uint64_t> all = seeds_for(hash_ints({c.T, c.cfg.hidden, c.cfg.intermediate,
                                                   c.cfg.num_experts, int(c.mode), int(c.route),
                                                   int(c.cfg.weight_precision)}));
  all.erase(all.begin(), all.end() - std::min<int>(seeds, int(all.size())));  // the fresh seed last
  detail::LayerPlan plan;
  for (uint64_t seed : all) {
    const LayerData d = make_layer_data(c, seed, /*codes=*/!end_to_end);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    const LayerRun run = run_layer(*g.layer, c, d);
    const std::string ctx = c.describe() + strf(" seed %llu", (unsigned long long)seed);
    EXPECT_EQ(run.dropped, 0) << ctx;
    plan = run.plan;
    if (c.T == 0) continue;
    check_gate_up(c, d, g.layer->impl(), run, ctx);
    check_down(c, d, g.layer->impl(), run, ctx);
    if (end_to_end) check_end_to_end(c, d, run, ctx);
  }
  return plan;
}

LayerCase make_case(const MoeConfig& cfg, int T, ReductionMode m, LayerRoute r = LayerRoute::computed) {
  LayerCase c;
  c.cfg = cfg;
  c.T = T;
  c.mode = m;
  c.route = r;
  return c;
}

}  // namespace

TEST(LayerGpu, EveryPresetShrunk) {
  FMOE_SKIP_WITHOUT_GPU();
  for (const MoeConfig& preset : model_presets())
    for (Precision p : {Precision::fp8_block, Precision::bf16, Precision::nvfp4, Precision::mxfp4}) {
      const MoeConfig cfg = scaled(preset, 256, 128, 32, p);
      for (int T : {0, 1, 5, 128})
        for (ReductionMode m : kModes) run_case(make_case(cfg, T, m));
    }
}

TEST(LayerGpu, LargeTSeveralTokenTilesPerExpert) {
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig qwen = scaled(find_preset("qwen3.5-35b-a3b"), 512, 256, 16, Precision::fp8_block);
  for (ReductionMode m : kModes) run_case(make_case(qwen, 3000, m), 1, false);
  const MoeConfig oss = scaled(find_preset("gpt-oss-120b"), 256, 128, 8, Precision::bf16);
  run_case(make_case(oss, 300, ReductionMode::fast, LayerRoute::hot));
}

TEST(LayerGpu, OddSizesAndSharedChunks) {
  FMOE_SKIP_WITHOUT_GPU();
  for (Precision p : {Precision::fp8_block, Precision::bf16}) {
    MoeConfig c = scaled(find_preset("qwen3.5-35b-a3b"), 272, 80, 12, p);  // I_pad 128, H % 128 = 16
    for (ReductionMode m : kModes) run_case(make_case(c, 37, m));
    MoeConfig chunks = scaled(find_preset("deepseek-v3"), 384, 128, 16, p);
    chunks.shared_intermediate = 320;  // three chunks of 128, the last one half empty
    for (ReductionMode m : kModes) run_case(make_case(chunks, 20, m));
    MoeConfig llama = scaled(find_preset("llama4-maverick"), 256, 192, 16, p);  // weight on input + shared
    run_case(make_case(llama, 40, ReductionMode::fast, LayerRoute::hot));
  }
}

TEST(LayerGpu, FullSizePresetsAtDecode) {
  FMOE_SKIP_WITHOUT_GPU();
  for (const char* name : {"qwen3.5-35b-a3b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b"}) {
    MoeConfig cfg = find_preset(name);
    if (cfg.weight_precision != Precision::fp8_block && cfg.weight_precision != Precision::bf16)
      cfg.weight_precision = cfg.activation_precision = Precision::fp8_block;
    for (int T : {1, 3}) run_case(make_case(cfg, T, ReductionMode::fast), 1, false);  // T=1 splits K
    if (name == std::string("qwen3.5-35b-a3b")) run_case(make_case(cfg, 128, ReductionMode::fast), 1, false);
  }
}

TEST(LayerGpu, SplitKOfGateUpAtDecode) {
  // Few tiles (T <= 2): GEMM 1 splits K and the last part runs the epilogue; the oracles must
  // still hold, and the plan must really have split. (The 4-bit decode GEMVs, which take T <= 8
  // by default, are off here: they need no split.)
  FMOE_SKIP_WITHOUT_GPU();
  detail::ScopedKnob<int> engine(&detail::Knobs::gemv_max_t, 0);
  {
    // On by default only for the e2m1 gate/up with parts of >= 32 k-blocks (layer.cpp says why):
    // H = 4096 at T=1 splits in two, H = 2048 does not (parts of 16 k-blocks).
    for (int H : {4096, 2048}) {
      const MoeConfig cfg = scaled(find_preset("deepseek-v3"), H, 256, 16, Precision::nvfp4);
      const LayerCase c = make_case(cfg, 1, ReductionMode::fast);
      const LayerData d = make_layer_data(c, 77);
      const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
      const LayerRun run = run_layer(*g.layer, c, d);
      EXPECT_EQ(run.plan.split, H == 4096 ? 2 : 1) << c.describe();
      check_end_to_end(c, d, run, c.describe() + " default split");
    }
  }
  detail::ScopedKnob<bool> on(&detail::Knobs::split_k, true);  // FMOE_SPLIT_K=1: wherever allowed
  for (Precision p : {Precision::fp8_block, Precision::bf16, Precision::nvfp4})
    for (const char* name : {"deepseek-v3", "qwen3.5-35b-a3b", "gpt-oss-120b"}) {
      const MoeConfig cfg = scaled(find_preset(name), 2048, 256, 16, p);
      for (int T : {1, 2}) {
        const LayerCase c = make_case(cfg, T, ReductionMode::fast);
        const LayerData d = make_layer_data(c, 1000 + T);
        const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
        const LayerRun run = run_layer(*g.layer, c, d);
        EXPECT_GT(run.plan.split, 1) << c.describe();
        check_gate_up(c, d, g.layer->impl(), run, c.describe() + " split K");
        check_down(c, d, g.layer->impl(), run, c.describe() + " split K");
        check_end_to_end(c, d, run, c.describe() + " split K");
        // Replays reuse the counters: a second call must give the same result.
        const LayerRun again = run_layer(*g.layer, c, d);
        EXPECT_EQ(again.h, run.h) << c.describe() << ": the intermediate changed between calls";
      }
    }
}

TEST(LayerGpu, GivenRoutingAndRepeatsDroppedAtEveryT) {
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::fp8_block);
  for (int T : {6, 200}) {  // fused schedule, schedule kernel
    LayerCase c = make_case(cfg, T, ReductionMode::deterministic, LayerRoute::given);
    LayerData d = make_layer_data(c, 77 + T);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    run_case(c);
    std::vector<int32_t> ids = d.given.ids;
    ids[1] = ids[0];   // token 0 repeats its first expert
    ids[3] = 1000;     // token 0 (k=8) or 1: out of range
    // E: out of range too, and the layer's own id of its first shared chunk (it must not stand
    // in for the shared column, which stays with its gate's weight).
    ids[5] = cfg.num_experts;
    try {
      run_layer(*g.layer, c, d, true, &ids);
      ADD_FAILURE() << "validated caller ids with a repeat were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("topk_ids[0, "), std::string::npos) << e.what();
    }
    const LayerRun run = run_layer(*g.layer, c, d, false, &ids);
    EXPECT_EQ(run.dropped, 3) << "T=" << T;
    check_gate_up(c, d, g.layer->impl(), run, c.describe() + " repeats");
    check_down(c, d, g.layer->impl(), run, c.describe() + " repeats");
  }
}

TEST(LayerGpu, GraphReplaysAndDeterminism) {
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = scaled(find_preset("deepseek-v3"), 512, 256, 32, Precision::fp8_block);
  for (ReductionMode m : kModes) {
    LayerCase c = make_case(cfg, 100, m);
    const LayerData d = make_layer_data(c, 5);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    const int T = c.T, H = cfg.hidden;
    DeviceBuffer d_x = DeviceBuffer::from(d.x_bits), d_logits = DeviceBuffer::from(d.logits);
    DeviceBuffer d_y(size_t(T) * H * 2), ws(g.layer->workspace_size(T, m));
    MoeForwardArgs a;
    a.x = TensorRef::contiguous(d_x.get(), DType::bf16, {T, H}, Device::cuda);
    a.router_logits = TensorRef::contiguous(d_logits.get(), DType::f32, {T, cfg.num_experts}, Device::cuda);
    a.y = TensorRef::contiguous(d_y.get(), DType::bf16, {T, H}, Device::cuda);
    a.mode = m;
    cudaStream_t s;
    FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g.layer->forward(a, ws.get(), ws.bytes(), s);
    FMOE_CUDA(cudaStreamSynchronize(s));
    const std::vector<uint16_t> first = d_y.to_host<uint16_t>();
    {
      const ForwardGraph graph(*g.layer, a, ws, s, 3);
      d_y.fill(0xFF);
      for (int i = 0; i < 5; ++i) graph.launch(s);
      FMOE_CUDA(cudaStreamSynchronize(s));
    }
    const std::vector<uint16_t> last = d_y.to_host<uint16_t>();
    // The oracle quantizes the intermediate with the plan's scale block (64, or 128 after two-wave
    // tokens-as-M gate/up tiles in fast mode).
    const int h_block = detail::plan_layer_forward(g.layer->impl(), a, ws.get(), ws.bytes(), nullptr).h_block;
    const ref::LayerResult want = ref::moe_layer(d.lw, d.x.data(), d.logits.data(), T, h_block);
    const cli::LayerCheck chk = cli::check_layer_output(last, want.y, H, true);
    EXPECT_TRUE(chk.ok()) << c.describe() << " after graph replays: "
                          << cli::describe_layer_check(chk, last, want.y, H);
    if (m == ReductionMode::deterministic) {
      EXPECT_EQ(first, last) << "deterministic mode must be bitwise stable";
    }
    FMOE_CUDA(cudaStreamDestroy(s));
  }
}

TEST(LayerGpu, RepeatedForwardsFinishAtEveryTokenTileWidth) {
  // Forwards one after another, stage by stage and then replayed from a graph, must each finish:
  // session 43 found the bf16 layer's graph replays at BLOCK_T=64 stalling (bench --op layer
  // --precision bf16, qwen3-30b-a3b T=384 / 512, > 20 s; its first forward finished and matched
  // the reference; 14 of 15 bench runs of 621 forwards stalled, 27 forwards did not). Full
  // qwen3-30b-a3b shapes, T for each token-tile width (16, 32, 64, 128), bf16, fp8 and NVFP4
  // weights, fast mode; as many forwards as the bench (graphs of 20 replayed 30 times). A stage or
  // replay that does not finish within seconds ends the process with its name (cli::wait_or_die),
  // since freeing buffers under a hung kernel would wait forever.
  // The bf16 and NVFP4 layers also with a lean producer (FMOE_LEAN_PRODUCER=1).
  FMOE_SKIP_WITHOUT_GPU();
  for (int variant = 0; variant < 5; ++variant) {
    const Precision p = variant % 3 == 0 ? Precision::bf16 : variant % 3 == 1 ? Precision::nvfp4 : Precision::fp8_block;
    detail::ScopedKnob<int> lean(&detail::Knobs::lean_producer, variant >= 3 ? 1 : 0);
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 2048, 768, 128, p);
    // 24, 4, 16, 64 rows per expert: BLOCK_T 64 (NVFP4: 32), 16, 32, 128
    for (int T : {384, 64, 256, 1024}) {
      const LayerCase c = make_case(cfg, T, ReductionMode::fast);
      const LayerData d = make_layer_data(c, 43, /*codes=*/true);
      const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
      const int H = cfg.hidden;
      DeviceBuffer d_x = DeviceBuffer::from(d.x_bits), d_logits = DeviceBuffer::from(d.logits);
      DeviceBuffer d_y(size_t(T) * H * 2), ws(g.layer->workspace_size(T, ReductionMode::fast));
      MoeForwardArgs a;
      a.x = TensorRef::contiguous(d_x.get(), DType::bf16, {T, H}, Device::cuda);
      a.router_logits = TensorRef::contiguous(d_logits.get(), DType::f32, {T, cfg.num_experts}, Device::cuda);
      a.y = TensorRef::contiguous(d_y.get(), DType::bf16, {T, H}, Device::cuda);
      a.mode = ReductionMode::fast;
      cudaStream_t s;
      FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      const detail::LayerPlan plan = detail::plan_layer_forward(g.layer->impl(), a, ws.get(), ws.bytes(), s);
      const std::string ctx = c.describe() + " " + detail::gemm_config_info(plan.up_config).name + "+" +
                              detail::gemm_config_info(plan.down_config).name + (variant >= 3 ? " lean" : "");
      for (int i = 0; i < 4; ++i)
        for (detail::LayerStage st : detail::kLayerStages) {
          detail::run_layer_stage(plan, st, s);
          cli::wait_or_die(s, 10, strf("%s: forward %d, stage %s", ctx.c_str(), i, detail::layer_stage_name(st)));
        }
      const ForwardGraph graph(*g.layer, a, ws, s, 20);
      d_y.fill(0xFF);
      for (int i = 0; i < 30; ++i) {
        graph.launch(s);
        cli::wait_or_die(s, 10, strf("%s: graph replay %d (20 forwards)", ctx.c_str(), i));
      }
      const std::vector<uint16_t> y = d_y.to_host<uint16_t>();
      const ref::LayerResult want = ref::moe_layer(d.lw, d.x.data(), d.logits.data(), T, plan.h_block);
      const cli::LayerCheck chk = cli::check_layer_output(y, want.y, H, g.layer->impl().fp8);
      EXPECT_TRUE(chk.ok()) << ctx << " after graph replays: " << cli::describe_layer_check(chk, y, want.y, H);
      FMOE_CUDA(cudaStreamDestroy(s));
    }
  }
}

TEST(LayerGpu, EveryCompiledLayerConfigRuns) {
  // Each up and each down config forced in turn (the other GEMM takes the default waves of the
  // forced width). H=256, I=256: both GEMMs have an even number of 128-row weight tiles, so the
  // two-wave configs run too.
  FMOE_SKIP_WITHOUT_GPU();
  for (int i = 0; i < int(detail::GemmConfigId::count); ++i) {
    const detail::GemmConfigInfo ci = detail::gemm_config_info(detail::GemmConfigId(i));
    if (ci.rows == detail::GemmRows::gathered && ci.epilogue == detail::GemmEpilogue::combine)
      continue;  // the projection's configs: tests/moe
    detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, ci.name);
    const Precision p = ci.weights == detail::GemmWeights::bf16   ? Precision::bf16
                        : ci.weights == detail::GemmWeights::e2m1 ? Precision::nvfp4
                                                                  : Precision::fp8_block;
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 256, 256, 8, p);
    for (ReductionMode m : kModes) run_case(make_case(cfg, 90, m), 1, false);  // ~90 rows per expert
    // Two waves with tokens as M at 5 rows per expert: the static tile walk (every expert's first
    // tile numbered before the routing exists), whose tiles of <= 64 routes the down GEMM runs at
    // half height, unpaired (HalfTile).
    if (ci.operands == detail::GemmOperands::tokens_m && ci.waves == 2)
      for (ReductionMode m : kModes) run_case(make_case(cfg, 5, m), 1, false);
  }
}

TEST(LayerGpu, TwoKBlockStagesWithOddBlockCounts) {
  // The e2m1 configs with two 64-K blocks per stage (gemm_configs.def: kblocks 2), each forced in
  // turn, where a segment's k-block count is odd (its last stage holds one block) and even: H = 448
  // (7 k-blocks for the gate/up) and I = 320 (5 for the down), gpt-oss's H = 2880 (45 k-blocks,
  // MXFP4, at T = 12 the GEMMs split K into parts of any parity), and deepseek-v3's H = 7168 (112).
  FMOE_SKIP_WITHOUT_GPU();
  detail::ScopedKnob<int> engine(&detail::Knobs::gemv_max_t, 0);  // the engine at every T
  int forced = 0;
  for (int i = 0; i < int(detail::GemmConfigId::count); ++i) {
    const detail::GemmConfigInfo ci = detail::gemm_config_info(detail::GemmConfigId(i));
    if (ci.kblocks != 2) continue;
    ++forced;
    EXPECT_EQ(ci.weights, detail::GemmWeights::e2m1) << ci.name;
    detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, ci.name);
    const MoeConfig odd = scaled(find_preset("qwen3-30b-a3b"), 448, 320, 8, Precision::nvfp4);
    const MoeConfig oss = scaled(find_preset("gpt-oss-120b"), 2880, 256, 8, Precision::mxfp4);
    const MoeConfig ds = scaled(find_preset("deepseek-v3"), 7168, 256, 16, Precision::nvfp4);
    // The plan must run the forced config (a forced config that no rule picks was once dropped
    // silently for the automatic one, and this test passed without running it).
    const detail::GemmConfigId id = detail::GemmConfigId(i);
    const auto ran = [&](const LayerCase& c) {
      const detail::LayerPlan p = run_case(c, 1, false);
      const detail::GemmConfigInfo up = detail::gemm_config_info(p.up_config),
                                   down = detail::gemm_config_info(p.down_config);
      EXPECT_TRUE(p.up_config == id || p.down_config == id)
          << c.describe() << " forced " << ci.name << " ran " << up.name << "+" << down.name;
      // The other GEMM follows the rules, its two-block twin included where one is compiled.
      const detail::GemmConfigId other = p.up_config == id ? p.down_config : p.up_config;
      EXPECT_EQ(detail::layer_two_block_stages(other, nullptr), other)
          << c.describe() << " ran " << up.name << "+" << down.name;
    };
    for (ReductionMode m : kModes) {
      for (int T : {1, 12, 40}) ran(make_case(odd, T, m));
      ran(make_case(oss, 12, m));
      ran(make_case(ds, 24, m));
    }
  }
  EXPECT_EQ(forced, 4) << "the two-block e2m1 configs of gemm_configs.def";
}

TEST(LayerGpu, LeanProducerFillsTheDownGemm) {
  // FMOE_LEAN_PRODUCER=1: the bf16 / 4-bit down GEMMs (TMA rows) fill their k-stages from the
  // producer's first warp alone (GemmConfig::kLeanCapable). Every token-tile width the layer picks
  // (T = 12 .. 700 on 8 experts), NVFP4, MXFP4 and bf16 weights, both modes, and the fp8 layer
  // (not lean) unchanged. (RepeatedForwardsFinishAtEveryTokenTileWidth replays it 600 times.)
  FMOE_SKIP_WITHOUT_GPU();
  detail::ScopedKnob<int> lean(&detail::Knobs::lean_producer, 1);
  detail::ScopedKnob<int> engine(&detail::Knobs::gemv_max_t, 0);
  for (Precision p : {Precision::nvfp4, Precision::mxfp4, Precision::bf16, Precision::fp8_block}) {
    const MoeConfig cfg = scaled(find_preset(p == Precision::mxfp4 ? "gpt-oss-120b" : "qwen3-30b-a3b"), 448,
                                 256, 8, p);
    for (ReductionMode m : kModes)
      for (int T : {12, 40, 100, 700}) run_case(make_case(cfg, T, m), 1, false);
  }
}

TEST(LayerGpu, TokensOnMDownGemmBiasesAndAPartialWave) {
  // The tokens-as-M down GEMM's epilogue (tokens_m_rows, sm90_gemm_epilogue.cuh) on tiles with
  // and without the expert's bias and on waves whose outputs are all < H or not: each such
  // config forced, H = 400 (the last 128-row wave holds 16 outputs in range; in the two-wave
  // configs the first wave of that tile holds all 128), biases drawn at random (ref/layer.cpp),
  // through fp32 atomics, bf16 route rows and deterministic rows; T = 150
  // on 8 experts: a full token tile and a tail of <= 64 routes (half height) per expert. (No
  // other layer test ran these configs with biases; a variant compiled apart per case is in
  // docs/wip/tokens_m_epilogue_no_bias.diff.)
  FMOE_SKIP_WITHOUT_GPU();
  int forced = 0;
  for (int i = 0; i < int(detail::GemmConfigId::count); ++i) {
    const detail::GemmConfigInfo ci = detail::gemm_config_info(detail::GemmConfigId(i));
    if (ci.operands != detail::GemmOperands::tokens_m || ci.epilogue != detail::GemmEpilogue::combine ||
        ci.rows == detail::GemmRows::gathered)
      continue;
    ++forced;
    detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, ci.name);
    for (bool bias : {false, true}) {
      MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 400, 256, 8, Precision::fp8_block);
      cfg.expert_bias = bias;
      cfg.validate();
      for (ReductionMode m : kModes) run_case(make_case(cfg, 150, m), 1, false);
      detail::ScopedKnob<int> rows16(&detail::Knobs::rows16_min_t, 1);
      run_case(make_case(cfg, 150, ReductionMode::fast), 1, false);
    }
  }
  EXPECT_EQ(forced, 5) << "the tokens-as-M down configs of gemm_configs.def";
}

// The first route whose intermediate (codes and scales) differs between two runs of the same
// case, or R if none: compared route by route, since the schedule kernel's slot order, and so the
// compact rows, may differ between runs. fp8: one byte per value, h_scale [R, I_pad / h_block];
// bf16 (bf16 and 4-bit weights): two bytes per value, no scales.
static size_t first_route_differing(const LayerRun& x, const LayerRun& y) {
  const size_t hb = x.h.size() / x.row.size();
  const size_t sb = x.h_scale.empty() ? 0 : hb / size_t(x.plan.h_block);
  EXPECT_EQ(x.h_scale.size(), y.h_scale.size()) << "the two runs' intermediates differ in precision";
  for (size_t r = 0; r < x.row.size(); ++r) {
    const int a = x.row[r], b = y.row[r];
    const bool same =
        a < 0 || b < 0 ? a == b
                       : std::equal(x.h.begin() + size_t(a) * hb, x.h.begin() + size_t(a + 1) * hb,
                                    y.h.begin() + size_t(b) * hb) &&
                             // the scales' bits: as floats a NaN scale never equals itself
                             (sb == 0 || std::memcmp(x.h_scale.data() + size_t(a) * sb,
                                                     y.h_scale.data() + size_t(b) * sb, sb * sizeof(float)) == 0);
    if (!same) return r;
  }
  return x.row.size();
}

TEST(LayerGpu, DynamicItemsGiveTheSameBits) {
  // Both grouped GEMMs hand out their tiles after each CTA's first from a counter, in order
  // (FMOE_DYNAMIC_ITEMS, bit 0 the gate/up, bit 1 the down; TileScheduler::fetch_issue /
  // fetch_take; the layer fetches in tokens-as-M tiles, these, see select_counter_walk). Which CTA
  // computes a tile must not change a bit: the intermediate (both modes) and the deterministic
  // output equal those of the round robin, with the oracles checked. The counters must end the
  // call at zero (the last CTA resets them), so that the next launch, a graph replay or the stage
  // replayed alone, starts at item 0. 32 experts x 2 token tiles: x 6 weight tiles = 384 gate/up
  // items; x 8 weight tiles (hidden 2048, two waves of 128) = 512 down items, so fast mode's down,
  // which fetches whole tiles for all but its last two waves before its stream-K tail, fetches too.
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 2048, 768, 32, Precision::fp8_block);
  const int T = 1024;
  detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, "up_fp8_bt128_w2_tm_s4");
  for (ReductionMode m : kModes) {
    const LayerCase lc = make_case(cfg, T, m);
    const uint64_t seed = seeds_for(hash_ints({T, int(m)})).back();
    const LayerData d = make_layer_data(lc, seed);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    std::vector<LayerRun> runs;
    for (int dynamic : {3, 0, 1, 2}) {
      detail::ScopedKnob<int> knob(&detail::Knobs::dynamic_items, dynamic);
      runs.push_back(run_layer(*g.layer, lc, d));
      const LayerRun& run = runs.back();
      const std::string ctx = lc.describe() + strf(" FMOE_DYNAMIC_ITEMS=%d seed %llu", dynamic,
                                                   (unsigned long long)seed);
      ASSERT_EQ(run.plan.up.fetch_counters != nullptr, (dynamic & 1) != 0) << ctx;
      ASSERT_EQ(run.plan.down.fetch_counters != nullptr, (dynamic & 2) != 0) << ctx;
      check_gate_up(lc, d, g.layer->impl(), run, ctx);
      check_down(lc, d, g.layer->impl(), run, ctx);
      for (int w : {detail::kStatusUpItems, detail::kStatusUpDone, detail::kStatusDownItems,
                    detail::kStatusDownDone}) {
        EXPECT_EQ(run.status[w], 0) << ctx << ": status word " << w;
      }
      ASSERT_EQ(runs[0].plan.h_block, run.plan.h_block) << ctx;
      const size_t differs = first_route_differing(runs[0], run);
      EXPECT_EQ(differs, runs[0].row.size()) << ctx << ": route " << differs
                                             << "'s intermediate differs from FMOE_DYNAMIC_ITEMS=3";
      if (m == ReductionMode::deterministic) {
        EXPECT_TRUE(runs[0].y == run.y) << ctx << ": the output differs from FMOE_DYNAMIC_ITEMS=3";
      }
    }
  }
}

TEST(LayerGpu, StaticTileNumberingWithHotExperts) {
  // Where the experts average <= half a token tile and their weights are small, the layer numbers
  // each expert's first token tile before the routing exists and the rest after all of them
  // (static_tile_numbering);
  // FMOE_STATIC_TILES=0 numbers every tile from the routing. Caller-given routing at T=32 over 64
  // experts (4 routes each on average) puts 32, 20 and 17 routes on three experts, so at
  // BLOCK_T=16 their later tiles sit in the walk's routing-numbered part, and leaves two experts
  // empty (their static tiles skipped). Both numberings, each weight precision, both modes: the
  // plan must say which ran, both GEMMs match their oracles, and the numbering must not change a
  // bit of the intermediate, nor of the deterministic output, where the two plans run the same
  // configs.
  FMOE_SKIP_WITHOUT_GPU();
  const int T = 32, E = 64, k = 8;
  std::vector<int> counts = {32, 20, 17, 0, 0};
  int sum = 0;
  for (int c : counts) sum += c;
  while (int(counts.size()) < E) {  // the rest 3 or 4 each, summing to T * k
    const int left = E - int(counts.size());
    const int c = (T * k - sum + left - 1) / left;
    counts.push_back(c);
    sum += c;
  }
  ASSERT_EQ(sum, T * k);
  int static_runs = 0;
  for (Precision p : {Precision::fp8_block, Precision::bf16, Precision::nvfp4}) {
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 256, 256, E, p);
    ASSERT_EQ(cfg.top_k, k);
    const uint64_t seed = seeds_for(hash_ints({T, E, int(p)})).back();
    const std::vector<int32_t> ids = ids_from_counts(counts, T, k, seed);
    for (ReductionMode m : kModes) {
      const LayerCase lc = make_case(cfg, T, m, LayerRoute::given);
      const LayerData d = make_layer_data(lc, seed);
      const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
      std::vector<LayerRun> both;
      for (bool st : {true, false}) {
        detail::ScopedKnob<bool> knob(&detail::Knobs::static_tiles, st);
        both.push_back(run_layer(*g.layer, lc, d, /*validate=*/true, &ids));
        const LayerRun& run = both.back();
        const std::string ctx = lc.describe() + strf(" FMOE_STATIC_TILES=%d seed %llu", int(st),
                                                     (unsigned long long)seed);
        EXPECT_EQ(run.dropped, 0) << ctx;
        check_gate_up(lc, d, g.layer->impl(), run, ctx);
        check_down(lc, d, g.layer->impl(), run, ctx);
        if (run.plan.gemv) continue;  // 4-bit weights at a few tokens: no tiles
        const int bt = detail::gemm_config_info(run.plan.up_config).block_t;
        // Every expert but two is hit (hit > 0.9); 256 x 256 weights are far under kStaticTileMaxExpertBytes.
        const bool rule = detail::static_tile_numbering(1.0, double(T) * k / E, bt, 2.0 * 256 * 256 * 2, nullptr);
        ASSERT_EQ(run.plan.up.static_tiles != 0, st && rule) << ctx << " BLOCK_T=" << bt;
        ASSERT_EQ(run.plan.down.static_tiles != 0, st && rule) << ctx;
        static_runs += run.plan.up.static_tiles != 0;
      }
      const LayerRun &a = both[0], &b = both[1];
      if (a.plan.gemv || a.plan.up_config != b.plan.up_config || a.plan.split != b.plan.split) continue;
      const std::string ctx = lc.describe() + strf(" seed %llu", (unsigned long long)seed);
      ASSERT_EQ(a.plan.h_block, b.plan.h_block) << ctx;
      const size_t differs = first_route_differing(a, b);
      EXPECT_EQ(differs, a.row.size()) << ctx << ": route " << differs
                                       << "'s intermediate differs between the two numberings";
      if (m == ReductionMode::deterministic && a.plan.down_config == b.plan.down_config) {
        EXPECT_TRUE(a.y == b.y) << ctx << ": the output differs between the two numberings";
      }
    }
  }
  EXPECT_GT(static_runs, 0) << "no case ran with static tile numbering: the test checks nothing of it";
}

TEST(LayerGpu, NarrowTailTilesAtEveryWidth) {
  // An expert's last token tile runs at a half or a quarter of BLOCK_T when its routes fit
  // (TileWidth, sm90_gemm_mainloop.cuh: fp8 and NVFP4 weights as wgmma's M side; the other
  // configs run every tile at full width and are checked here too). Caller-given routing puts 1,
  // 16, 17, 20, 32, 33, 64, 65, 100, 127, 128, 129, 160, 161, 192, 193, 288 and ~60 routes on the
  // experts (seeded order), so every BLOCK_T = 64 and 128 config meets tails at, just above and
  // below each width; each config forced in turn, both modes, narrowing on and off
  // (FMOE_NARROW_TAILS), both GEMMs against their oracles. The two-wave tokens-as-M configs run
  // tails of <= 64 routes at half height (HalfTile), with the full tile's operations: the
  // intermediate, and in deterministic mode the output, must be bitwise the same with the knob on
  // and off.
  FMOE_SKIP_WITHOUT_GPU();
  const int T = 320, E = 32, k = 8;
  std::vector<int> counts = {0, 1, 16, 17, 20, 32, 33, 64, 65, 100, 127, 128, 129, 160, 161, 192, 193, 288};
  int sum = 0;
  for (int c : counts) sum += c;
  const int fill = (T * k - sum) / (E - int(counts.size()));  // the other experts, ~60 each
  while (int(counts.size()) < E - 1) {
    counts.push_back(fill);
    sum += fill;
  }
  for (int i = 0; i < int(detail::GemmConfigId::count); ++i) {
    const detail::GemmConfigInfo ci = detail::gemm_config_info(detail::GemmConfigId(i));
    if (ci.block_t < 64) continue;
    if (ci.rows == detail::GemmRows::gathered && ci.epilogue == detail::GemmEpilogue::combine)
      continue;  // the projection's configs: tests/moe
    const Precision p = ci.weights == detail::GemmWeights::bf16   ? Precision::bf16
                        : ci.weights == detail::GemmWeights::e2m1 ? Precision::nvfp4
                                                                  : Precision::fp8_block;
    const bool half_tiles = ci.operands == detail::GemmOperands::tokens_m && ci.waves == 2;
    // H = 256 gives the down GEMM one two-wave weight tile (its half tiles alone); H = 768 three:
    // one pair of half tiles and an odd last one (HalfTile's walk). The gate/up (I = 256) has two:
    // one pair.
    for (int H : {256, 768}) {
      if (H != 256 && !half_tiles) continue;
      const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), H, 256, E, p);
      ASSERT_EQ(cfg.top_k, k);
      ASSERT_LE(sum, T * k);
      std::vector<int> c = counts;
      c.push_back(T * k - sum);  // the last expert takes the rest
      ASSERT_LE(c.back(), T);
      const uint64_t seed = seeds_for(hash_ints({i, T, E})).back();
      const std::vector<int32_t> ids = ids_from_counts(c, T, k, seed);
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, ci.name);
      std::vector<LayerRun> narrowed;  // per mode, with the knob on
      int compared = 0;                // deterministic outputs compared bitwise
      for (bool narrow : {true, false})  // FMOE_NARROW_TAILS=0: every tile at full width
      for (ReductionMode m : kModes) {
        detail::ScopedKnob<bool> tails(&detail::Knobs::narrow_tails, narrow);
        const LayerCase lc = make_case(cfg, T, m, LayerRoute::given);
        const LayerData d = make_layer_data(lc, seed);
        const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
        const LayerRun run = run_layer(*g.layer, lc, d, /*validate=*/true, &ids);
        const std::string ctx = lc.describe() + " " + ci.name + (narrow ? "" : " full width") +
                                strf(" seed %llu", (unsigned long long)seed);
        EXPECT_EQ(run.dropped, 0) << ctx;
        check_gate_up(lc, d, g.layer->impl(), run, ctx);
        check_down(lc, d, g.layer->impl(), run, ctx);
        if (!half_tiles) continue;
        if (narrow) {
          narrowed.push_back(run);
          continue;
        }
        const LayerRun& half = narrowed[m == ReductionMode::fast ? 0 : 1];
        ASSERT_EQ(half.plan.h_block, run.plan.h_block) << ctx;
        const size_t differs = first_route_differing(half, run);
        if (ci.epilogue == detail::GemmEpilogue::swiglu) {
          EXPECT_EQ(differs, half.row.size()) << ctx << ": the intermediate of this route differs with half-height tiles";
        }
        // A forced down config runs after the default gate/up, whose narrow tiles the knob also
        // turns off: its output is compared only where its input is the same.
        if (differs == half.row.size() && m == ReductionMode::deterministic) {
          EXPECT_EQ(half.y, run.y) << ctx << ": half-height tiles changed the deterministic output";
          ++compared;
        }
      }
      if (half_tiles) {
        EXPECT_EQ(compared, 1) << ci.name << " H=" << H << ": the intermediate differed, so no output was compared";
      }
    }
  }
}

TEST(LayerGpu, TokensOnMNeedTwoWeightScalesPerWave) {
  // GEMM 1 with tokens as wgmma's M side reads one fp8 scale per gate half and per up half of a
  // 128-row wave. I = 96: the up rows (from row 96 of w13) cross a 128-row scale block, so the
  // prepared layer says no, the plan keeps weights as M, and a forced tokens_m config is an
  // Error; I = 256: the plan puts tokens on M at BLOCK_T=128.
  FMOE_SKIP_WITHOUT_GPU();
  for (int I : {96, 256}) {
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 256, I, 8, Precision::fp8_block);
    const LayerCase c = make_case(cfg, 300, ReductionMode::fast);  // ~150 rows per expert
    const LayerData d = make_layer_data(c, 4242 + I);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    EXPECT_EQ(g.layer->impl().w13_two_scales, I == 256) << "I=" << I;
    // The gate/up pairs in thread order exactly where the scales allow it (grouped_gemm.hpp:
    // swiglu_intermediate): I = 96 keeps the blocked order. The weights-as-M configs read either
    // (EveryCompiledLayerConfigRuns runs them all on thread-ordered presets).
    EXPECT_EQ(g.layer->impl().w13_thread_order, I == 256) << "I=" << I;
    const LayerRun run = run_layer(*g.layer, c, d);
    const detail::GemmConfigInfo up = detail::gemm_config_info(run.plan.up_config);
    EXPECT_EQ(up.block_t, 128) << up.name;
    EXPECT_EQ(up.operands == detail::GemmOperands::tokens_m, I == 256) << up.name;
    // Fast mode after a two-wave tokens-as-M gate/up: one intermediate scale per 128 columns, and
    // a down config that reads it so.
    EXPECT_EQ(run.plan.h_block, I == 256 ? 128 : 64) << up.name;
    EXPECT_EQ(detail::gemm_config_info(run.plan.down_config).rows == detail::GemmRows::tma_s128, I == 256);
    check_gate_up(c, d, g.layer->impl(), run, c.describe());
    check_down(c, d, g.layer->impl(), run, c.describe());
    check_end_to_end(c, d, run, c.describe());
    // Deterministic mode keeps 64 columns per scale (its bits do not depend on the token-tile width).
    const LayerCase det = make_case(cfg, 300, ReductionMode::deterministic);
    const LayerRun run_det = run_layer(*g.layer, det, d);
    EXPECT_EQ(run_det.plan.h_block, 64);
    check_gate_up(det, d, g.layer->impl(), run_det, det.describe());
    check_down(det, d, g.layer->impl(), run_det, det.describe());
    // MoeForwardArgs::intermediate_scale_block asks: 64 in fast mode (the EP layer's), 128 in
    // deterministic mode where GEMM 1 can write it; 128 without two-wave tokens-as-M tiles and
    // other values are Errors.
    for (const auto& [mode, block] : {std::pair{ReductionMode::fast, 64}, std::pair{ReductionMode::deterministic, 128}}) {
      LayerCase asked = make_case(cfg, 300, mode);
      asked.intermediate_scale_block = block;
      const std::string ctx = asked.describe() + strf(" intermediate_scale_block=%d", block);
      if (I == 96 && block == 128) {
        test::expect_error([&] { run_layer(*g.layer, asked, d); }, "intermediate_scale_block=128 needs GEMM 1");
        continue;
      }
      const LayerRun r = run_layer(*g.layer, asked, d);
      EXPECT_EQ(r.plan.h_block, block) << ctx;
      check_gate_up(asked, d, g.layer->impl(), r, ctx);
      check_down(asked, d, g.layer->impl(), r, ctx);
    }
    {
      LayerCase bad = make_case(cfg, 300, ReductionMode::fast);
      bad.intermediate_scale_block = 32;
      test::expect_error([&] { run_layer(*g.layer, bad, d); }, "intermediate_scale_block=32 must be");
    }
    if (I == 96) {
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, "up_fp8_bt128_w2_tm_s4");
      test::expect_error([&] { run_layer(*g.layer, c, d); }, "puts tokens on wgmma's M side");
      detail::ScopedKnob<std::string> down(&detail::Knobs::force_config, "down_fp8_bt128_tm_h128_s6");
      test::expect_error([&] { run_layer(*g.layer, c, d); },
                         "only a two-wave tokens-as-M gate/up config writes");
    }
  }
}

TEST(LayerGpu, FinalizeByBulkCopiesGivesTheSameBits) {
  // finalize_rows_kernel (FMOE_FINALIZE_BULK=2 takes it at any size) against the one-load-per-
  // thread kernel (0) on the same layer run: bf16 route rows in slot order (T=300: 300 routes per
  // expert, the staged twin) and by route (T=37), fp32 rows (deterministic), a repeated and a bad
  // id (dropped routes), H = 400 (one 1024-column item, partial) and 2304 (three, the last of
  // 256 columns).
  FMOE_SKIP_WITHOUT_GPU();
  detail::ScopedKnob<int> rows16(&detail::Knobs::rows16_min_t, 1);
  for (int H : {400, 2304}) {
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), H, 256, 8, Precision::fp8_block);
    for (ReductionMode m : kModes) {
      for (int T : {300, 37}) {
        const LayerCase c = make_case(cfg, T, m, LayerRoute::given);
        const LayerData d = make_layer_data(c, 3500 + T);
        std::vector<int32_t> ids = d.given.ids;
        ids[1] = ids[0];  // token 0 repeats its first expert
        ids[3] = 1000;    // out of range
        const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
        std::vector<uint16_t> y[3];
        for (int bulk : {0, 2}) {
          detail::ScopedKnob<int> knob(&detail::Knobs::finalize_bulk, bulk);
          const LayerRun run = run_layer(*g.layer, c, d, false, &ids);
          EXPECT_EQ(run.dropped, 2) << c.describe();
          y[bulk] = run.y;
        }
        EXPECT_EQ(y[0], y[2]) << c.describe() << ": the bulk-copy finalize differs";
      }
    }
  }
}

TEST(LayerGpu, FastModeBf16RouteRows) {
  // Fast mode's down GEMM writing one bf16 row per route, summed by finalize (FMOE_ROWS16_MIN_T=1
  // here: every T the engine runs): every compiled down config forced in turn, shared chunks,
  // biases, NVFP4 through the engine and not through the decode GEMVs (they keep their atomics),
  // repeats and bad ids dropped by the schedule kernel and the fused schedule; the rows are summed
  // in route order, so two runs agree bit for bit.
  FMOE_SKIP_WITHOUT_GPU();
  detail::ScopedKnob<int> rows16(&detail::Knobs::rows16_min_t, 1);
  auto check = [](const LayerCase& c, uint64_t seed, bool want_rows16, const std::vector<int32_t>* ids = nullptr,
                  int want_dropped = 0) {
    const LayerData d = make_layer_data(c, seed);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    const bool validate = ids == nullptr;
    const LayerRun run = run_layer(*g.layer, c, d, validate, ids);
    const std::string ctx = c.describe() + strf(" seed %llu", (unsigned long long)seed) + " rows16 " +
                            detail::gemm_config_info(run.plan.down_config).name;
    EXPECT_EQ(run.plan.finalize.rows16 != nullptr, want_rows16) << ctx;
    EXPECT_EQ(run.dropped, want_dropped) << ctx;
    check_gate_up(c, d, g.layer->impl(), run, ctx);
    check_down(c, d, g.layer->impl(), run, ctx);
    if (!ids) check_end_to_end(c, d, run, ctx);
    EXPECT_EQ(run_layer(*g.layer, c, d, validate, ids).y, run.y) << ctx << ": not bitwise stable";
  };
  for (int i = 0; i < int(detail::GemmConfigId::count); ++i) {
    const detail::GemmConfigInfo ci = detail::gemm_config_info(detail::GemmConfigId(i));
    if (ci.rows == detail::GemmRows::gathered || ci.epilogue != detail::GemmEpilogue::combine) continue;
    detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, ci.name);
    const Precision p = ci.weights == detail::GemmWeights::bf16   ? Precision::bf16
                        : ci.weights == detail::GemmWeights::e2m1 ? Precision::nvfp4
                                                                  : Precision::fp8_block;
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 256, 256, 8, p);
    check(make_case(cfg, 90, ReductionMode::fast), 3100 + i, true);
  }
  {
    // The staged rows (slot order, TMA stores of whole tiles) need full tiles: ~300 routes per
    // expert, two full token tiles and a partial one each, H = 400 for a partial last box.
    detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, "down_fp8_bt128_w2_tm_h128_s3");
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 400, 256, 8, Precision::fp8_block);
    check(make_case(cfg, 300, ReductionMode::fast), 3150, true);
  }
  {
    // The automatic choice: the staged twin (rows in slot order) where the experts average >= 128
    // routes (T * 8 / 8 here), else rows by route.
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 400, 256, 8, Precision::fp8_block);
    for (int T : {300, 100}) {
      const LayerCase c = make_case(cfg, T, ReductionMode::fast);
      check(c, 3160 + T, true);
      const LayerData d = make_layer_data(c, 3160 + T);
      const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
      const LayerRun run = run_layer(*g.layer, c, d);
      const std::string name = detail::gemm_config_info(run.plan.down_config).name;
      EXPECT_EQ(run.plan.down.sorted_rows, T >= 128 ? 1 : 0) << "T=" << T << " " << name;
      if (T >= 128) {
        EXPECT_EQ(name, "down_fp8_bt128_w2_tm_h128_s3");
      }
      EXPECT_EQ(run.plan.finalize.route_row != nullptr, T >= 128) << "T=" << T;
    }
  }
  for (Precision p : {Precision::fp8_block, Precision::bf16, Precision::nvfp4}) {
    MoeConfig chunks = scaled(find_preset("deepseek-v3"), 384, 128, 16, p);
    chunks.shared_intermediate = 320;
    chunks.validate();
    check(make_case(chunks, 300, ReductionMode::fast), 3200, true);
    const MoeConfig oss = scaled(find_preset("gpt-oss-120b"), 256, 128, 8, p);  // biases
    check(make_case(oss, 40, ReductionMode::fast, LayerRoute::hot), 3201, true);
  }
  const MoeConfig nv = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::nvfp4);
  check(make_case(nv, 4, ReductionMode::fast), 3300, false);  // decode GEMVs: fp32 atomics
  check(make_case(nv, 4, ReductionMode::deterministic), 3301, false);  // deterministic: fp32 rows
  const MoeConfig cfg = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::fp8_block);
  for (int T : {6, 200}) {  // fused schedule, schedule kernel
    const LayerCase c = make_case(cfg, T, ReductionMode::fast, LayerRoute::given);
    std::vector<int32_t> ids = make_layer_data(c, 3400 + T).given.ids;
    ids[1] = ids[0];  // token 0 repeats its first expert
    ids[3] = 1000;    // out of range
    check(c, 3400 + T, true, &ids, 2);
  }
}

TEST(LayerGpu, Bf16RouteRowsFromTheRulesSumBytes) {
  // The default rule (no knob): fast mode writes bf16 route rows once the fp32 sums T * H * 4
  // bytes reach 4 MiB with FP8 or bf16 weights, or exceed 50 MiB with NVFP4 / MXFP4 weights, and
  // keeps its atomics below; deterministic mode keeps fp32 rows; the workspace is sized for the
  // rows exactly when the rule takes them. Planned only: the rows path itself is checked by
  // FastModeBf16RouteRows.
  FMOE_SKIP_WITHOUT_GPU();
  for (Precision p : {Precision::fp8_block, Precision::bf16, Precision::nvfp4}) {
    const MoeConfig cfg = scaled(find_preset("qwen3-30b-a3b"), 2048, 128, 8, p);
    const LayerCase c0 = make_case(cfg, 1, ReductionMode::fast);
    const LayerData d = make_layer_data(c0, 4100, /*codes=*/p != Precision::bf16);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    const int H = cfg.hidden, k = cfg.top_k;
    // The first T that takes the rows: T * H * 4 >= 4 MiB (FP8, bf16), > 50 MiB (NVFP4).
    const int first = p != Precision::nvfp4 ? int((int64_t(4) << 20) / (4 * H))
                                            : int((int64_t(50) << 20) / (4 * H)) + 1;
    DeviceBuffer d_x(size_t(first) * H * 2), d_logits(size_t(first) * cfg.num_experts * 4),
        d_y(size_t(first) * H * 2);
    for (int T : {first - 1, first})
      for (ReductionMode m : kModes) {
        const std::string ctx = strf("%s T=%d %s", precision_name(p), T, reduction_mode_name(m));
        MoeForwardArgs a;
        a.x = TensorRef::contiguous(d_x.get(), DType::bf16, {T, H}, Device::cuda);
        a.router_logits = TensorRef::contiguous(d_logits.get(), DType::f32, {T, cfg.num_experts}, Device::cuda);
        a.y = TensorRef::contiguous(d_y.get(), DType::bf16, {T, H}, Device::cuda);
        a.mode = m;
        const size_t bytes = g.layer->workspace_size(T, m);
        DeviceBuffer ws(bytes);
        const detail::LayerPlan plan = detail::plan_layer_forward(g.layer->impl(), a, ws.get(), bytes, nullptr);
        const bool rows = T == first && m == ReductionMode::fast;
        EXPECT_EQ(plan.finalize.rows16 != nullptr, rows) << ctx;
        EXPECT_EQ(plan.down.out_type == detail::GemmOut::bf16, rows) << ctx;
        EXPECT_EQ(plan.route_quant.zero_rows != nullptr, m == ReductionMode::fast && !rows) << ctx;
        if (m == ReductionMode::fast) {  // the sums [T, H] fp32, or the rows [T * k, H] bf16
          EXPECT_GE(bytes, (rows ? size_t(T) * k * H * 2 : size_t(T) * H * 4)) << ctx;
        }
      }
  }
}

TEST(LayerGpu, Nvfp4OddSizesSharedChunksAndLargeT) {
  // NVFP4 weights (W4A16): H not a multiple of 64 (K padded in the prepared blocks), I not a
  // multiple of 64, a shared MLP in two chunks, and T with several token tiles per expert.
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig odd = scaled(find_preset("qwen3.5-35b-a3b"), 336, 80, 8, Precision::nvfp4);
  for (int T : {1, 37, 300})
    for (ReductionMode m : kModes) run_case(make_case(odd, T, m));
  MoeConfig chunks = scaled(find_preset("deepseek-v3"), 256, 128, 16, Precision::nvfp4);
  chunks.shared_intermediate = 256;  // two chunks of the intermediate 128
  chunks.validate();
  for (int T : {5, 700}) run_case(make_case(chunks, T, ReductionMode::fast));
  const MoeConfig oss = scaled(find_preset("gpt-oss-120b"), 256, 128, 8, Precision::nvfp4);
  run_case(make_case(oss, 500, ReductionMode::deterministic));
}

TEST(LayerGpu, FourBitTileWidthsFollowTheRows) {
  // layer_wide_tiles' and layer_narrow_tiles' e2m1 branches (sessions 47-48), each width checked
  // against the oracle in both modes. NVFP4 at deepseek-v3's H = 7168, shrunk to 64 experts
  // (top-8): T = 64 is 8 rows per expert (the narrow BLOCK_T=16 tiles), T = 80 is 10 (BLOCK_T=128
  // with two-wave tiles in both GEMMs). At qwen3-235b-a22b's H = 4096 with 64 experts: T = 192 is
  // 24 rows (BLOCK_T=32, not select_block_t's 64). At qwen3-30b-a3b's H = 2048 with 64 experts:
  // T = 272 is 34 rows (BLOCK_T=128 with two waves, not 64).
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig ds = scaled(find_preset("deepseek-v3"), 7168, 256, 64, Precision::nvfp4);
  const MoeConfig qw = scaled(find_preset("qwen3-235b-a22b"), 4096, 256, 64, Precision::nvfp4);
  const MoeConfig q3 = scaled(find_preset("qwen3-30b-a3b"), 2048, 256, 64, Precision::nvfp4);
  struct Point {
    const MoeConfig* cfg;
    int T, block_t, waves;
  };
  for (const Point& p : {Point{&ds, 64, 16, 0}, Point{&ds, 80, 128, 2}, Point{&qw, 192, 32, 0},
                        Point{&q3, 272, 128, 2}}) {
    for (ReductionMode m : kModes) {
      const LayerCase c = make_case(*p.cfg, p.T, m);
      const LayerData d = make_layer_data(c, 4700 + p.T);
      const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
      const LayerRun run = run_layer(*g.layer, c, d);
      const detail::GemmConfigInfo up = detail::gemm_config_info(run.plan.up_config);
      const detail::GemmConfigInfo down = detail::gemm_config_info(run.plan.down_config);
      const std::string ctx = c.describe() + " " + up.name + "+" + down.name + " (" + run.plan.config_reason + ")";
      ASSERT_FALSE(run.plan.gemv) << ctx << ": the GEMV path took this T; the test needs the engine";
      EXPECT_EQ(up.block_t, p.block_t) << ctx;
      EXPECT_EQ(down.block_t, p.block_t) << ctx;
      if (p.waves > 0) {
        EXPECT_EQ(up.waves, p.waves) << ctx;
        EXPECT_EQ(down.waves, p.waves) << ctx;
      }
      check_gate_up(c, d, g.layer->impl(), run, ctx);
      check_down(c, d, g.layer->impl(), run, ctx);
      check_end_to_end(c, d, run, ctx);
    }
  }
}

TEST(LayerGpu, DecodeGemvPathAndTheEngineAtTheSameT) {
  // The 4-bit layer at T <= FMOE_GEMV_MAX_T runs both GEMMs as decode GEMVs (decode_gemv.hpp):
  // every T the GEMVs take (1..8), and the same cases through the engine (knob 0). Shared experts
  // (chunks), biases and gpt-oss's clamped SwiGLU, weight on input (Llama 4), odd H (K past a
  // k-block), both modes.
  FMOE_SKIP_WITHOUT_GPU();
  MoeConfig chunks = scaled(find_preset("deepseek-v3"), 336, 128, 16, Precision::nvfp4);
  chunks.shared_intermediate = 256;
  chunks.validate();
  const std::vector<MoeConfig> cfgs = {
      chunks, scaled(find_preset("gpt-oss-120b"), 256, 128, 8, Precision::mxfp4),
      scaled(find_preset("llama4-maverick"), 256, 128, 16, Precision::nvfp4),
      scaled(find_preset("qwen3-30b-a3b"), 512, 96, 32, Precision::nvfp4)};
  for (const MoeConfig& cfg : cfgs)
    for (int max_t : {8, 0}) {
      detail::ScopedKnob<int> knob(&detail::Knobs::gemv_max_t, max_t);
      for (int T : {1, 2, 4, 8})
        for (ReductionMode m : kModes) {
          const LayerCase c = make_case(cfg, T, m);
          const LayerData d = make_layer_data(c, 500 + T);
          const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
          const LayerRun run = run_layer(*g.layer, c, d);
          EXPECT_EQ(run.plan.gemv, max_t > 0) << c.describe();
          const std::string ctx = c.describe() + (max_t > 0 ? " decode GEMVs" : " engine");
          EXPECT_EQ(run.dropped, 0) << ctx;
          check_gate_up(c, d, g.layer->impl(), run, ctx);
          check_down(c, d, g.layer->impl(), run, ctx);
          check_end_to_end(c, d, run, ctx);
        }
    }
  // Caller ids with a repeat and an id out of range: the GEMVs drop and count them (the knob keeps
  // the GEMVs on whatever the default rule).
  detail::ScopedKnob<int> gemv(&detail::Knobs::gemv_max_t, 8);
  const MoeConfig given = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::nvfp4);
  LayerCase c = make_case(given, 3, ReductionMode::deterministic, LayerRoute::given);
  LayerData d = make_layer_data(c, 91);
  const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
  std::vector<int32_t> ids = d.given.ids;
  ids[1] = ids[0];
  ids[3] = 1000;
  const LayerRun run = run_layer(*g.layer, c, d, false, &ids);
  EXPECT_TRUE(run.plan.gemv);
  EXPECT_EQ(run.dropped, 2);
  check_gate_up(c, d, g.layer->impl(), run, c.describe() + " repeats, decode GEMVs");
  check_down(c, d, g.layer->impl(), run, c.describe() + " repeats, decode GEMVs");
  // A token none of whose routes is kept (no shared experts): zeros in y (finalize writes them).
  const MoeConfig routed = scaled(find_preset("qwen3-30b-a3b"), 256, 128, 16, Precision::nvfp4);
  for (ReductionMode m : kModes) {
    LayerCase c2 = make_case(routed, 3, m, LayerRoute::given);
    LayerData d2 = make_layer_data(c2, 92);
    const cli::GpuLayer g2 = cli::make_gpu_layer(d2.lw, nullptr);
    std::vector<int32_t> ids2 = d2.given.ids;
    for (int j = 0; j < routed.top_k; ++j) ids2[size_t(routed.top_k + j)] = j % 2 ? -1 : 1000;
    const LayerRun run2 = run_layer(*g2.layer, c2, d2, false, &ids2);
    const std::string ctx2 = c2.describe() + " token 1 without a kept route, decode GEMVs";
    EXPECT_EQ(run2.dropped, routed.top_k) << ctx2;
    for (int n = 0; n < routed.hidden; ++n)
      ASSERT_EQ(run2.y[size_t(routed.hidden) + n], 0) << ctx2 << " n=" << n;
  }
}

TEST(LayerGpu, DecodeGemvKSplitInsideTheCta) {
  // The decode GEMVs with few CTAs split K inside the CTA (FMOE_GEMV_SPLIT=1, 2, 4): K of 2
  // k-blocks (parts with none), 6 (uneven parts), 8 and 45 (every ring wraps); both modes, and
  // deterministic output stable from run to run.
  FMOE_SKIP_WITHOUT_GPU();
  MoeConfig chunks = scaled(find_preset("deepseek-v3"), 336, 128, 16, Precision::nvfp4);
  chunks.shared_intermediate = 256;
  chunks.validate();
  const std::vector<MoeConfig> cfgs = {chunks, scaled(find_preset("qwen3-30b-a3b"), 512, 96, 32, Precision::nvfp4),
                                       scaled(find_preset("gpt-oss-120b"), 2880, 128, 4, Precision::mxfp4)};
  detail::ScopedKnob<int> gemv(&detail::Knobs::gemv_max_t, 8);
  for (int split : {1, 2, 4}) {
    detail::ScopedKnob<int> knob(&detail::Knobs::gemv_split, split);
    for (const MoeConfig& cfg : cfgs)
      for (int T : {1, 8})
        for (ReductionMode m : kModes) {
          const LayerCase c = make_case(cfg, T, m);
          const LayerData d = make_layer_data(c, 700 + T);
          const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
          const LayerRun run = run_layer(*g.layer, c, d);
          const std::string ctx = c.describe() + strf(" GEMV split %d", split);
          EXPECT_TRUE(run.plan.gemv) << ctx;
          EXPECT_EQ(run.dropped, 0) << ctx;
          check_gate_up(c, d, g.layer->impl(), run, ctx);
          check_down(c, d, g.layer->impl(), run, ctx);
          check_end_to_end(c, d, run, ctx);
          if (m == ReductionMode::deterministic) {
            EXPECT_EQ(run_layer(*g.layer, c, d).y, run.y) << ctx << ": not bitwise stable";
          }
        }
  }
}

TEST(LayerGpu, DecodeGemvDownEarlyColumns) {
  // The down GEMV finding its columns and loading its first weights before waiting on the up
  // (FMOE_GEMV_DOWN_EARLY 1, the default) and after (0): the same oracles, shared experts, odd
  // sizes, T of 1, 3 and 8, both modes.
  FMOE_SKIP_WITHOUT_GPU();
  MoeConfig shared = scaled(find_preset("deepseek-v3"), 336, 128, 16, Precision::nvfp4);
  shared.shared_intermediate = 256;
  shared.validate();
  const std::vector<MoeConfig> cfgs = {shared, scaled(find_preset("qwen3-30b-a3b"), 512, 96, 32, Precision::nvfp4),
                                       scaled(find_preset("gpt-oss-120b"), 2880, 128, 4, Precision::mxfp4)};
  detail::ScopedKnob<int> gemv(&detail::Knobs::gemv_max_t, 8);
  for (int early : {0, 1}) {
    detail::ScopedKnob<int> ea(&detail::Knobs::gemv_down_early, early);
    for (const MoeConfig& cfg : cfgs)
      for (int T : {1, 3, 8})
        for (ReductionMode m : kModes) {
          const LayerCase c = make_case(cfg, T, m);
          const LayerData d = make_layer_data(c, 900 + T);
          const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
          const LayerRun run = run_layer(*g.layer, c, d);
          const std::string ctx = c.describe() + strf(" down GEMV early %d", early);
          ASSERT_TRUE(run.plan.gemv) << ctx;
          EXPECT_EQ(run.plan.gemv_down.early, early) << ctx;
          EXPECT_EQ(run.plan.gemv_up.early, 0) << ctx;
          check_gate_up(c, d, g.layer->impl(), run, ctx);
          check_down(c, d, g.layer->impl(), run, ctx);
          check_end_to_end(c, d, run, ctx);
        }
  }
}

TEST(LayerGpu, DecodeGemvForwardsBackToBackWithNewRouting) {
  // The early down GEMV reads the routing before its wait on the up GEMV (route_quant wrote it
  // two kernels back): forwards one after another on one workspace, each with other logits and no
  // synchronization between them, on a stream and from a graph, must each use their own routing.
  // Every other forward's logits are rotated by 5 experts, so consecutive calls route differently;
  // the last forward's output is checked against its oracle.
  FMOE_SKIP_WITHOUT_GPU();
  MoeConfig shared = scaled(find_preset("deepseek-v3"), 336, 128, 16, Precision::nvfp4);
  shared.shared_intermediate = 256;
  shared.validate();
  for (const MoeConfig& cfg : {shared, scaled(find_preset("qwen3-30b-a3b"), 512, 96, 32, Precision::nvfp4)})
    for (int T : {1, 8})
      for (ReductionMode m : kModes) {
        const LayerCase c = make_case(cfg, T, m);
        const LayerData d = make_layer_data(c, 950 + T);
        const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
        const int H = cfg.hidden, E = cfg.num_experts;
        std::vector<float> rotated(d.logits.size());
        for (int t = 0; t < T; ++t)
          for (int e = 0; e < E; ++e) rotated[size_t(t) * E + e] = d.logits[size_t(t) * E + (e + 5) % E];
        DeviceBuffer d_x = DeviceBuffer::from(d.x_bits), d_l0 = DeviceBuffer::from(d.logits),
                     d_l1 = DeviceBuffer::from(rotated);
        DeviceBuffer d_y(size_t(T) * H * 2), ws(g.layer->workspace_size(T, m));
        MoeForwardArgs a[2];
        for (int i = 0; i < 2; ++i) {
          a[i].x = TensorRef::contiguous(d_x.get(), DType::bf16, {T, H}, Device::cuda);
          a[i].router_logits = TensorRef::contiguous((i ? d_l1 : d_l0).get(), DType::f32, {T, E}, Device::cuda);
          a[i].y = TensorRef::contiguous(d_y.get(), DType::bf16, {T, H}, Device::cuda);
          a[i].mode = m;
        }
        const detail::LayerPlan plan = detail::plan_layer_forward(g.layer->impl(), a[0], ws.get(), ws.bytes(), nullptr);
        ASSERT_TRUE(plan.gemv && plan.gemv_down.early) << c.describe();
        cudaStream_t s;
        FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        {
          cudaGraph_t graph;
          cudaGraphExec_t exec;
          FMOE_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
          for (int i = 0; i < 21; ++i) g.layer->forward(a[i % 2], ws.get(), ws.bytes(), s);  // ends on a[0]
          FMOE_CUDA(cudaStreamEndCapture(s, &graph));
          FMOE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
          cudaGraphDestroy(graph);
          d_y.fill(0xFF);
          for (int i = 0; i < 5; ++i) FMOE_CUDA(cudaGraphLaunch(exec, s));
          FMOE_CUDA(cudaStreamSynchronize(s));
          cudaGraphExecDestroy(exec);
        }
        const std::vector<uint16_t> y_graph = d_y.to_host<uint16_t>();
        for (int i = 0; i < 41; ++i) g.layer->forward(a[i % 2], ws.get(), ws.bytes(), s);  // ends on a[0]
        g.layer->forward(a[1], ws.get(), ws.bytes(), s);                                       // then a[1]
        FMOE_CUDA(cudaStreamSynchronize(s));
        const std::vector<uint16_t> y_stream = d_y.to_host<uint16_t>();
        FMOE_CUDA(cudaStreamDestroy(s));
        const ref::LayerResult want0 = ref::moe_layer(d.lw, d.x.data(), d.logits.data(), T, plan.h_block);
        const ref::LayerResult want1 = ref::moe_layer(d.lw, d.x.data(), rotated.data(), T, plan.h_block);
        const bool fp8 = g.layer->impl().fp8;
        const cli::LayerCheck c0 = cli::check_layer_output(y_graph, want0.y, H, fp8);
        EXPECT_TRUE(c0.ok()) << c.describe() << " graph of 21 forwards, last on the original logits: "
                             << cli::describe_layer_check(c0, y_graph, want0.y, H);
        const cli::LayerCheck c1 = cli::check_layer_output(y_stream, want1.y, H, fp8);
        EXPECT_TRUE(c1.ok()) << c.describe() << " 42 forwards on a stream, last on the rotated logits: "
                             << cli::describe_layer_check(c1, y_stream, want1.y, H);
        const cli::LayerCheck cx = cli::check_layer_output(y_stream, want0.y, H, fp8);
        EXPECT_FALSE(cx.ok()) << c.describe() << ": the two routings give the same output, the test cannot tell them apart";
      }
}

TEST(LayerGpu, Mxfp4OddSizesAndScalesFarBelowTheRowMax) {
  // MXFP4 weights (gpt-oss's format, W4A16): K not a multiple of 64 (H = 352, I = 96: the
  // prepared blocks pad K), several token tiles per expert, gpt-oss's clamped SwiGLU + biases.
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig odd = scaled(find_preset("qwen3.5-35b-a3b"), 352, 96, 8, Precision::mxfp4);
  for (int T : {1, 37, 300})
    for (ReductionMode m : kModes) run_case(make_case(odd, T, m));
  const MoeConfig oss = scaled(find_preset("gpt-oss-120b"), 256, 128, 8, Precision::mxfp4);
  run_case(make_case(oss, 500, ReductionMode::deterministic));
  // Rows whose scales span more than E4M3's 17 binades: one block per row of the first two
  // experts 12 binades above the rest (every block still exact) and one 25 below that (stored as
  // zero: e2m1_layout.hpp's rule, which the reference applies too), and a row of all-zero codes
  // under code 0 scales.
  const LayerCase c = make_case(oss, 64, ReductionMode::fast);
  const uint64_t seed = seeds_for(0x3F4C).back();
  LayerData d = make_layer_data(c, seed);
  for (ref::WeightSet* w : {&d.lw.w13, &d.lw.w2}) {
    const int per_row = w->K / 32;
    for (int64_t row = 0; row < 2 * int64_t(w->N); ++row) {
      uint8_t* s = w->block_scale.data() + row * per_row;
      s[0] = uint8_t(s[1] + 12);
      s[per_row - 1] = uint8_t(s[0] - 25);
    }
    for (int b = 0; b < per_row; ++b) w->block_scale[size_t(2 * w->N * per_row + b)] = 0;
    std::fill_n(w->q.begin() + 2 * w->N * (w->K / 2), w->K / 2, uint8_t(0));
  }
  const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
  const LayerRun run = run_layer(*g.layer, c, d);
  const std::string ctx = c.describe() + strf(" (scales far below the row max) seed %llu", (unsigned long long)seed);
  check_gate_up(c, d, g.layer->impl(), run, ctx);
  check_down(c, d, g.layer->impl(), run, ctx);
  check_end_to_end(c, d, run, ctx);
}

TEST(LayerGpu, FourBitScalesThatAreNotFiniteAreRefused) {
  // A NaN or negative NVFP4 block scale, or UE8M0's NaN code 0xff, is a malformed checkpoint: the
  // prepare names the tensor, the code, its row and block, and builds nothing.
  FMOE_SKIP_WITHOUT_GPU();
  ref::LayerWeights nv = ref::make_random_layer(scaled(find_preset("qwen3-30b-a3b"), 256, 128, 8, Precision::nvfp4), 5);
  nv.w2.block_scale[3] = 0x7F;  // E4M3 NaN; w2 rows hold I / 16 = 8 scales
  test::expect_error([&] { cli::make_gpu_layer(nv, nullptr); },
                     "w2_scale holds the NaN block scale code 0x7f at row 0, column block 3");
  nv.w2.block_scale[3] = 0xB8;  // -1.0
  test::expect_error([&] { cli::make_gpu_layer(nv, nullptr); },
                     "w2_scale holds a negative block scale code 0xb8 at row 0, column block 3");
  ref::LayerWeights mx = ref::make_random_layer(scaled(find_preset("gpt-oss-120b"), 256, 128, 8, Precision::mxfp4), 5);
  mx.w13.block_scale[9] = 0xFF;  // w13 rows hold H / 32 = 8 scales
  test::expect_error([&] { cli::make_gpu_layer(mx, nullptr); },
                     "w13_scale holds the NaN scale code 0xff at row 1, column block 1");
}

// Rows the caller quantized (MoeForwardArgs::x_fp8, e.g. rmsnorm_quant's output or rows that came
// over the wire) in place of the layer's own quantization of x: the host quantizer matches
// route_quant bit for bit, so y is the same bits (deterministic mode), with and without x beside
// them; then the refusals.
TEST(LayerGpu, PreQuantizedFp8RowsGiveTheSameBits) {
  FMOE_SKIP_WITHOUT_GPU();
  const MoeConfig cfgs[] = {
      scaled(find_preset("deepseek-v3"), 272, 128, 16, Precision::fp8_block),  // a partial scale block
      scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::fp8_block),  // gated shared expert
      scaled(find_preset("qwen3-30b-a3b"), 256, 128, 16, Precision::fp8_block),
  };
  for (const MoeConfig& cfg : cfgs)
    for (int T : {1, 40, 300}) {
      const int H = cfg.hidden, k = cfg.top_k, KB = (H + 127) / 128;
      LayerCase c = make_case(cfg, T, ReductionMode::deterministic, LayerRoute::given);
      const LayerData d = make_layer_data(c, hash_ints({T, H, 41}));
      const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
      std::vector<uint8_t> q(size_t(T) * H);
      std::vector<float> sc(size_t(T) * KB);
      fmt::quantize_fp8_per_token_128(d.x.data(), T, H, q.data(), sc.data());
      DeviceBuffer x = DeviceBuffer::from(d.x_bits), ids = DeviceBuffer::from(d.given.ids),
                   w = DeviceBuffer::from(d.given.weights), xq = DeviceBuffer::from(q),
                   xs = DeviceBuffer::from(sc), y(size_t(T) * H * 2),
                   ws(g.layer->workspace_size(T, ReductionMode::deterministic));
      MoeForwardArgs a;
      a.x = TensorRef::contiguous(x.get(), DType::bf16, {T, H}, Device::cuda);
      a.routing_given = true;
      a.topk_ids = TensorRef::contiguous(ids.get(), DType::i32, {T, k}, Device::cuda);
      a.topk_weights = TensorRef::contiguous(w.get(), DType::f32, {T, k}, Device::cuda);
      a.y = TensorRef::contiguous(y.get(), DType::bf16, {T, H}, Device::cuda);
      a.mode = ReductionMode::deterministic;
      auto forward = [&](const MoeForwardArgs& args) {
        y.fill(0xFF);
        ws.fill(0xFF);
        g.layer->forward(args, ws.get(), ws.bytes(), nullptr);
        FMOE_CUDA(cudaDeviceSynchronize());
        return y.to_host<uint16_t>();
      };
      const std::vector<uint16_t> want = forward(a);
      MoeForwardArgs p = a;
      p.x_fp8 = TensorRef::contiguous(xq.get(), DType::e4m3, {T, H}, Device::cuda);
      p.x_fp8_scales = TensorRef::contiguous(xs.get(), DType::f32, {T, KB}, Device::cuda);
      const std::string ctx = c.describe();
      auto differing = [&](const std::vector<uint16_t>& got) {
        size_t n = 0;
        for (size_t i = 0; i < want.size(); ++i) n += got[i] != want[i];
        return n;
      };
      EXPECT_EQ(differing(forward(p)), 0u) << ctx << " x_fp8 with x: elements that differ";
      if (!cfg.shared_expert_gate) {
        MoeForwardArgs nx = p;
        nx.x = {};
        EXPECT_EQ(differing(forward(nx)), 0u) << ctx << " x_fp8 without x: elements that differ";
      } else {
        MoeForwardArgs nx = p;
        nx.x = {};
        expect_error([&] { forward(nx); }, "reads x: give x too");
      }
      MoeForwardArgs bad = p;
      bad.x_fp8_scales.shape[1] += 1;
      expect_error([&] { forward(bad); }, "x_fp8_scales");
      bad = a;
      bad.x_fp8_scales = p.x_fp8_scales;
      expect_error([&] { forward(bad); }, "x_fp8_scales was given without x_fp8");
      if (testing::Test::HasFailure()) return;
    }
  // A bf16 layer quantizes nothing; Llama 4's rows are bf16(x * w).
  for (const MoeConfig& cfg : {scaled(find_preset("qwen3-30b-a3b"), 256, 128, 16, Precision::bf16),
                               scaled(find_preset("llama4-maverick"), 256, 128, 16, Precision::fp8_block)}) {
    const int T = 4, H = cfg.hidden, KB = (H + 127) / 128;
    LayerCase c = make_case(cfg, T, ReductionMode::deterministic, LayerRoute::given);
    const LayerData d = make_layer_data(c, 3);
    const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
    DeviceBuffer x = DeviceBuffer::from(d.x_bits), ids = DeviceBuffer::from(d.given.ids),
                 w = DeviceBuffer::from(d.given.weights), xq(size_t(T) * H), xs(size_t(T) * KB * 4),
                 y(size_t(T) * H * 2), ws(g.layer->workspace_size(T, ReductionMode::deterministic));
    MoeForwardArgs a;
    a.x = TensorRef::contiguous(x.get(), DType::bf16, {T, H}, Device::cuda);
    a.routing_given = true;
    a.topk_ids = TensorRef::contiguous(ids.get(), DType::i32, {T, cfg.top_k}, Device::cuda);
    a.topk_weights = TensorRef::contiguous(w.get(), DType::f32, {T, cfg.top_k}, Device::cuda);
    a.y = TensorRef::contiguous(y.get(), DType::bf16, {T, H}, Device::cuda);
    a.x_fp8 = TensorRef::contiguous(xq.get(), DType::e4m3, {T, H}, Device::cuda);
    a.x_fp8_scales = TensorRef::contiguous(xs.get(), DType::f32, {T, KB}, Device::cuda);
    expect_error([&] { g.layer->forward(a, ws.get(), ws.bytes(), nullptr); },
                 cfg.weight_precision == Precision::bf16 ? "activations are bf16" : "the weight goes on the input");
  }
}

TEST(LayerGpu, SanitizerSmall) {
  // For compute-sanitizer (scripts/gpu_check.sh): H=2880 gives GEMM 1 23 k-blocks (every k-stage
  // ring wraps), forced BLOCK_T=128 with ~150 routes per expert gives several token tiles per
  // expert, with one and two weight waves; fp8 and bf16, both modes; T=4 runs the fused schedule.
  FMOE_SKIP_WITHOUT_GPU();
  {
    // NVFP4: 45 k-blocks of GEMM 1 wrap the 16-stage ring; BLOCK_T=128 with two waves. T=4 through
    // the decode GEMVs and through the engine.
    const MoeConfig wide = scaled(find_preset("gpt-oss-120b"), 2880, 128, 4, Precision::nvfp4);
    for (int max_t : {8, 0}) {
      detail::ScopedKnob<int> gemv(&detail::Knobs::gemv_max_t, max_t);
      for (ReductionMode m : kModes) run_case(make_case(wide, 4, m), 1, false);
    }
    {  // the GEMVs with K split in 1 and 4 parts inside the CTA (the default takes 2)
      detail::ScopedKnob<int> gemv(&detail::Knobs::gemv_max_t, 8);
      for (int split : {1, 4}) {
        detail::ScopedKnob<int> knob(&detail::Knobs::gemv_split, split);
        run_case(make_case(wide, 4, ReductionMode::fast), 1, false);
      }
    }
    // BLOCK_T=128 e2m1 tiles forced at a qwen shape; the down GEMM with one wave and with two (the
    // rule's choice at N >= 2048 since session 47), in both modes.
    for (const char* name : {"up_e2m1_bt128_w2_s6", "down_e2m1_bt128_s8", "down_e2m1_bt128_w2_s6"}) {
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, name);
      const MoeConfig qwen = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 8, Precision::nvfp4);
      for (ReductionMode m : kModes) run_case(make_case(qwen, 150, m), 1, false);
    }
    // Two k-blocks per stage (kblocks 2): 45 k-blocks of GEMM 1 (its last stage holds one), the
    // engine at T=4 and split K at T=1 (parts of 8 k-blocks), each GEMM's config forced.
    for (const char* name : {"up_e2m1_bt16_c2_k2_s4", "down_e2m1_bt16_c2_k2_s4"}) {
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, name);
      detail::ScopedKnob<int> gemv(&detail::Knobs::gemv_max_t, 0);
      run_case(make_case(wide, 4, ReductionMode::fast), 1, false);
      const MoeConfig split = scaled(find_preset("deepseek-v3"), 1024, 128, 16, Precision::nvfp4);
      detail::ScopedKnob<bool> on(&detail::Knobs::split_k, true);
      run_case(make_case(split, 1, ReductionMode::deterministic), 1, false);
    }
    {  // A lean producer (one warp fills the down GEMM's k-stages), the engine at T=4 and 150.
      detail::ScopedKnob<int> lean(&detail::Knobs::lean_producer, 1);
      detail::ScopedKnob<int> gemv(&detail::Knobs::gemv_max_t, 0);
      run_case(make_case(wide, 4, ReductionMode::fast), 1, false);
      const MoeConfig qwen = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 8, Precision::nvfp4);
      run_case(make_case(qwen, 150, ReductionMode::deterministic), 1, false);
    }
    // MXFP4: the same engine with UE8M0 scales re-laid per row.
    const MoeConfig mx = scaled(find_preset("gpt-oss-120b"), 2880, 128, 4, Precision::mxfp4);
    run_case(make_case(mx, 4, ReductionMode::fast), 1, false);
    // Split K of the e2m1 gate/up at T=1 (parts of 8 k-blocks with the knob; both modes).
    const MoeConfig split = scaled(find_preset("deepseek-v3"), 1024, 128, 16, Precision::nvfp4);
    detail::ScopedKnob<bool> on(&detail::Knobs::split_k, true);
    for (ReductionMode m : kModes) run_case(make_case(split, 1, m), 1, false);
  }
  {
    // Fast mode's bf16 route rows: the tokens_m and weights_m down GEMMs' bf16 stores, finalize's
    // bf16 loads.
    detail::ScopedKnob<int> rows16(&detail::Knobs::rows16_min_t, 1);
    // (The 3-stage twin writes them in slot order: TMA stores of the full tiles.)
    for (const char* name : {"down_fp8_bt128_w2_tm_s4", "down_fp8_bt128_s6", "down_fp8_bt128_w2_tm_h128_s4",
                             "down_fp8_bt128_w2_tm_h128_s3"}) {
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, name);
      const MoeConfig qwen = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 8, Precision::fp8_block);
      run_case(make_case(qwen, 150, ReductionMode::fast), 1, false);
    }
  }
  {
    // The tokens-as-M down epilogue with the expert's bias and a partial wave (H = 400: 16 of the
    // last wave's 128 outputs in range), as bf16 route rows (by route, and in slot order from
    // the 3-stage twin) and as fp32 atomics.
    MoeConfig biased = scaled(find_preset("qwen3-30b-a3b"), 400, 256, 8, Precision::fp8_block);
    biased.expert_bias = true;
    biased.validate();
    for (const char* name : {"down_fp8_bt128_w2_tm_h128_s4", "down_fp8_bt128_w2_tm_h128_s3"}) {
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, name);
      for (int min_t : {1, 0}) {
        detail::ScopedKnob<int> rows16(&detail::Knobs::rows16_min_t, min_t);
        run_case(make_case(biased, 150, ReductionMode::fast), 1, false);
      }
    }
  }
  for (Precision p : {Precision::fp8_block, Precision::bf16}) {
    const MoeConfig wide = scaled(find_preset("gpt-oss-120b"), 2880, 128, 4, p);
    for (ReductionMode m : kModes) run_case(make_case(wide, 4, m), 1, false);
    const MoeConfig split = scaled(find_preset("deepseek-v3"), 1024, 128, 16, p);  // split K at T=1
    {
      detail::ScopedKnob<bool> on(&detail::Knobs::split_k, true);
      run_case(make_case(split, 1, ReductionMode::fast), 1, false);
    }
    // BLOCK_T=128 with one wave (up; down takes two), two waves (both), one-wave down.
    const bool bf = p == Precision::bf16;
    // fp8 also with tokens as wgmma's M side (one and two waves).
    for (const char* name : {bf ? "up_bf16_bt128_s5" : "up_fp8_bt128_s5",
                             bf ? "up_bf16_bt128_w2_s3" : "up_fp8_bt128_w2_s4",
                             bf ? "down_bf16_bt128_s6" : "down_fp8_bt128_s6",
                             bf ? "" : "up_fp8_bt128_tm_s5", bf ? "" : "up_fp8_bt128_w2_tm_s4",
                             bf ? "" : "down_fp8_bt128_tm_s6", bf ? "" : "down_fp8_bt128_w2_tm_s4",
                             // the intermediate with one scale per 128 (also forced in deterministic mode)
                             bf ? "" : "down_fp8_bt128_tm_h128_s6", bf ? "" : "down_fp8_bt128_w2_tm_h128_s4"}) {
      if (*name == '\0') continue;
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, name);
      const MoeConfig qwen = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 8, p);
      for (ReductionMode m : kModes) run_case(make_case(qwen, 150, m), 1, false);
    }
  }
}
