// Instantiations of the NVFP4 GEMV: one per line of gemv_configs.def, and the switch over them.
#include "gemv/sm90_gemv.cuh"

namespace fusedmoe::detail {

void launch_gemv(GemvConfigId id, const GemvParams& p, size_t smem_bytes, cudaStream_t stream) {
  switch (id) {
#define FMOE_GEMV(name, mode, mt, wm, wk, stages) \
  case GemvConfigId::name:                        \
    return launch_gemv_nvfp4<GemvConfig<mode, mt, wm, wk, stages>>(p, smem_bytes, stream);
#define FMOE_GEMV_GENERIC(name, mode) \
  case GemvConfigId::name:            \
    return launch_gemv_generic<mode>(p, stream);
#include "gemv/gemv_configs.def"
#undef FMOE_GEMV
#undef FMOE_GEMV_GENERIC
    default: break;
  }
  FMOE_REQUIRE(false, "gemv: unknown config id %d", int(id));
}

}  // namespace fusedmoe::detail
