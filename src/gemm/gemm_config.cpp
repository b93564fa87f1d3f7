// Config table queries and the token-tile choice of the grouped GEMM (pure host code).
#include "gemm/gemm_config.hpp"

#include "fusedmoe/error.hpp"

namespace fusedmoe::detail {

GemmConfigInfo gemm_config_info(GemmConfigId id) {
  using W = GemmWeights;
  using R = GemmRows;
  using Ep = GemmEpilogue;
  switch (id) {
#define FMOE_GG(name, bt, waves, stages, weights, rows, epi, operands, ctas, kblocks) \
  case GemmConfigId::name:                                                             \
    return {#name, bt, waves, stages, W::weights, R::rows, Ep::epi, GemmOperands::operands, ctas, kblocks};
#include "gemm/gemm_configs.def"
#undef FMOE_GG
    default: break;
  }
  FMOE_REQUIRE(false, "grouped_gemm: unknown config id %d", int(id));
}

GemmConfigId gemm_config_by_name(const std::string& name) {
  for (int i = 0; i < int(GemmConfigId::count); ++i)
    if (name == gemm_config_info(GemmConfigId(i)).name) return GemmConfigId(i);
  return GemmConfigId::count;
}

bool gemm_config_staged_rows(GemmConfigId id) {
  const GemmConfigInfo ci = gemm_config_info(id);
  return gemm_staged_rows(ci.operands, ci.epilogue, ci.waves, ci.rows, ci.stages);
}

bool gemm_configs_same_tile(GemmConfigId x, GemmConfigId y) {
  const GemmConfigInfo a = gemm_config_info(x), b = gemm_config_info(y);
  return b.block_t == a.block_t && b.waves == a.waves && b.weights == a.weights && b.rows == a.rows &&
         b.epilogue == a.epilogue && b.operands == a.operands && b.ctas_per_sm == a.ctas_per_sm;
}

GemmConfigId gemm_config_staged_twin(GemmConfigId id) {
  for (int i = 0; i < int(GemmConfigId::count); ++i)
    if (gemm_config_staged_rows(GemmConfigId(i)) && gemm_configs_same_tile(id, GemmConfigId(i)) &&
        gemm_config_info(GemmConfigId(i)).kblocks == gemm_config_info(id).kblocks)
      return GemmConfigId(i);
  return GemmConfigId::count;
}

const char* gemm_weights_name(GemmWeights w) {
  switch (w) {
    case GemmWeights::fp8_block: return "fp8";
    case GemmWeights::bf16: return "bf16";
    case GemmWeights::e2m1: return "nvfp4";
  }
  return "?";
}

namespace {
const char* family_name(GemmRows r, GemmEpilogue e) {
  if (e == GemmEpilogue::swiglu) return "gate/up (swiglu epilogue)";
  return r == GemmRows::gathered ? "projection (gathered rows, combine)"
         : r == GemmRows::tma      ? "down (tma rows, combine)"
                                   : "down (tma rows with one scale per 128, combine)";
}
bool same_family(const GemmConfigInfo& c, const GemmFamily& f) {
  return c.weights == f.weights && c.rows == f.rows && c.epilogue == f.epilogue;
}
}  // namespace

GemmConfigId gemm_config_of(GemmWeights w, GemmRows rows, GemmEpilogue epi, int block_t,
                            int waves, GemmOperands operands, int ctas) {
  for (int i = 0; i < int(GemmConfigId::count); ++i) {
    const GemmConfigInfo c = gemm_config_info(GemmConfigId(i));
    // (One block per stage: the layer swaps in a two-block twin by its own rule, layer_two_block_stages.)
    if (c.block_t == block_t && c.waves == waves && c.operands == operands && c.kblocks == 1 &&
        (ctas == 0 || c.ctas_per_sm == ctas) && same_family(c, {w, rows, epi}))
      return GemmConfigId(i);
  }
  FMOE_REQUIRE(false, "grouped_gemm: no compiled %s %s config with BLOCK_T=%d, %d weight wave(s) "
               "and %s as wgmma's M side", gemm_weights_name(w), family_name(rows, epi), block_t,
               waves, operands == GemmOperands::tokens_m ? "tokens" : "weights");
}

GemmOperands select_operands(const GemmFamily& f, int block_t, int K, bool two_scales,
                             const std::string& forced, std::string* reason) {
  GemmOperands o = GemmOperands::weights_m;
  const char* why = nullptr;
  const GemmConfigId id = forced.empty() ? GemmConfigId::count : gemm_config_by_name(forced);
  if (id != GemmConfigId::count && same_family(gemm_config_info(id), f)) {
    o = gemm_config_info(id).operands;
    FMOE_REQUIRE(o == GemmOperands::weights_m || two_scales,
                 "FMOE_FORCE_CONFIG=%s puts tokens on wgmma's M side, which needs one fp8 weight "
                 "scale per 64-row gate half and up half of each 128-row wave; these weights' "
                 "scales differ within a half (an intermediate size that is not a multiple of 64)",
                 forced.c_str());
    why = "forced";
  } else if (f.weights == GemmWeights::fp8_block && block_t == 128 &&
             f.epilogue == GemmEpilogue::swiglu && two_scales) {
    // The per-block promotion is the mainloop's largest cost with weights as M (32 column
    // scales per thread and block): tokens as M need two products per thread and block.
    // Measured on H100 (docs/performance.md, issue 10 step 2): gate/up -7..-23% at T=2048/8192.
    o = GemmOperands::tokens_m;
    why = "tokens as wgmma's M side (fp8 promotion by two products per thread and block)";
  } else if (f.rows == GemmRows::tma_s128) {
    // One promotion per k-stage: tokens as M at every K. Measured on H200 (docs/performance.md,
    // issue 10 step 5) against weights as M with the same scales: qwen3-30b-a3b down 148 -> 140
    // us at T=2048, 383 -> 370 at T=8192.
    o = GemmOperands::tokens_m;
    why = "tokens as wgmma's M side (intermediate scales per 128: one promotion per k-stage)";
  } else if (f.weights == GemmWeights::fp8_block && block_t == 128 && f.rows == GemmRows::tma &&
             f.epilogue == GemmEpilogue::combine) {
    // The layer's down GEMM at every K. Step 2 (H100, before the bf16 route rows and the
    // deterministic rows of step 3) kept weights as M below K = 2048: the qwen3 downs (K = 768 /
    // 512) lost 4-6% at T=8192 with tokens as M then. Remeasured on H200 (step 5) with today's
    // epilogues, deterministic mode, tokens as M with two waves: qwen3-30b-a3b 175 -> 142 /
    // 504 -> 404 us at T=2048 / 8192, qwen3.5-35b-a3b 161 -> 142 / 461 -> 394; fast mode with one
    // wave 181 -> 156 / 490 -> 420 and 165 -> 155 / 437 -> 384.
    o = GemmOperands::tokens_m;
    why = "tokens as wgmma's M side (the layer's down GEMM at BLOCK_T=128)";
  } else if (f.weights == GemmWeights::fp8_block && block_t == 128 &&
             f.epilogue == GemmEpilogue::combine && K >= 2048) {
    // The projection: the cheaper promotion pays where K is long enough to amortize the tokens_m
    // combine epilogue (16-byte reductions of 4 adjacent outputs). Measured on H100 (step 2): the
    // projection (qwen3.5, K=2048) -2..-4% end to end at T=2048..16384.
    o = GemmOperands::tokens_m;
    why = "tokens as wgmma's M side (K >= 2048: the promotion's saving outweighs the combine's)";
  }
  if (reason && why) *reason += std::string(reason->empty() ? "" : "; ") + family_name(f.rows, f.epilogue) + ": " + why;
  return o;
}

int select_ctas(const GemmFamily& f, int block_t, int waves, GemmOperands operands, double tiles,
                int sms, const std::string& forced, std::string* reason) {
  bool has[3] = {false, false, false};
  for (int i = 0; i < int(GemmConfigId::count); ++i) {
    const GemmConfigInfo c = gemm_config_info(GemmConfigId(i));
    if (c.block_t == block_t && c.waves == waves && c.operands == operands && c.kblocks == 1 &&
        same_family(c, f))
      has[c.ctas_per_sm] = true;
  }
  const GemmConfigId id = forced.empty() ? GemmConfigId::count : gemm_config_by_name(forced);
  int ctas;
  const char* why = nullptr;
  if (id != GemmConfigId::count && same_family(gemm_config_info(id), f)) {
    ctas = gemm_config_info(id).ctas_per_sm;
    why = "forced";
  } else if (!has[2]) {
    ctas = 1;
  } else if (!has[1]) {
    ctas = 2;
    why = "two CTAs an SM (the only config of this width)";
  } else if (f.epilogue == GemmEpilogue::swiglu && tiles < sms) {
    // Measured on H100 (docs/performance.md, issue 11): qwen3-30b-a3b T=1 (96 gate/up tiles)
    // 15.3 us with one CTA of 16 stages, 20.6 with two of 8.
    ctas = 1;
    why = "one CTA an SM (fewer tiles than SMs: a deeper ring per tile)";
  } else {
    // Two CTAs of half the stages: the same bytes in flight, twice the warps that decode.
    ctas = 2;
    why = "two CTAs an SM (twice the consumer warps per scheduler)";
  }
  if (reason && why) *reason += std::string(reason->empty() ? "" : "; ") + family_name(f.rows, f.epilogue) + ": " + why;
  return ctas;
}

int select_waves(const GemmFamily& f, int block_t, int nb, int K, const std::string& forced,
                 std::string* reason) {
  int waves = 1;
  const char* why;
  const GemmConfigId id = forced.empty() ? GemmConfigId::count : gemm_config_by_name(forced);
  if (id != GemmConfigId::count && same_family(gemm_config_info(id), f)) {
    const GemmConfigInfo c = gemm_config_info(id);
    FMOE_REQUIRE(nb % c.waves == 0, "FMOE_FORCE_CONFIG=%s takes %d x 128 weight rows per tile; "
                 "this GEMM has %d 128-row weight tiles per expert, not a multiple of %d",
                 forced.c_str(), c.waves, nb, c.waves);
    waves = c.waves;
    why = "forced";
  } else if (block_t != 128 || nb % 2 != 0) {
    // Narrower token tiles stream weights that each tile uses for few tokens: bytes in flight
    // (more, smaller stages) and enough tiles to fill the SMs matter more there.
    why = block_t == 128 ? "128 weight rows per tile (an odd number of 128-row weight tiles)"
                         : "128 weight rows per tile";
  } else if (f.epilogue == GemmEpilogue::swiglu) {
    // BLOCK_T=128 is compute-bound: a stage of 256 weight rows feeds twice the wgmmas from the
    // same activations. Measured on H100 at T=2048/8192 (docs/performance.md): gate/up -2..-12%
    // fp8, -22..-32% bf16 (deepseek-v3 T=2048 +2%, within its spread).
    waves = 2;
    why = "256 weight rows per tile (BLOCK_T=128: compute-bound, fewer bytes per FLOP)";
  } else if (f.weights == GemmWeights::fp8_block && f.rows != GemmRows::gathered) {
    // The fp8 down GEMM takes tokens as M at BLOCK_T=128 (select_operands), where the taller
    // tile pays at short K too. Measured on H200 (step 5): scales per 128, qwen3-30b-a3b down
    // 370 -> 341 us at T=8192 (143 vs 140 at T=2048), qwen3.5-35b-a3b 356 -> 341 and 150 -> 141;
    // scales per 64 (deterministic mode), qwen3-30b-a3b 431 -> 404 and 148 -> 142, qwen3.5
    // 401 -> 394 and 148 -> 142.
    waves = 2;
    why = "256 weight rows per tile (BLOCK_T=128, fp8 down GEMM with tokens as M)";
  } else if ((f.weights == GemmWeights::bf16 || f.weights == GemmWeights::e2m1) &&
             f.rows != GemmRows::gathered && nb >= 16) {
    // The bf16 and e2m1 down GEMMs at N >= 2048 take two waves at short K as well (both bf16
    // wgmma with weights as M: the second wave reuses the stage's activation tile; why that pays
    // here and not for fp8 weights as M was not measured). Measured on H200, the two-wave config forced against the one-wave one, two rounds,
    // down GEMM: bf16 (session 46, call 2) qwen3-30b-a3b (K=768) T=2048 / 4096 / 8192 0.964,
    // 0.997 / 0.975, 0.960 / 0.933, 0.949; qwen3.5-35b-a3b (K=512) 0.926, 0.928 / 1.023, 0.941 /
    // 0.932, 0.944; layers 0.969-0.999. e2m1 (session 47, call 1) qwen3-30b-a3b 0.921, 0.917 /
    // 0.938, 0.936 / 0.907, 0.901; qwen3.5-35b-a3b 0.956, 0.924 / 0.944, 0.942 / 0.913, 0.904;
    // layers 0.956-0.986. (The branch below's H100 measurement found K = 512 / 768 slower with
    // two waves for fp8 weights as M; not measured again on an H100.)
    waves = 2;
    why = "256 weight rows per tile (BLOCK_T=128, bf16 / e2m1 down GEMM with N >= 2048: measured faster at K = 512 and 768)";
  } else if (K >= 2048 && nb >= 16) {
    // The combine epilogue (fp32 reductions of the whole tile) does not overlap the mainloop, so
    // the taller tile pays only where the mainloop is long and the tiles many. Measured on H100:
    // deepseek-v3's down (K=2048, N=7168) -6..-9% fp8, -12% bf16; qwen3's (K=768/512) +4..+7%
    // and the qwen3.5 projection (N=512) +3..+7% lose.
    waves = 2;
    why = "256 weight rows per tile (BLOCK_T=128, K >= 2048 and N >= 2048)";
  } else {
    why = "128 weight rows per tile (combine: K < 2048 or N < 2048, where 256 rows measured slower)";
  }
  if (reason) *reason += std::string(reason->empty() ? "" : "; ") + family_name(f.rows, f.epilogue) + ": " + why;
  return waves;
}

// Measured on H200 (sessions 45-46, FMOE_STATIC_TILES=0 against static numbering, layer µs, the
// bench's model routing). Static numbering walks cheaper (no search over the experts per tile;
// the first tiles' numbers known before the routing exists), but an expert past its first tile
// runs its later tiles after every expert's first, so their weights come from DRAM again; the
// bigger an expert's weights, the more that costs. Per-expert gate/up weight bytes -> layer
// time numbered from the routing / statically: qwen3.5-35b-a3b fp8 (2.1 MB) T=128 / 512 / 1024
// 1.059 / 1.035 / 0.996; qwen3-30b-a3b fp8 (3.1 MB) 1.026 / 1.042 / 1.041; qwen3-235b-a22b
// nvfp4 (6.3 MB) T=512 / 1024 1.010 / 0.999; qwen3-235b-a22b fp8 (12.6 MB) T=128 / 512 / 1024
// 1.029 / 1.010 / 1.036; deepseek-v3 nvfp4 (14.7 MB) T=512 / 1024 / 2048 0.916 / 0.957 /
// 0.948; gpt-oss-120b fp8 (16.6 MB) T=512 / 2048 0.897 / 0.981; deepseek-v3 fp8 (29 MB)
// 0.988 / 1.001 / 0.953 (ncu at T=2048: gate/up DRAM 7.57 -> 6.82 GB, down 3.70 -> 2.90);
// deepseek-v3 bf16 (59 MB) T=1024 / 2048 0.800 / 0.833; llama4-maverick fp8 (84 MB) T=2048 /
// 8192 0.995 / 1.003. So static numbering stays where the experts average <= half a token tile
// (few overflow) and an expert's gate/up weights are under 13 MiB: the line falls between
// 12.6 MB (static faster) and 14.7 MB (numbered from the routing faster), where nothing was
// measured.
bool static_tile_numbering(double hit, double rows, int block_t, double expert_weight_bytes,
                           std::string* reason) {
  const bool few_rows = hit > 0.9 && rows <= block_t / 2.0;
  const bool small = expert_weight_bytes < double(kStaticTileMaxExpertBytes);
  if (reason && few_rows) {
    *reason += std::string(reason->empty() ? "" : "; ") +
               (small ? "token tile 0 of every expert numbered statically (<= half a token tile per expert, "
                        "gate/up weights < 13 MiB an expert)"
                      : "every token tile numbered from the routing (gate/up weights >= 13 MiB an expert: "
                        "an overflowing expert's weights would be read twice)");
  }
  return few_rows && small;
}

// Measured on H200 (session 42, docs/performance.md; layer µs with even loads, the narrow rule ->
// BLOCK_T=128 with two waves): deepseek-v3 (H = 7168) T=512, 16 rows, 3057.7 -> 2948.6 and T=1024,
// 32 rows, 3475.7 -> 2990.6 (under the bench's skewed model routing 2707 -> 1988 and 3259 -> 2299);
// qwen3.5-35b-a3b (H = 2048) 16 rows 273.7 -> 291.5 but 32 rows 314.8 -> 300.1; qwen3-30b-a3b
// (H = 2048) 16 rows 183.8 -> 197.7, 32 rows 207.0 -> 205.7; gpt-oss-120b (45 and 23 weight tiles:
// no two-wave tiles, so one-wave tokens-as-M) 853 -> 1265 and 987 -> 1330. So from 32 rows where
// both GEMMs can take two waves, and from 16 where the gate/up's K is long as well (H >= 4096:
// its tokens-as-M promotion, one per k-stage, saves the most there). Session 43 (call 1, the rule
// against the narrow one): deepseek-v3 T=512-1280 0.825-0.933, qwen3.5 T=1024 / 1280 0.957 / 0.918,
// qwen3-30b T=512 / 640 0.994 / 0.946. Session 44 (H200, BLOCK_T=128 forced against the narrow
// rule, layer median µs): where H >= 7168 the wide tiles pay from 4 rows: deepseek-v3 T=128 / 256
// (4 / 8 rows) 0.980 / 0.965 (call 5) and 0.988 / 0.980 (call 9, two rounds alternating on one
// card) under even loads, 0.940 / 0.947 under the bench's model routing (its skew gives the hit
// experts more rows than the mean); at 2 rows (T=64) even loads are a wash (0.986, then 1.007 /
// 1.000 with a p90 1-6% higher) though model routing gains (0.976), and 1 row loses (1.004 /
// 1.007). At H = 4096 (qwen3-235b-a22b) 2 rows lose (1.06) and 4 / 8 rows gain little (0.989 /
// 0.997).
// 4-bit weights (e2m1: NVFP4 / MXFP4), measured on H200 (session 47, the layer tuning run
// `bench --op layer --configs all` under the bench's model routing, fast mode, layer µs, the
// automatic choice -> BLOCK_T=128 with two-wave tiles in both GEMMs): deepseek-v3 (H = 7168)
// T=256 / 512 / 1024 (8 / 16 / 32 rows) 2454 -> 2084, 2801 -> 2340, 3698 -> 2960 (1.18-1.25x);
// at 6 / 7 rows 2045 -> 1967 and 2240 -> 2016, at 5 rows 1798 -> 1892 (the narrow tile wins) and
// at 4 rows the automatic BLOCK_T=16 was the fastest of 8. (Session 47 set the line at 8 rows;
// session 48 moved it, below.) qwen3-235b-a22b (H = 4096) at 32 rows 836 -> 790 (0.945), at 24
// rows 775 -> 732 (but BLOCK_T=32 ran 683 there), at 16 rows the automatic BLOCK_T=32 fastest;
// qwen3-30b-a3b (H = 2048) at 32 rows the automatic BLOCK_T=64 fastest, qwen3.5-35b-a3b at 32
// rows even (1.007).
// Session 48 (call 1, H200, the 8-row rule's binary against the one before it, both modes):
// under the model routing deepseek-v3 T=256 / 512 / 1024 0.831-0.839 / 0.812-0.820 / 0.792-0.794,
// but under even loads (`--routing unbiased`, every expert hit) 1.112-1.119 / 1.003-1.006 /
// 0.889-0.895. The model routing's random router bias crowds the routes onto ~165 of 256
// experts, where a real checkpoint's bias is trained to spread them. Call 2 (the 16-row line's
// binary against the 8-row one, layer new / old; two rounds under even loads): at 10 / 12 / 14
// rows (T=320 / 384 / 448) even loads break even (0.990-1.004, 0.990-1.004, 0.999-1.008) while
// the model routing keeps 4.8 / 11.5 / 15% on the wide tiles; at 8 rows even loads gain 10% on
// the narrow ones (0.890-0.901). So the line is at 10 rows. (Calls 3-5, the tuning run: at 9 /
// 10 rows under even loads BLOCK_T=16 ran 1.039 / 1.021x faster than the choice, but 1.22 /
// 1.28x slower under the model routing.) qwen3-235b-a22b T=512 (32 rows) 0.924-0.930 under
// both routings (call 1). H = 2048 (calls 4-6, the tuning run; the qwen presets have no router
// bias, so both routings are even): BLOCK_T=64 -> the wide pair at 32 rows qwen3-30b-a3b 241.5
// -> 243.3 (64 stays), qwen3.5-35b-a3b 352.1 -> 346.8; at 34 rows 254.5 -> 247.3 and 388.2 ->
// 373.6; at 36 rows 257.0 -> 248.4 and 390.1 -> 376.4; at 40 rows 259.7 -> 249.6 and 393.4 ->
// 383.7. So above 32 rows at any H.
bool layer_wide_tiles(GemmWeights w, double rows, int H, int up_weight_tiles, int down_weight_tiles,
                      std::string* reason) {
  if (up_weight_tiles % 2 != 0 || down_weight_tiles % 2 != 0) return false;
  const char* why = nullptr;
  if (w == GemmWeights::fp8_block) {
    if (rows >= 32)
      why = ">= 32 rows per expert expected (FP8 layer, two waves possible): BLOCK_T=128 with two-wave "
            "tokens-as-M tiles measured faster than 64";
    else if (rows >= 16 && H >= 4096)
      why = ">= 16 rows per expert and H >= 4096 (FP8 layer, two waves possible): BLOCK_T=128 with two-wave "
            "tokens-as-M tiles measured faster than 32 / 64";
    else if (rows >= 4 && H >= 7168)
      why = ">= 4 rows per expert and H >= 7168 (FP8 layer, two waves possible): BLOCK_T=128 with two-wave "
            "tokens-as-M tiles measured faster than 16 / 32";
  } else if (w == GemmWeights::e2m1) {
    if (rows >= 10 && H >= 7168)
      why = ">= 10 rows per expert and H >= 7168 (4-bit layer, two waves possible): BLOCK_T=128 with "
            "two-wave tiles measured 1.05-1.25x faster than 32 / 64 under skewed loads, at least as fast "
            "under even ones";
    else if (rows >= 32 && H >= 4096)
      why = ">= 32 rows per expert and H >= 4096 (4-bit layer, two waves possible): BLOCK_T=128 with "
            "two-wave tiles measured faster than 64";
    else if (rows > 32)
      why = "> 32 rows per expert (4-bit layer, two waves possible): BLOCK_T=128 with two-wave tiles "
            "measured 1.01-1.04x faster than 64";
  }
  // BF16 weights: not measured below 40 rows; select_block_t decides.
  if (why && reason) *reason = why;
  return why != nullptr;
}

// Measured on H200 (session 48, the layer tuning run under even loads, `--routing unbiased`,
// fast mode, layer µs, at 24 rows per expert): BLOCK_T=32 (two CTAs an SM, c2_s6) against
// select_block_t's 64: qwen3-235b-a22b NVFP4 (H = 4096) 664.9 against 771.6 (1.160x; session 47
// under the model routing 683.2 against 775.5), qwen3-30b-a3b (H = 2048) 191.8 against 228.6
// (1.192x), qwen3.5-35b-a3b (H = 2048) 298.7 against 335.9 (1.125x). The rule's binary against
// the one before it (call 2, both routings, qwen3-235b-a22b): 20 rows 0.854-0.866, 24 rows
// 0.866-0.912, 28 rows 0.955-1.004. At 16 rows select_block_t already picks 32; at 32 the wide
// rule takes 128 where the GEMMs can take two waves (H = 2048 keeps 64 there: measured as fast).
// gpt-oss-120b (MXFP4, H = 2880, odd weight tiles) with the rule (call 3): at 24 rows its
// BLOCK_T=32 925.6 was the fastest of 6, 64 ran 1033.8 (1.117x).
bool layer_narrow_tiles(GemmWeights w, double rows, std::string* reason) {
  if (w != GemmWeights::e2m1 || rows <= 16 || rows >= 32) return false;
  if (reason)
    *reason = "17-31 rows per expert (4-bit layer): BLOCK_T=32 measured 1.13-1.19x faster than 64 at 24 rows";
  return true;
}

// Two 64-K blocks per k-stage at decode sizes, where the 4-bit GEMMs are issue-bound (ncu,
// session 48: 5.05 thread instructions per weight at deepseek-v3 T=128): the producer's per-stage
// work (barriers, its copies' setup, ring polling) is paid once per two blocks. The static SASS
// count said 12% fewer instructions in the gate/up, 7% in the down. Measured on H200 (session 49,
// call 3, NVFP4, even loads, fast mode; each GEMM's two-block config forced against the one-block
// choice): gate/up at BLOCK_T=16 0.942-0.955 (deepseek-v3, qwen3-30b-a3b, qwen3.5-35b-a3b at
// T=32 and 128; the layer 0.953-0.974), at BLOCK_T=32 0.944 (qwen3-30b-a3b, qwen3-235b-a22b at
// T=256; the layer 0.964-0.966); the down at 16 0.948-0.979, at 32 0.979-0.988. No 4-bit tile of
// 16 or 32 tokens measured slower, so every compiled one takes its twin.
GemmConfigId layer_two_block_stages(GemmConfigId id, std::string* reason) {
  const GemmConfigInfo c = gemm_config_info(id);
  if (c.weights != GemmWeights::e2m1 || c.kblocks != 1) return id;
  for (int i = 0; i < int(GemmConfigId::count); ++i) {
    const GemmConfigId t = GemmConfigId(i);
    if (gemm_config_info(t).kblocks == 2 && gemm_configs_same_tile(t, id)) {
      if (reason)
        *reason += "; two 64-K blocks per k-stage (4-bit, BLOCK_T <= 32: the GEMMs 0.94-0.99 of one block)";
      return t;
    }
  }
  return id;
}

// The lean producer (one warp runs the down GEMM's k-loop, the other three skip the ring: its
// polling was 11% of the NVFP4 down GEMM's instructions, ncu session 48). Measured on H200,
// NVFP4, even loads: with one-block stages (session 49, call 2) the down GEMM 0.982-0.992 on
// deepseek-v3 / qwen3-30b-a3b at T=32-256, qwen3.5-35b-a3b 0.990-1.002; with the two-block
// BLOCK_T=16 stages (call 3) 0.937-0.974 of the one-block stages against 0.948-0.979 without it.
// BF16 weights and 4-bit tiles wider than 32 tokens were not measured: they keep four warps.
bool layer_lean_producer(GemmWeights w, int block_t, int forced) {
  if (forced >= 0) return forced == 1;
  return w == GemmWeights::e2m1 && block_t <= 32;
}

int select_block_t(int T, int k, int E, const std::string& forced,
                   std::initializer_list<GemmFamily> families, std::string* reason) {
  if (!forced.empty()) {
    const GemmConfigId id = gemm_config_by_name(forced);
    FMOE_REQUIRE(id != GemmConfigId::count, "FMOE_FORCE_CONFIG=%s names no grouped GEMM config",
                 forced.c_str());
    const GemmConfigInfo c = gemm_config_info(id);
    bool ok = false;
    for (const GemmFamily& f : families) ok = ok || same_family(c, f);
    const GemmFamily& want = *families.begin();
    FMOE_REQUIRE(ok, "FMOE_FORCE_CONFIG=%s is a %s %s config; this call runs %s %s", forced.c_str(),
                 gemm_weights_name(c.weights), family_name(c.rows, c.epilogue),
                 gemm_weights_name(want.weights), family_name(want.rows, want.epilogue));
    if (reason) *reason = "forced by FMOE_FORCE_CONFIG";
    return c.block_t;
  }
  // Weights are wgmma's M side and an expert's routes its N side (BLOCK_T), so the choice is
  // about rows per expert: a tile narrower than an expert's rows streams its weights once per
  // token tile (from L2 after the first, but still issue and smem work); a tile much wider
  // computes and stages empty columns. Expected rows per expert: T * k / E.
  const double rows = double(T) * k / E;
  // NVFP4 weights keep BLOCK_T=16 up to 8 rows per expert: a Poisson(8) count still exceeds 16
  // with probability 0.4%, and the two-CTA BLOCK_T=16 tiles hold 8 stages of weights in flight
  // against 6 (the layer tuning run, `bench --op layer --configs all`, H200: qwen3-30b-a3b T=128
  // 180.7 -> 163.6 us, qwen3.5-35b-a3b T=256 249.1 -> 248.5; at 10 rows the two presets disagree,
  // -6% / +2%). FP8 keeps 6: at 8 rows its two presets disagree as well (-1.2% / +2.7%).
  const bool e2m1 = families.size() > 0 && families.begin()->weights == GemmWeights::e2m1;
  const double narrow_max = e2m1 ? 8 : 6;
  int bt;
  const char* why;
  if (rows <= narrow_max) {
    bt = 16;
    why = e2m1 ? "<= 8 rows per expert expected (decode, NVFP4): BLOCK_T=16 keeps nearly every expert "
                 "in one token tile (a Poisson(8) count exceeds 16 with probability 0.4%) with the "
                 "most weight stages in flight"
               : "<= 6 rows per expert expected (decode): BLOCK_T=16 keeps nearly every expert in one "
                 "token tile (a Poisson(6) count exceeds 16 with probability < 0.1%)";
  } else if (rows <= 16) {
    bt = 32;
    why = "up to 16 rows per expert expected: BLOCK_T=32 holds the typical expert in one tile";
  } else if (rows <= 40) {
    bt = 64;
    why = "17-40 rows per expert expected: BLOCK_T=64 holds the typical expert in one tile";
  } else {
    bt = 128;
    why = "> 40 rows per expert expected: BLOCK_T=128, the widest tile whose two accumulators "
          "(scratch + promoted) fit the consumer registers";
  }
  if (reason) *reason = why;
  return bt;
}

// Where it was measured to pay, on the H200 against the round robin in the same call
// (docs/performance.md, sessions 32-34):
// - tokens-as-M tiles (FP8 prefill): the CTAs that share a weight tile stay in step and read it
//   from L2 once; deepseek-v3 gate/up 0.91-0.98, its down GEMM 0.93-0.97 at T = 2048-8192.
// - FP8 weights-as-M tiles of at least 32 k-blocks (deepseek-v3's gate/up, K = 7168) where the
//   hit experts get at most ~1 or at least ~3 routes each on average (`routes_per_hit`, the
//   layer plan's expectation under uniform routing): deepseek-v3 gate/up 0.94 / 0.98 at T = 1 / 2 (1.00 / 1.02
//   routes per hit expert) and 0.84-0.89 at T = 96-256 (3.1-8.0). Between, the round robin won:
//   1.036-1.041 at T = 8-32 (1.12-1.6 routes), 1.017 at T = 64 (2.3), even (1.002) at T = 4 (1.05).
//   Session 34, both orders twice in the same call; the cause is not known.
// Not where the tiles are shorter: qwen3-30b-a3b's gate/up (16 k-blocks) ran 1.07-1.18x and its
// down (6) 1.06-1.18x slower at T = 4-512, deepseek-v3's down (16) the same, whether the atomic's
// result was waited for or not (so not its round trip; the cause is not known). BF16 and 4-bit
// weights were not measured with it and keep the round robin.
bool select_counter_walk(GemmConfigId id, int kb, double routes_per_hit) {
  const GemmConfigInfo c = gemm_config_info(id);
  if (c.weights != GemmWeights::fp8_block) return false;
  if (c.operands == GemmOperands::tokens_m) return true;
  return kb >= 32 && (routes_per_hit <= 1.03 || routes_per_hit >= 3.0);
}

}  // namespace fusedmoe::detail
