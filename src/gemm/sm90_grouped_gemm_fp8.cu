// Instantiations of the grouped GEMM engine with fp8 weights: the rows of gemm_configs.def
// whose weights are fp8_block (one TU per weight format keeps each compile under a minute).
#include "gemm/sm90_grouped_gemm.cuh"

namespace fusedmoe::detail {

// A template (not an explicit specialization), so the rows of the other weight format are
// discarded statements that are never instantiated here.
template <GemmWeights kW>
bool launch_grouped_gemm_of(GemmConfigId id, const GroupedGemmParams& p, int num_sms,
                            cudaStream_t stream) {
  switch (id) {
#define FMOE_GG(name, bt, stages, weights, rows, epi)                                         \
  case GemmConfigId::name:                                                                    \
    if constexpr (GemmWeights::weights == kW) {                                                  \
      launch_grouped_gemm_cfg<GemmConfig<bt, stages, GemmWeights::weights, GemmRows::rows,    \
                                         GemmEpilogue::epi>>(p, num_sms, stream);             \
      return true;                                                                            \
    }                                                                                         \
    return false;
#include "gemm/gemm_configs.def"
#undef FMOE_GG
    default: return false;
  }
}

template bool launch_grouped_gemm_of<GemmWeights::fp8_block>(GemmConfigId, const GroupedGemmParams&, int,
                                                       cudaStream_t);

}  // namespace fusedmoe::detail
