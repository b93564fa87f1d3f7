// Instantiations of the grouped GEMM engine with fp8 weights: the rows of gemm_configs.def
// whose weights are fp8_block (see launch_grouped_gemm_of in sm90_grouped_gemm.cuh).
#include "gemm/sm90_grouped_gemm.cuh"

namespace fusedmoe::detail {

template bool launch_grouped_gemm_of<GemmWeights::fp8_block>(GemmConfigId, const GroupedGemmParams&, int,
                                                       cudaStream_t);

}  // namespace fusedmoe::detail
