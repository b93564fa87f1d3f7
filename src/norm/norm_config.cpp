// The config choice of the fused RMSNorm + quantize (no CUDA here: the CPU tests call it).
#include "norm/norm_config.hpp"

#include <cinttypes>

#include "fusedmoe/error.hpp"

namespace fusedmoe::detail {
namespace {

const NormConfigInfo kConfigs[] = {
#define FMOE_NORM(name, chunks, max_threads) {#name, false, chunks, max_threads},
#define FMOE_NORM_GENERIC(name) {#name, true, 0, 0},
#include "norm/norm_configs.def"
#undef FMOE_NORM
#undef FMOE_NORM_GENERIC
};
constexpr int kNumConfigs = int(sizeof(kConfigs) / sizeof(kConfigs[0]));
static_assert(kNumConfigs == int(NormConfigId::count), "config table and ids out of step");

NormConfigId generic_id() {
  for (int i = 0; i < kNumConfigs; ++i)
    if (kConfigs[i].generic) return NormConfigId(i);
  return NormConfigId::count;
}

}  // namespace

int NormConfigInfo::threads_for(int64_t chunks_per_row) const {
  if (generic) return 32 * kGenericWarps;
  const int64_t per_warp = 32 * int64_t(chunks);
  const int64_t warps = (chunks_per_row + per_warp - 1) / per_warp;
  const int64_t threads = 32 * (warps > 0 ? warps : 1);
  return threads <= max_threads ? int(threads) : 0;
}

NormConfigInfo norm_config_info(NormConfigId id) {
  FMOE_REQUIRE(int(id) >= 0 && int(id) < kNumConfigs, "rmsnorm_quant: unknown config id %d", int(id));
  return kConfigs[int(id)];
}

NormConfigId norm_config_by_name(const std::string& name) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (name == kConfigs[i].name) return NormConfigId(i);
  return NormConfigId::count;
}

NormChoice select_norm_config(const NormProblem& p, const char* forced) {
  const int64_t chunks = p.H / 8;
  NormChoice ch;
  if (forced && *forced) {
    const NormConfigId id = norm_config_by_name(forced);
    if (id != NormConfigId::count) {  // names of other ops' configs are theirs, not an error
      const NormConfigInfo c = norm_config_info(id);
      ch.id = id;
      ch.reason = "forced by FMOE_FORCE_CONFIG";
      if (c.generic) {
        ch.threads = c.threads_for(chunks);
        return ch;
      }
      FMOE_REQUIRE(p.vec_ok, "FMOE_FORCE_CONFIG=%s needs 16-byte rows, which this call does not have: %s",
                   forced, p.vec_why_not.c_str());
      ch.threads = c.threads_for(chunks);
      FMOE_REQUIRE(ch.threads > 0,
                   "FMOE_FORCE_CONFIG=%s holds at most %d values per row (%d threads x %d chunks of 8); H = %" PRId64,
                   forced, 8 * c.chunks * c.max_threads, c.max_threads, c.chunks, p.H);
      return ch;
    }
  }
  const NormConfigId generic = generic_id();
  if (!p.vec_ok) {
    ch.id = generic;
    ch.threads = norm_config_info(generic).threads_for(chunks);
    ch.reason = "generic kernel: " + p.vec_why_not;
    return ch;
  }
  // Fast configs, widest chunks first: fewer threads per row cost fewer reduction steps and
  // barriers per value, but a CTA is one row, so at small T only wide CTAs put enough loads in
  // flight. Take the first config whose rows give every SM kNormTargetWarpsPerSm warps; when
  // none does (small T), the one with the most threads per row.
  const int64_t want_warps = int64_t(kNormTargetWarpsPerSm) * p.num_sms;
  NormConfigId most = NormConfigId::count;
  int most_threads = 0;
  for (int i = 0; i < kNumConfigs; ++i) {
    const NormConfigInfo& c = kConfigs[i];
    if (c.generic) continue;
    const int threads = c.threads_for(chunks);
    if (threads == 0) continue;
    if (p.T * (threads / 32) >= want_warps) {
      ch.id = NormConfigId(i);
      ch.threads = threads;
      ch.reason = strf("%" PRId64 " rows x %d warps fill %d warps per SM; the most values per thread that do",
                       p.T, threads / 32, kNormTargetWarpsPerSm);
      return ch;
    }
    // Ties go to the later (narrower) config: the same threads with fewer registers each.
    if (threads >= most_threads) {
      most = NormConfigId(i);
      most_threads = threads;
    }
  }
  if (most == NormConfigId::count) {
    ch.id = generic;
    ch.threads = norm_config_info(generic).threads_for(chunks);
    ch.reason = strf("generic kernel: H = %" PRId64 " is more than the register configs hold", p.H);
    return ch;
  }
  ch.id = most;
  ch.threads = most_threads;
  ch.reason = strf("%" PRId64 " rows are too few to fill %d warps per SM: the widest CTA (%d threads per row)",
                   p.T, kNormTargetWarpsPerSm, most_threads);
  return ch;
}

}  // namespace fusedmoe::detail
