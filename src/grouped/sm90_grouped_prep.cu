// The NVFP4 grouped GEMM's preparation kernel (sm90_grouped_prep.cuh), compiled once.
#include "grouped/sm90_grouped_prep.cuh"

namespace fusedmoe::detail {

void launch_grouped_prep(const GroupedPrepParams& p, int num_sms, cudaStream_t stream) {
  launch_grouped_prep_impl(p, num_sms, stream);
}

}  // namespace fusedmoe::detail
