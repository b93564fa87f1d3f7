// The grouped GEMM's config table and token-tile choice, without a GPU (pure host code).
#include <set>
#include <string>

#include "common/env.hpp"
#include "gemm/gemm_config.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;
using namespace fusedmoe::detail;

namespace {
const GemmFamily kProjection{GemmWeights::fp8_block, GemmRows::gathered, GemmEpilogue::combine};
const GemmFamily kUpFp8{GemmWeights::fp8_block, GemmRows::gathered, GemmEpilogue::swiglu};
const GemmFamily kDownFp8{GemmWeights::fp8_block, GemmRows::tma, GemmEpilogue::combine};
const GemmFamily kDownFp8S128{GemmWeights::fp8_block, GemmRows::tma_s128, GemmEpilogue::combine};
const GemmFamily kUpBf16{GemmWeights::bf16, GemmRows::gathered, GemmEpilogue::swiglu};
const GemmFamily kDownBf16{GemmWeights::bf16, GemmRows::tma, GemmEpilogue::combine};
const GemmFamily kUpE2m1{GemmWeights::e2m1, GemmRows::gathered, GemmEpilogue::swiglu};
const GemmFamily kDownE2m1{GemmWeights::e2m1, GemmRows::tma, GemmEpilogue::combine};
}  // namespace

TEST(GemmConfig, TileWidthFollowsRowsPerExpert) {
  auto bt = [](int T, int k, int E) {
    std::string why;
    const int w = select_block_t(T, k, E, "", {kProjection}, &why);
    EXPECT_FALSE(why.empty());
    return w;
  };
  EXPECT_EQ(bt(1, 8, 256), 16);
  EXPECT_EQ(bt(128, 8, 256), 16);    // Qwen3.5 decode: 4 rows per expert
  EXPECT_EQ(bt(512, 8, 256), 32);    // 16 rows
  EXPECT_EQ(bt(1024, 8, 256), 64);   // 32 rows
  EXPECT_EQ(bt(4096, 8, 256), 128);  // 128 rows
  EXPECT_EQ(bt(16384, 8, 128), 128);
  // NVFP4 weights keep BLOCK_T=16 up to 8 rows per expert (measured: the two-CTA tiles' stages).
  auto bt4 = [](int T, int k, int E) { return select_block_t(T, k, E, "", {kUpE2m1, kDownE2m1}, nullptr); };
  EXPECT_EQ(bt(128, 8, 128), 32);   // Qwen3-30B-A3B fp8: 8 rows
  EXPECT_EQ(bt4(128, 8, 128), 16);  // NVFP4: 8 rows
  EXPECT_EQ(bt4(160, 8, 128), 32);  // 10 rows
  EXPECT_EQ(bt4(1024, 8, 256), 64);
}

TEST(GemmConfig, StaticTileNumberingOnlyForSmallExperts) {
  const double MB = 1 << 20;
  std::string why;
  // qwen3-30b-a3b fp8 T=512 (32 rows, BLOCK_T=128, 3 MB of gate/up an expert): static.
  EXPECT_TRUE(static_tile_numbering(1.0, 32, 128, 2.0 * 768 * 2048, &why));
  EXPECT_NE(why.find("numbered statically"), std::string::npos) << why;
  // deepseek-v3 fp8 T=2048 (64 rows, 29 MB an expert): from the routing, and says why.
  why.clear();
  EXPECT_FALSE(static_tile_numbering(1.0, 64, 128, 2.0 * 2048 * 7168, &why));
  EXPECT_NE(why.find(">= 13 MiB"), std::string::npos) << why;
  // qwen3-235b-a22b fp8 (12.6 MB): static; deepseek-v3 nvfp4 (14.7 MB): from the routing.
  EXPECT_TRUE(static_tile_numbering(1.0, 32, 128, 2.0 * 1536 * 4096, nullptr));
  EXPECT_FALSE(static_tile_numbering(1.0, 32, 128, 2.0 * 2048 * 7168 * 0.5, nullptr));
  // The boundary: under 13 MiB, at most half a token tile, more than 90% of the experts hit.
  EXPECT_TRUE(static_tile_numbering(0.91, 64, 128, 13 * MB - 1, nullptr));
  EXPECT_FALSE(static_tile_numbering(0.91, 64, 128, 13 * MB, nullptr));
  EXPECT_FALSE(static_tile_numbering(0.91, 64.5, 128, MB, nullptr));
  EXPECT_FALSE(static_tile_numbering(0.9, 8, 128, MB, nullptr));
  // Where the rows rule it out, no reason is given (another rule decided).
  why.clear();
  EXPECT_FALSE(static_tile_numbering(1.0, 40, 64, MB, &why));
  EXPECT_TRUE(why.empty()) << why;
}

TEST(GemmConfig, Fp8LayerTakesWideTilesWhereMeasuredFaster) {
  std::string why;
  // deepseek-v3 (H 7168, 32 / 56 weight tiles): from 16 rows per expert.
  EXPECT_TRUE(layer_wide_tiles(GemmWeights::fp8_block, 16, 7168, 32, 56, &why));
  EXPECT_NE(why.find("H >= 4096"), std::string::npos) << why;
  EXPECT_TRUE(layer_wide_tiles(GemmWeights::fp8_block, 32, 7168, 32, 56, nullptr));
  // ... and from 4 rows (session 44), not at 2.
  why.clear();
  EXPECT_TRUE(layer_wide_tiles(GemmWeights::fp8_block, 15.9, 7168, 32, 56, nullptr));
  EXPECT_TRUE(layer_wide_tiles(GemmWeights::fp8_block, 4, 7168, 32, 56, &why));
  EXPECT_NE(why.find("H >= 7168"), std::string::npos) << why;
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 3.9, 7168, 32, 56, nullptr));
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 2, 7168, 32, 56, nullptr));
  // qwen3-235b-a22b (H 4096): from 16 rows.
  EXPECT_TRUE(layer_wide_tiles(GemmWeights::fp8_block, 16, 4096, 24, 32, nullptr));
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 15.9, 4096, 24, 32, nullptr));
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 4, 4096, 24, 32, nullptr));
  // qwen3.5-35b-a3b / qwen3-30b-a3b (H 2048): from 32 rows.
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 16, 2048, 8, 16, nullptr));
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 31, 2048, 12, 16, nullptr));
  why.clear();
  EXPECT_TRUE(layer_wide_tiles(GemmWeights::fp8_block, 32, 2048, 12, 16, &why));
  EXPECT_NE(why.find(">= 32 rows"), std::string::npos) << why;
  // gpt-oss-120b (45 / 23 weight tiles: no two-wave tiles): never.
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 32, 2880, 45, 23, nullptr));
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::fp8_block, 39, 2880, 46, 23, nullptr));
}

TEST(GemmConfig, FourBitLayerTakesWideTilesWhereMeasuredFaster) {
  constexpr GemmWeights w = GemmWeights::e2m1;
  std::string why;
  // deepseek-v3 (H 7168, 32 / 56 weight tiles): from 10 rows per expert (session 48: at 8 rows
  // the wide tiles lost 10-12% under even loads; from 10 they break even there and gain skewed).
  EXPECT_TRUE(layer_wide_tiles(w, 10, 7168, 32, 56, &why));
  EXPECT_NE(why.find("4-bit layer"), std::string::npos) << why;
  EXPECT_NE(why.find("H >= 7168"), std::string::npos) << why;
  for (double rows : {16.0, 32.0}) EXPECT_TRUE(layer_wide_tiles(w, rows, 7168, 32, 56, nullptr)) << rows;
  for (double rows : {4.0, 5.0, 8.0, 9.9}) EXPECT_FALSE(layer_wide_tiles(w, rows, 7168, 32, 56, nullptr)) << rows;
  // qwen3-235b-a22b (H 4096, 24 / 32 tiles): from 32 rows; at 16-24 the narrower tiles.
  why.clear();
  EXPECT_TRUE(layer_wide_tiles(w, 32, 4096, 24, 32, &why));
  EXPECT_NE(why.find(">= 32 rows"), std::string::npos) << why;
  EXPECT_FALSE(layer_wide_tiles(w, 24, 4096, 24, 32, nullptr));
  EXPECT_FALSE(layer_wide_tiles(w, 16, 4096, 24, 32, nullptr));
  // qwen3-30b-a3b / qwen3.5-35b-a3b (H 2048): BLOCK_T=64 measured as fast at 32 rows, the wide
  // tiles 1.01-1.04x faster from 34.
  EXPECT_FALSE(layer_wide_tiles(w, 32, 2048, 12, 16, nullptr));
  why.clear();
  EXPECT_TRUE(layer_wide_tiles(w, 34, 2048, 12, 16, &why));
  EXPECT_NE(why.find("> 32 rows"), std::string::npos) << why;
  EXPECT_TRUE(layer_wide_tiles(w, 39, 2048, 12, 16, nullptr));
  // gpt-oss-120b (odd weight tiles: no two-wave tiles) and bf16 weights: never; no reason given.
  why.clear();
  EXPECT_FALSE(layer_wide_tiles(w, 32, 2880, 46, 23, &why));
  EXPECT_FALSE(layer_wide_tiles(GemmWeights::bf16, 32, 7168, 32, 56, &why));
  EXPECT_TRUE(why.empty()) << why;
}

TEST(GemmConfig, FourBitLayerKeepsThirtyTwoWhereMeasuredFaster) {
  constexpr GemmWeights w = GemmWeights::e2m1;
  std::string why;
  // 24 rows (qwen3-235b-a22b, qwen3-30b-a3b, qwen3.5-35b-a3b): BLOCK_T=32 measured 1.13-1.19x
  // faster than 64.
  EXPECT_TRUE(layer_narrow_tiles(w, 24, &why));
  EXPECT_NE(why.find("BLOCK_T=32"), std::string::npos) << why;
  for (double rows : {16.1, 31.9}) EXPECT_TRUE(layer_narrow_tiles(w, rows, nullptr)) << rows;
  // Outside 17-31 rows (select_block_t's 32 below, the wide rule or 64 from 32) and for FP8 /
  // BF16 weights: no, and no reason.
  why.clear();
  for (double rows : {16.0, 32.0, 40.0}) EXPECT_FALSE(layer_narrow_tiles(w, rows, &why)) << rows;
  EXPECT_FALSE(layer_narrow_tiles(GemmWeights::fp8_block, 24, &why));
  EXPECT_FALSE(layer_narrow_tiles(GemmWeights::bf16, 24, &why));
  EXPECT_TRUE(why.empty()) << why;
}

TEST(GemmConfig, EveryFamilyHasEveryWidthAndNamesAreUnique) {
  std::set<std::string> names;
  for (int i = 0; i < int(GemmConfigId::count); ++i) {
    const GemmConfigInfo c = gemm_config_info(GemmConfigId(i));
    EXPECT_TRUE(names.insert(c.name).second) << c.name;
    EXPECT_EQ(gemm_config_by_name(c.name), GemmConfigId(i));
    EXPECT_GE(c.stages, 3) << c.name;
  }
  EXPECT_EQ(gemm_config_by_name("no_such_config"), GemmConfigId::count);
  for (const GemmFamily& f : {kProjection, kUpFp8, kDownFp8, kUpBf16, kDownBf16})
    for (int bt : {16, 32, 64, 128}) {
      const GemmConfigInfo c = gemm_config_info(gemm_config_of(f.weights, f.rows, f.epilogue, bt));
      EXPECT_EQ(c.block_t, bt);
      EXPECT_EQ(c.weights, f.weights);
      EXPECT_EQ(c.rows, f.rows);
      EXPECT_EQ(c.epilogue, f.epilogue);
    }
  test::expect_error([] { gemm_config_of(GemmWeights::bf16, GemmRows::gathered, GemmEpilogue::combine, 16); },
                     "no compiled bf16 projection (gathered rows, combine) config with BLOCK_T=16");
}

TEST(GemmConfig, WavesDoubleTheWeightTileWhereMeasuredFaster) {
  for (const GemmFamily& f : {kProjection, kUpFp8, kDownFp8, kUpBf16, kDownBf16}) {
    std::string why;
    // deepseek-v3's down (N=7168: 56 tiles, K=2048) and gate/up: two waves at BLOCK_T=128.
    EXPECT_EQ(select_waves(f, 128, 56, 2048, "", &why), 2);
    EXPECT_NE(why.find("256 weight rows"), std::string::npos) << why;
    EXPECT_EQ(select_waves(f, 128, 23, 7168, "", nullptr), 1);  // gpt-oss down: 2880 -> 23 tiles
    EXPECT_EQ(select_waves(f, 64, 56, 7168, "", nullptr), 1);
    EXPECT_EQ(select_waves(f, 16, 32, 7168, "", nullptr), 1);
    // Every family has a two-wave config at BLOCK_T=128 and a one-wave one at every width.
    const GemmConfigInfo c = gemm_config_info(gemm_config_of(f.weights, f.rows, f.epilogue, 128, 2));
    EXPECT_EQ(c.waves, 2);
    EXPECT_EQ(c.block_t, 128);
  }
  // The combine epilogue is not overlapped: short K or few weight tiles keep one wave (the
  // projection at K=768; N=512), the gate/up GEMM takes two there, and so does the fp8 down GEMM
  // (tokens as M, measured faster with two waves at K = 512 and 768).
  for (const GemmFamily& f : {kProjection, kDownBf16}) EXPECT_EQ(select_waves(f, 128, 4, 2048, "", nullptr), 1);
  EXPECT_EQ(select_waves(kProjection, 128, 16, 768, "", nullptr), 1);
  // ... but the bf16 and e2m1 down GEMMs take two at N >= 2048 (sessions 46 / 47: measured faster
  // at K = 512, 768).
  for (const GemmFamily& f : {kDownBf16, kDownE2m1}) {
    for (int K : {512, 768}) {
      std::string why;
      EXPECT_EQ(select_waves(f, 128, 16, K, "", &why), 2) << K;
      EXPECT_NE(why.find("bf16 / e2m1 down GEMM with N >= 2048"), std::string::npos) << why;
    }
    EXPECT_EQ(select_waves(f, 128, 15, 768, "", nullptr), 1);  // odd weight tiles
    EXPECT_EQ(select_waves(f, 64, 16, 768, "", nullptr), 1);
    EXPECT_EQ(select_waves(f, 128, 4, 768, "", nullptr), 1);   // N = 512
  }
  for (const GemmFamily& f : {kDownFp8, kDownFp8S128}) {
    EXPECT_EQ(select_waves(f, 128, 16, 768, "", nullptr), 2);
    EXPECT_EQ(select_waves(f, 128, 4, 512, "", nullptr), 2);
  }
  for (const GemmFamily& f : {kUpFp8, kUpBf16}) {
    EXPECT_EQ(select_waves(f, 128, 12, 2048, "", nullptr), 2);
    EXPECT_EQ(select_waves(f, 128, 4, 512, "", nullptr), 2);
  }
  // A forced config decides for its own family, and must fit the weight tiles.
  EXPECT_EQ(select_waves(kDownFp8, 128, 56, 2048, "down_fp8_bt128_s6", nullptr), 1);
  EXPECT_EQ(select_waves(kDownFp8, 128, 16, 768, "down_fp8_bt128_w2_s4", nullptr), 2);
  EXPECT_EQ(select_waves(kUpFp8, 128, 32, 7168, "down_fp8_bt128_s6", nullptr), 2);  // not its family
  test::expect_error([] { select_waves(kDownFp8, 128, 23, 2880, "down_fp8_bt128_w2_s4", nullptr); },
                     "has 23 128-row weight tiles per expert, not a multiple of 2");
}

TEST(GemmConfig, DownGemmWithIntermediateScalesPer128) {
  // One fp8 scale per 128 intermediate columns (the layer's fast mode after a two-wave tokens-as-M
  // gate/up): the down GEMM takes tokens as M and two waves at every K, as measured.
  std::string why;
  for (int K : {512, 768, 2048}) {
    why.clear();
    EXPECT_EQ(select_operands(kDownFp8S128, 128, K, true, "", &why), GemmOperands::tokens_m) << K;
    EXPECT_NE(why.find("one promotion per k-stage"), std::string::npos) << why;
    EXPECT_EQ(select_waves(kDownFp8S128, 128, 16, K, "", nullptr), 2) << K;
  }
  EXPECT_EQ(select_waves(kDownFp8S128, 128, 23, 2048, "", nullptr), 1);  // odd weight tiles
  // Both compiled configs read one scale per 128; forcing one decides its family's choices.
  for (int waves : {1, 2}) {
    const GemmConfigInfo c = gemm_config_info(gemm_config_of(GemmWeights::fp8_block, GemmRows::tma_s128,
                                                             GemmEpilogue::combine, 128, waves,
                                                             GemmOperands::tokens_m));
    EXPECT_EQ(c.rows, GemmRows::tma_s128);
    EXPECT_EQ(c.waves, waves);
  }
  EXPECT_EQ(select_waves(kDownFp8S128, 128, 16, 768, "down_fp8_bt128_tm_h128_s6", nullptr), 1);
  EXPECT_EQ(select_waves(kDownFp8, 128, 16, 768, "down_fp8_bt128_tm_h128_s6", nullptr), 2);  // other family: the default
  // No narrower token tile reads the intermediate per 128.
  test::expect_error([] { gemm_config_of(GemmWeights::fp8_block, GemmRows::tma_s128, GemmEpilogue::combine, 64); },
                     "no compiled fp8 down (tma rows with one scale per 128, combine) config with BLOCK_T=64");
  // The two-wave one has a 3-stage twin that stages fast mode's bf16 rows (slot order, TMA stores);
  // gemm_config_of gives the 4-stage one, the twin is found from either.
  const GemmConfigId s4 = gemm_config_by_name("down_fp8_bt128_w2_tm_h128_s4");
  const GemmConfigId s3 = gemm_config_by_name("down_fp8_bt128_w2_tm_h128_s3");
  ASSERT_NE(s4, GemmConfigId::count);
  ASSERT_NE(s3, GemmConfigId::count);
  EXPECT_EQ(gemm_config_of(GemmWeights::fp8_block, GemmRows::tma_s128, GemmEpilogue::combine, 128, 2,
                           GemmOperands::tokens_m), s4);
  EXPECT_FALSE(gemm_config_staged_rows(s4));
  EXPECT_TRUE(gemm_config_staged_rows(s3));
  EXPECT_TRUE(gemm_configs_same_tile(s4, s3));
  EXPECT_FALSE(gemm_configs_same_tile(s4, gemm_config_by_name("down_fp8_bt128_tm_h128_s6")));  // one wave
  EXPECT_FALSE(gemm_configs_same_tile(s4, gemm_config_by_name("down_fp8_bt128_w2_tm_s4")));  // scales per 64
  EXPECT_EQ(gemm_config_staged_twin(s4), s3);
  EXPECT_EQ(gemm_config_staged_twin(s3), s3);
  EXPECT_EQ(gemm_config_staged_twin(gemm_config_by_name("down_fp8_bt128_tm_h128_s6")), GemmConfigId::count);
  EXPECT_EQ(gemm_config_staged_twin(gemm_config_by_name("down_fp8_bt128_w2_tm_s4")), GemmConfigId::count);
  // Two 64-K blocks per stage: a twin of the one-block tile (a forced one is taken as named), never
  // the automatic choice.
  const GemmConfigId k2 = gemm_config_by_name("up_e2m1_bt16_c2_k2_s4");
  ASSERT_NE(k2, GemmConfigId::count);
  EXPECT_TRUE(gemm_configs_same_tile(k2, gemm_config_by_name("up_e2m1_bt16_c2_s8")));
  EXPECT_FALSE(gemm_configs_same_tile(k2, gemm_config_by_name("up_e2m1_bt32_c2_k2_s3")));
  EXPECT_EQ(gemm_config_of(GemmWeights::e2m1, GemmRows::gathered, GemmEpilogue::swiglu, 16, 1,
                           GemmOperands::weights_m, 2), gemm_config_by_name("up_e2m1_bt16_c2_s8"));
}

TEST(GemmConfig, FourBitDecodeTilesTakeTwoBlockStagesAndALeanProducer) {
  // The layer's rules (measured faster on H200, session 49): 4-bit tiles of 16 and 32 tokens take
  // their two-block twins; wider ones, fp8 and bf16 keep one block per stage.
  std::string why;
  for (const char* n : {"up_e2m1_bt16_c2_s8", "down_e2m1_bt16_c2_s8", "up_e2m1_bt32_c2_s6", "down_e2m1_bt32_c2_s6"}) {
    const GemmConfigId id = gemm_config_by_name(n);
    ASSERT_NE(id, GemmConfigId::count) << n;
    const GemmConfigId t = layer_two_block_stages(id, &why);
    EXPECT_EQ(gemm_config_info(t).kblocks, 2) << n;
    EXPECT_TRUE(gemm_configs_same_tile(t, id)) << n;
  }
  EXPECT_NE(why.find("two 64-K blocks"), std::string::npos);
  int kept = 0;
  for (int i = 0; i < int(GemmConfigId::count); ++i) {
    const GemmConfigInfo c = gemm_config_info(GemmConfigId(i));
    if (c.kblocks == 2 || (c.weights == GemmWeights::e2m1 && c.block_t <= 32)) continue;
    std::string none;
    EXPECT_EQ(layer_two_block_stages(GemmConfigId(i), &none), GemmConfigId(i)) << c.name;
    EXPECT_TRUE(none.empty()) << c.name;
    ++kept;
  }
  EXPECT_GT(kept, 10);
  EXPECT_TRUE(layer_lean_producer(GemmWeights::e2m1, 16, -1));
  EXPECT_TRUE(layer_lean_producer(GemmWeights::e2m1, 32, -1));
  EXPECT_FALSE(layer_lean_producer(GemmWeights::e2m1, 64, -1));
  EXPECT_FALSE(layer_lean_producer(GemmWeights::bf16, 16, -1));
  EXPECT_FALSE(layer_lean_producer(GemmWeights::fp8_block, 16, -1));
  EXPECT_FALSE(layer_lean_producer(GemmWeights::e2m1, 16, 0));   // FMOE_LEAN_PRODUCER=0
  EXPECT_TRUE(layer_lean_producer(GemmWeights::bf16, 128, 1));   // FMOE_LEAN_PRODUCER=1
  // select_block_t takes a forced config of either down family.
  EXPECT_EQ(select_block_t(8192, 8, 128, "down_fp8_bt128_w2_tm_h128_s4",
                           {{GemmWeights::fp8_block, GemmRows::gathered, GemmEpilogue::swiglu}, kDownFp8,
                            kDownFp8S128}, nullptr), 128);
}

TEST(GemmConfig, TokensTakeTheMSideOfTheFp8GateUpGemmAtPrefill) {
  std::string why;
  EXPECT_EQ(select_operands(kUpFp8, 128, 2048, true, "", &why), GemmOperands::tokens_m);
  EXPECT_NE(why.find("tokens as wgmma's M side"), std::string::npos) << why;
  // The projection takes tokens as M from K = 2048 (qwen3.5's hidden size), where it measured
  // faster, and keeps weights as M below; the layer's fp8 down GEMM takes tokens as M at every K
  // (qwen's I = 512, 768 remeasured in step 5); forcing one decides.
  why.clear();
  EXPECT_EQ(select_operands(kProjection, 128, 2048, true, "", &why), GemmOperands::tokens_m);
  EXPECT_NE(why.find("K >= 2048"), std::string::npos) << why;
  for (int K : {512, 768, 2047})
    EXPECT_EQ(select_operands(kProjection, 128, K, true, "", nullptr), GemmOperands::weights_m) << K;
  for (int K : {512, 768, 2048, 7168}) {
    EXPECT_EQ(select_operands(kProjection, 128, K, true, "", nullptr),
              K >= 2048 ? GemmOperands::tokens_m : GemmOperands::weights_m) << K;
    why.clear();
    EXPECT_EQ(select_operands(kDownFp8, 128, K, true, "", &why), GemmOperands::tokens_m) << K;
    EXPECT_NE(why.find("the layer's down GEMM"), std::string::npos) << why;
  }
  EXPECT_EQ(select_operands(kProjection, 128, 2048, true, "proj_fp8_bt128_s6", nullptr), GemmOperands::weights_m);
  EXPECT_EQ(select_operands(kDownFp8, 128, 2048, true, "down_fp8_bt128_tm_s6", nullptr), GemmOperands::tokens_m);
  EXPECT_EQ(select_operands(kProjection, 128, 2048, true, "proj_fp8_bt128_tm_s6", nullptr), GemmOperands::tokens_m);
  // Narrower token tiles, gate/up weights whose halves have several scales and bf16 keep
  // weights as M.
  for (const GemmFamily& f : {kProjection, kUpFp8, kDownFp8})
    EXPECT_EQ(select_operands(f, 64, 2048, true, "", nullptr), GemmOperands::weights_m);
  EXPECT_EQ(select_operands(kUpFp8, 128, 2048, false, "", nullptr), GemmOperands::weights_m);
  for (const GemmFamily& f : {kUpBf16, kDownBf16})
    EXPECT_EQ(select_operands(f, 128, 2048, true, "", nullptr), GemmOperands::weights_m);
  // Both wave counts are compiled with tokens as M for both layer GEMMs, one for the projection.
  for (const GemmFamily& f : {kUpFp8, kDownFp8, kProjection})
    for (int waves : {1, 2}) {
      if (f.rows == GemmRows::gathered && f.epilogue == GemmEpilogue::combine && waves == 2) continue;
      const GemmConfigInfo c = gemm_config_info(
          gemm_config_of(f.weights, f.rows, f.epilogue, 128, waves, GemmOperands::tokens_m));
      EXPECT_EQ(c.operands, GemmOperands::tokens_m);
      EXPECT_EQ(c.waves, waves);
    }
  // A forced config decides for its family; tokens as M need the two scales.
  EXPECT_EQ(select_operands(kUpFp8, 128, 2048, true, "up_fp8_bt128_w2_s4", nullptr), GemmOperands::weights_m);
  EXPECT_EQ(select_operands(kUpFp8, 128, 2048, true, "up_fp8_bt128_w2_tm_s4", nullptr), GemmOperands::tokens_m);
  EXPECT_EQ(select_operands(kUpFp8, 128, 2048, false, "down_fp8_bt128_s6", nullptr), GemmOperands::weights_m);
  test::expect_error([] { select_operands(kUpFp8, 128, 2048, false, "up_fp8_bt128_tm_s5", nullptr); },
                     "FMOE_FORCE_CONFIG=up_fp8_bt128_tm_s5 puts tokens on wgmma's M side");
  test::expect_error([] { gemm_config_of(GemmWeights::bf16, GemmRows::gathered, GemmEpilogue::swiglu, 128, 1,
                                         GemmOperands::tokens_m); },
                     "no compiled bf16 gate/up (swiglu epilogue) config with BLOCK_T=128, 1 weight "
                     "wave(s) and tokens as wgmma's M side");
}

TEST(GemmConfig, ForcedConfigIsHonouredAndChecked) {
  for (int i = 0; i < int(GemmConfigId::count); ++i) {
    const GemmConfigInfo c = gemm_config_info(GemmConfigId(i));
    const GemmFamily f{c.weights, c.rows, c.epilogue};
    std::string why;
    EXPECT_EQ(select_block_t(7, 2, 8, c.name, {f}, &why), c.block_t);
    EXPECT_EQ(why, "forced by FMOE_FORCE_CONFIG");
    // A layer accepts the name of either of its GEMMs.
    if (c.epilogue == GemmEpilogue::swiglu || c.rows != GemmRows::gathered) {
      const GemmFamily up{c.weights, GemmRows::gathered, GemmEpilogue::swiglu};
      const GemmFamily down{c.weights, GemmRows::tma, GemmEpilogue::combine};
      const GemmFamily down128{c.weights, GemmRows::tma_s128, GemmEpilogue::combine};
      EXPECT_EQ(select_block_t(7, 2, 8, c.name, {up, down, down128}, nullptr), c.block_t);
    }
    const GemmFamily other{c.weights == GemmWeights::bf16 ? GemmWeights::fp8_block : GemmWeights::bf16,
                           c.rows, c.epilogue};
    test::expect_error([&] { select_block_t(7, 2, 8, c.name, {other}, nullptr); }, "FMOE_FORCE_CONFIG");
  }
  test::expect_error([] { select_block_t(7, 2, 8, "no_such_config", {kProjection}, nullptr); },
                     "names no grouped GEMM config");
}

// CTAs per SM: two where a two-CTA config exists, except for a whole-tile (swiglu) GEMM with
// fewer tiles than SMs when a one-CTA config of the width exists too; every choice is compiled.
TEST(GemmConfig, CtasPerSmFollowTheTilesAndTheTable) {
  const GemmOperands wm = GemmOperands::weights_m;
  std::string why;
  EXPECT_EQ(select_ctas(kUpE2m1, 16, 1, wm, 96, 132, "", &why), 1);    // qwen3-30b-a3b T=1
  EXPECT_NE(why.find("fewer tiles than SMs"), std::string::npos) << why;
  EXPECT_EQ(select_ctas(kUpE2m1, 16, 1, wm, 288, 132, "", nullptr), 2);  // deepseek-v3 T=1
  EXPECT_EQ(select_ctas(kDownE2m1, 16, 1, wm, 96, 132, "", nullptr), 2);  // stream-K: all busy
  EXPECT_EQ(select_ctas(kUpE2m1, 64, 1, wm, 1000, 132, "", nullptr), 1);  // no two-CTA config
  EXPECT_EQ(select_ctas(kUpFp8, 16, 1, wm, 1000, 132, "", nullptr), 1);
  EXPECT_EQ(select_ctas(kUpE2m1, 16, 1, wm, 1000, 132, "up_e2m1_bt16_s16", nullptr), 1);  // forced
  for (const GemmFamily& f : {kUpE2m1, kDownE2m1})
    for (int bt : {16, 32, 64, 128})
      for (double tiles : {10.0, 1000.0}) {
        const int ctas = select_ctas(f, bt, 1, wm, tiles, 132, "", nullptr);
        const GemmConfigInfo c = gemm_config_info(gemm_config_of(f.weights, f.rows, f.epilogue, bt, 1, wm, ctas));
        EXPECT_EQ(c.ctas_per_sm, ctas) << c.name;
        EXPECT_EQ(c.block_t, bt) << c.name;
      }
}

TEST(GemmConfig, CounterWalkWhereItMeasuredFaster) {
  // select_counter_walk's branches, each with the sizes it was measured at (gemm_config.cpp).
  const GemmConfigId up_tm = gemm_config_by_name("up_fp8_bt128_w2_tm_s4");
  const GemmConfigId down_tm = gemm_config_by_name("down_fp8_bt128_w2_tm_h128_s4");
  const GemmConfigId up16 = gemm_config_by_name("up_fp8_bt16_s10");
  const GemmConfigId up_bf16 = gemm_config_by_name("up_bf16_bt16_s10");
  ASSERT_NE(up_tm, GemmConfigId::count);
  ASSERT_NE(down_tm, GemmConfigId::count);
  ASSERT_NE(up16, GemmConfigId::count);
  ASSERT_NE(up_bf16, GemmConfigId::count);
  // FP8 tokens as M (prefill): always, whatever the depth or the routes.
  for (int kb : {6, 16, 56}) {
    EXPECT_TRUE(select_counter_walk(up_tm, kb, 40.0)) << kb;
    EXPECT_TRUE(select_counter_walk(down_tm, kb, 40.0)) << kb;
  }
  // deepseek-v3's gate/up (56 k-blocks), its routes per hit expert at T = 1, 2 | 4..64 | 96..256.
  for (double r : {1.0, 1.016}) EXPECT_TRUE(select_counter_walk(up16, 56, r)) << r;
  for (double r : {1.048, 1.115, 1.256, 1.57, 2.30}) EXPECT_FALSE(select_counter_walk(up16, 56, r)) << r;
  for (double r : {3.15, 4.0, 6.0, 8.0}) EXPECT_TRUE(select_counter_walk(up16, 56, r)) << r;
  // Shorter tiles (qwen3's 16 and 6 k-blocks) and other weights: round robin at every size.
  for (double r : {1.0, 2.0, 8.0}) {
    EXPECT_FALSE(select_counter_walk(up16, 16, r)) << r;
    EXPECT_FALSE(select_counter_walk(up_bf16, 56, r)) << r;
  }
}
