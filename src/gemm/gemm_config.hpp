// The grouped GEMM's config table and its choice (host only, no CUDA: unit-tested without a GPU).
#pragma once

#include <initializer_list>
#include <string>

namespace fusedmoe::detail {

/// fp8_block: e4m3 x fp8 activations; bf16: bf16 x bf16; e2m1: NVFP4 weights decoded in registers
/// (src/gemm/e2m1_layout.hpp) x bf16 activations (W4A16).
enum class GemmWeights : int { fp8_block, bf16, e2m1 };
/// How a tile's activation rows arrive (gemm_configs.def): gathered per token by cp.async (fp8:
/// one scale per 128 columns), or contiguous compact rows by TMA with fp8 scales per 64 columns
/// (tma) or per 128 (tma_s128: the layer's intermediate after a two-wave tokens-as-M gate/up).
enum class GemmRows : int { gathered, tma, tma_s128 };
enum class GemmEpilogue : int { combine, swiglu };
/// Which operand is wgmma's M side (gemm_configs.def says why).
enum class GemmOperands : int { weights_m, tokens_m };
/// Element type of the combine epilogue's deterministic rows (GroupedGemmParams::out_type).
enum class GemmOut : int { f32, bf16, f16 };

enum class GemmConfigId : int {
#define FMOE_GG(name, bt, waves, stages, weights, rows, epi, operands, ctas, kblocks) name,
#include "gemm/gemm_configs.def"
#undef FMOE_GG
  count
};

struct GemmConfigInfo {
  const char* name;
  int block_t, waves, stages;
  GemmWeights weights;
  GemmRows rows;
  GemmEpilogue epilogue;
  GemmOperands operands;
  int ctas_per_sm;
  int kblocks;  // 64-K blocks per k-stage
};
GemmConfigInfo gemm_config_info(GemmConfigId id);
/// Whether a config's fast-mode bf16 rows leave through staging and TMA stores in slot order
/// (GemmConfig::kStagedRows, GroupedGemmParams::sorted_rows): the two-wave tokens-as-M combine
/// configs with the intermediate's scales per 128 and at most 3 k-stages (the 64 KB staging
/// takes the room of a fourth).
constexpr bool gemm_staged_rows(GemmOperands operands, GemmEpilogue epi, int waves, GemmRows rows, int stages) {
  return operands == GemmOperands::tokens_m && epi == GemmEpilogue::combine && waves == 2 &&
         rows == GemmRows::tma_s128 && stages <= 3;
}
bool gemm_config_staged_rows(GemmConfigId id);
/// Whether two configs differ at most in their k-stages, count or shape (64-K blocks per stage):
/// twins, with the same tile, walk and epilogue.
bool gemm_configs_same_tile(GemmConfigId a, GemmConfigId b);
/// The staged-rows config with the same tile and stage shape as `id` (`id` itself when it stages its rows), or
/// GemmConfigId::count when none is compiled.
GemmConfigId gemm_config_staged_twin(GemmConfigId id);
/// The config named `name`, or GemmConfigId::count when there is none.
GemmConfigId gemm_config_by_name(const std::string& name);
const char* gemm_weights_name(GemmWeights w);

/// The config of one family with this token-tile width, weight waves, operand orientation and
/// CTAs per SM (0: whichever is compiled first) (Error if none is compiled).
GemmConfigId gemm_config_of(GemmWeights w, GemmRows rows, GemmEpilogue epi, int block_t,
                            int waves = 1, GemmOperands operands = GemmOperands::weights_m,
                            int ctas = 0);

/// The token-tile width (BLOCK_T) for a grouped GEMM whose experts get T*k/E rows on average,
/// with the reason. One width serves both GEMMs of a layer (they share the schedule's table).
/// `forced` (FMOE_FORCE_CONFIG) names a config of one of the families in `families` (a list of
/// GemmConfigId of any width: the accepted (weights, rows, epilogue) combinations); its width
/// wins. A forced name of another family is an Error naming both.
struct GemmFamily {
  GemmWeights weights;
  GemmRows rows;
  GemmEpilogue epilogue;
};
/// Whether the layer numbers every expert's token tile 0 statically (before the routing exists):
/// `hit` the chance a routed expert is hit, `rows` the routes per expert expected (T * k / E),
/// `expert_weight_bytes` one expert's gate/up weight codes in bytes (1, 2 or 0.5 a value). Appends
/// the reason where the rows would allow it.
inline constexpr size_t kStaticTileMaxExpertBytes = size_t(13) << 20;
bool static_tile_numbering(double hit, double rows, int block_t, double expert_weight_bytes,
                           std::string* reason);
/// Whether a layer with weights `w` takes BLOCK_T=128 (two-wave tiles in both GEMMs: tokens as M
/// for FP8) below select_block_t's 40 rows per expert: `rows` expected per expert, H the hidden
/// size (the gate/up's K), the two GEMMs' 128-row weight tiles per expert. Sets `reason` when it
/// does. FP8 and 4-bit (e2m1) weights; BF16 never (not measured).
bool layer_wide_tiles(GemmWeights w, double rows, int H, int up_weight_tiles, int down_weight_tiles,
                      std::string* reason);
/// Whether a 4-bit layer takes BLOCK_T=32 where select_block_t picks 64 (17-31 rows per expert
/// expected). Sets `reason` when it does.
bool layer_narrow_tiles(GemmWeights w, double rows, std::string* reason);
/// The layer's config with two 64-K blocks per k-stage that shares `id`'s tile (4-bit tiles of
/// BLOCK_T <= 32, gemm_configs.def: kblocks 2), else `id`. Appends to `reason` when it differs.
GemmConfigId layer_two_block_stages(GemmConfigId id, std::string* reason);
/// Whether the layer's down GEMM of `w` weights in BLOCK_T-token tiles fills its k-stages from one
/// producer warp (GroupedGemmParams::lean_producer). `forced`: FMOE_LEAN_PRODUCER (0 or 1), -1 when unset.
bool layer_lean_producer(GemmWeights w, int block_t, int forced);
int select_block_t(int T, int k, int E, const std::string& forced,
                   std::initializer_list<GemmFamily> families, std::string* reason);

/// The weight waves (128-row halves of a 256-row tile: 1 or 2) for one GEMM of family `f` with
/// token tiles of `block_t`, `nb` 128-row weight tiles per expert and K elements of depth, with
/// the reason appended to `reason`. A forced config of this family (FMOE_FORCE_CONFIG) decides;
/// one whose waves do not divide nb is an Error.
int select_waves(const GemmFamily& f, int block_t, int nb, int K, const std::string& forced,
                 std::string* reason);

/// Which operand is wgmma's M side for one GEMM of family `f` with token tiles of `block_t` and
/// reduction depth K. `two_scales`: the fp8 gate/up weights have one scale per 64-row gate half and one per up half
/// of every 128-row wave and k-block (what tokens_m's promotion reads; the layer's prepare step
/// checks it). A forced config of this family decides; a forced tokens_m config without
/// two_scales is an Error.
GemmOperands select_operands(const GemmFamily& f, int block_t, int K, bool two_scales,
                             const std::string& forced, std::string* reason);

/// CTAs per SM (1 or 2, gemm_configs.def's ctas column) for one GEMM of family `f` with this
/// width, waves and operands, expecting `tiles` output tiles on `sms` SMs. Where only one of the
/// two is compiled, that one; where both are, two unless the epilogue needs whole tiles
/// (swiglu) and fewer tiles than SMs are expected: then no SM gets a second tile, and one CTA's
/// ring twice as deep streams its tile faster. A forced config of this family decides.
int select_ctas(const GemmFamily& f, int block_t, int waves, GemmOperands operands, double tiles,
                int sms, const std::string& forced, std::string* reason);

/// Whether a grouped GEMM with config `id`, `kb` k-blocks of depth and on average
/// `routes_per_hit` routes per hit expert takes each CTA's tiles after its first from a counter
/// (GroupedGemmParams::fetch_counters) instead of round robin: where that measured faster
/// (FMOE_DYNAMIC_ITEMS turns it off per GEMM; the reasons per branch are in the definition).
bool select_counter_walk(GemmConfigId id, int kb, double routes_per_hit);

}  // namespace fusedmoe::detail
