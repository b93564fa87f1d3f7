// Instantiations of the grouped FP8 GEMM: one per line of gemm_configs.def.
#include "gemm/sm90_grouped_gemm_fp8.cuh"

namespace fusedmoe::detail {

GemmConfigInfo gemm_config_info(GemmConfigId id) {
  switch (id) {
#define FMOE_GG(name, bt, stages, det) \
  case GemmConfigId::name: return {#name, bt, stages, det};
#include "gemm/gemm_configs.def"
#undef FMOE_GG
    default: break;
  }
  FMOE_REQUIRE(false, "grouped_gemm_fp8: unknown config id %d", int(id));
}

GemmConfigId gemm_config_by_name(const std::string& name) {
  for (int i = 0; i < int(GemmConfigId::count); ++i)
    if (name == gemm_config_info(GemmConfigId(i)).name) return GemmConfigId(i);
  return GemmConfigId::count;
}

void launch_grouped_gemm_fp8(GemmConfigId id, const GemmParams& p, int num_sms, cudaStream_t stream) {
  switch (id) {
#define FMOE_GG(name, bt, stages, det) \
  case GemmConfigId::name: return launch_grouped_gemm_fp8_cfg<GemmConfig<bt, stages, det>>(p, num_sms, stream);
#include "gemm/gemm_configs.def"
#undef FMOE_GG
    default: break;
  }
  FMOE_REQUIRE(false, "grouped_gemm_fp8: unknown config id %d", int(id));
}

}  // namespace fusedmoe::detail
