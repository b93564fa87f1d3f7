// The config table of the fused RMSNorm + quantize and the choice among it: a pure host function,
// free of CUDA headers, so the CPU tests check it on any machine.
#pragma once

#include <cstdint>
#include <string>

namespace fusedmoe::detail {

enum class NormConfigId : int {
#define FMOE_NORM(name, chunks, max_threads) name,
#define FMOE_NORM_GENERIC(name) name,
#include "norm/norm_configs.def"
#undef FMOE_NORM
#undef FMOE_NORM_GENERIC
  count
};

struct NormConfigInfo {
  const char* name = "";
  bool generic = false;  ///< the two-pass warp-per-row fallback
  int chunks = 0;        ///< fast configs: 16-byte chunks (8 values) per thread at most
  int max_threads = 0;   ///< fast configs: threads per row (= per CTA) at most
  /// Threads per row for a row of `chunks_per_row` chunks: the fewest warps that hold the row;
  /// 0 when more than max_threads would be needed.
  int threads_for(int64_t chunks_per_row) const;
  static constexpr int kGenericWarps = 4;  ///< generic: rows (warps) per CTA
};
NormConfigInfo norm_config_info(NormConfigId id);
/// The id of a config name, or NormConfigId::count when no norm config has that name.
NormConfigId norm_config_by_name(const std::string& name);

struct NormProblem {
  int64_t T = 0, H = 0;
  int num_sms = 132;
  bool vec_ok = true;         ///< H % 8 == 0 and every row 16-byte loadable / storable
  std::string vec_why_not;    ///< why not, when !vec_ok
};

struct NormChoice {
  NormConfigId id = NormConfigId::count;
  int threads = 0;  ///< threads per CTA
  std::string reason;
};

/// Warps in flight per SM below which a wider CTA (fewer chunks per thread) is preferred. Not
/// measured yet: a first guess from Little's law (about 20 KB of loads in flight per SM cover
/// HBM latency at full bandwidth; 16 warps of 16-byte loads with 2 or more chunks per thread
/// give 16 KB or more). `fusedmoe bench --op rmsnorm_quant --configs all` times every config.
constexpr int kNormTargetWarpsPerSm = 16;

/// Chooses the config (reason on each branch). `forced` (FMOE_FORCE_CONFIG) names a config to use
/// instead; a name of another op's config is ignored, a norm config that cannot run this problem
/// throws Error.
NormChoice select_norm_config(const NormProblem& p, const char* forced = nullptr);

}  // namespace fusedmoe::detail
