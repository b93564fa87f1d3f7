// The 4-bit layer's decode GEMVs (sm90_decode_gemv.cuh), compiled once.
#include "layer/sm90_decode_gemv.cuh"

namespace fusedmoe::detail {

void launch_decode_gemv_up(const DecodeGemvParams& p, int num_sms, cudaStream_t stream) {
  launch_decode_gemv_impl(true, p, num_sms, stream);
}
void launch_decode_gemv_down(const DecodeGemvParams& p, int num_sms, cudaStream_t stream) {
  launch_decode_gemv_impl(false, p, num_sms, stream);
}

}  // namespace fusedmoe::detail
