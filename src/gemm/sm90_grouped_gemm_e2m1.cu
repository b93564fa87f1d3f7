// Instantiations of the grouped GEMM engine with NVFP4 (e2m1) weights and bf16 activations: the
// rows of gemm_configs.def whose weights are e2m1 (see launch_grouped_gemm_of in
// sm90_grouped_gemm.cuh).
#include "gemm/sm90_grouped_gemm.cuh"

namespace fusedmoe::detail {

template bool launch_grouped_gemm_of<GemmWeights::e2m1>(GemmConfigId, const GroupedGemmParams&, int,
                                                       cudaStream_t);

}  // namespace fusedmoe::detail
