// Instantiations of the fused RMSNorm + quantize: each line of norm_configs.def for each output
// form, and the switch over them.
#include "norm/sm90_norm.cuh"

namespace fusedmoe::detail {

namespace {
template <NormOut kOut>
void launch_form(NormConfigId id, int threads, const NormParams& p, cudaStream_t stream) {
  switch (id) {
#define FMOE_NORM(name, chunks, max_threads) \
  case NormConfigId::name:                   \
    return launch_norm_rows<NormConfig<chunks, max_threads>, kOut>(p, threads, stream);
#define FMOE_NORM_GENERIC(name) \
  case NormConfigId::name:      \
    return launch_norm_generic<kOut>(p, stream);
#include "norm/norm_configs.def"
#undef FMOE_NORM
#undef FMOE_NORM_GENERIC
    default: break;
  }
  FMOE_REQUIRE(false, "rmsnorm_quant: unknown config id %d", int(id));
}
}  // namespace

void launch_norm(NormConfigId id, NormOut form, int threads, const NormParams& p, cudaStream_t stream) {
  switch (form) {
    case NormOut::bf16: return launch_form<NormOut::bf16>(id, threads, p, stream);
    case NormOut::fp8: return launch_form<NormOut::fp8>(id, threads, p, stream);
    case NormOut::nvfp4: return launch_form<NormOut::nvfp4>(id, threads, p, stream);
  }
  FMOE_REQUIRE(false, "rmsnorm_quant: unknown output form %d", int(form));
}

}  // namespace fusedmoe::detail
