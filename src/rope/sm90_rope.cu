// Instantiations of RoPE: one per line of rope_configs.def, and the switch over them.
#include "rope/sm90_rope.cuh"

namespace fusedmoe::detail {

void launch_rope(RopeConfigId id, const RopeParams& p, const RopeGrid& g, cudaStream_t stream) {
  switch (id) {
#define FMOE_ROPE(name, dtype, vec_bytes) \
  case RopeConfigId::name:                \
    return launch_rope_cfg<RopeConfig<dtype, vec_bytes>>(p, g, stream);
#include "rope/rope_configs.def"
#undef FMOE_ROPE
    default: break;
  }
  FMOE_REQUIRE(false, "rope: unknown config id %d", int(id));
}

}  // namespace fusedmoe::detail
