// The engine's launcher: dispatches a config id to the TU that instantiates it.
#include "gemm/grouped_gemm.hpp"

#include "fusedmoe/error.hpp"

namespace fusedmoe::detail {

template <GemmWeights kW>
bool launch_grouped_gemm_of(GemmConfigId id, const GroupedGemmParams& p, int num_sms,
                            cudaStream_t stream);

void launch_grouped_gemm(GemmConfigId id, const GroupedGemmParams& p, int num_sms,
                         cudaStream_t stream) {
  const GemmConfigInfo info = gemm_config_info(id);  // throws on an unknown id
  bool launched = false;
  switch (info.weights) {
    case GemmWeights::fp8_block:
      launched = launch_grouped_gemm_of<GemmWeights::fp8_block>(id, p, num_sms, stream);
      break;
    case GemmWeights::bf16:
      launched = launch_grouped_gemm_of<GemmWeights::bf16>(id, p, num_sms, stream);
      break;
    case GemmWeights::e2m1:
      launched = launch_grouped_gemm_of<GemmWeights::e2m1>(id, p, num_sms, stream);
      break;
  }
  FMOE_REQUIRE(launched, "grouped_gemm: config %s is not compiled into this build", info.name);
}

}  // namespace fusedmoe::detail
