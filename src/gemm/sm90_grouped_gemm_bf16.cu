// Instantiations of the grouped GEMM engine with bf16 weights: the rows of gemm_configs.def
// whose weights are bf16 (see launch_grouped_gemm_of in sm90_grouped_gemm.cuh).
#include "gemm/sm90_grouped_gemm.cuh"

namespace fusedmoe::detail {

template bool launch_grouped_gemm_of<GemmWeights::bf16>(GemmConfigId, const GroupedGemmParams&, int,
                                                       cudaStream_t);

}  // namespace fusedmoe::detail
