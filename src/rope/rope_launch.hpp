// Internal interface between the host side of RoPE (rope.cpp: validation, config and grid
// choice) and its kernels (sm90_rope.cu): the config table, the kernel parameters, the grid plan
// and the launch entry point.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fusedmoe/rope.hpp"

#if defined(__CUDACC__)
#define FMOE_ROPE_HD __host__ __device__
#else
#define FMOE_ROPE_HD
#endif

namespace fusedmoe::detail {

enum class RopeConfigId : int {
#define FMOE_ROPE(name, dtype, vec_bytes) name,
#include "rope/rope_configs.def"
#undef FMOE_ROPE
  count
};

struct RopeConfigInfo {
  const char* name = "";
  DType dtype = DType::bf16;
  int vec_bytes = 0;  ///< width of every q / k load and store
};
RopeConfigInfo rope_config_info(RopeConfigId id);
/// The id of a config name, or RopeConfigId::count when no rope config has that name.
RopeConfigId rope_config_by_name(const std::string& name);

// ---- work decomposition (shared by the grid plan and the kernel) --------------------------------
// A work item is two vectors of one head that hold the x and the y of the same V pairs (V =
// vector bytes / element bytes); items_per_head = rope_dim / (2 V). A CTA takes a tile of
// tokens_per_cta tokens x items_per_cta items of each, every thread kRopeItemsPerThread items.
constexpr int kRopeItemsPerThread = 2;  ///< 2 items = 4 vectors of loads in flight per thread
constexpr int kRopeMaxThreads = 256;
constexpr int kRopeSlotsPerCta = kRopeItemsPerThread * kRopeMaxThreads;  ///< items of a full CTA
constexpr int kRopeMinSlots = 2 * 32;     ///< items of the smallest CTA (one warp)
constexpr int kRopeMaxStagedFloats = 4096;  ///< cos/sin floats one CTA stages (16 KB)
constexpr int kRopeMaxRopeDim = kRopeMaxStagedFloats;  ///< one cache row must fit

/// Dynamic shared memory of a CTA: its tokens' cos/sin rows (f32) then their row indices (i64).
FMOE_ROPE_HD inline size_t rope_smem_bytes(int tokens_per_cta, int rope_dim) {
  return size_t(tokens_per_cta) * (size_t(rope_dim) * 4 + 8);
}

// ---- the kernels' parameters (one POD, passed by value as a __grid_constant__) ----------------
struct RopeParams {
  // q / k point at the first rope element (head 0 of token 0 + head_dim - rope_dim); strides in
  // elements. k == nullptr or num_k_heads == 0: no k.
  void* q = nullptr;
  int64_t q_tok_stride = 0, q_head_stride = 0;
  void* k = nullptr;
  int64_t k_tok_stride = 0, k_head_stride = 0;
  int num_q_heads = 0, num_k_heads = 0;
  int T = 0;
  const void* positions = nullptr;
  int64_t positions_stride = 0;  ///< elements
  bool positions_i64 = false;
  const float* cache = nullptr;  ///< [max_position, rope_dim], row-major
  int64_t max_position = 0;
  int rope_dim = 0;
  bool neox = true;
  bool inverse = false;
  int* bad_position_count = nullptr;
  bool pdl = false;
  // the grid plan (RopeGrid)
  int items_per_head = 0;
  int items_per_token = 0;  ///< (num_q_heads + num_k_heads) * items_per_head
  int items_per_cta = 0;
  int tokens_per_cta = 0;
};

/// Launch shape: grid (blocks_x token tiles, blocks_y item ranges), threads per CTA.
struct RopeGrid {
  int64_t blocks_x = 0;
  int blocks_y = 0;
  int threads = 0;
  int tokens_per_cta = 0;
  int items_per_cta = 0;
  size_t smem_bytes = 0;
};

/// Enqueues config `id` on `stream`; sm90_rope.cu switches over rope_configs.def.
void launch_rope(RopeConfigId id, const RopeParams& p, const RopeGrid& g, cudaStream_t stream);

// ---- config and grid choice (pure host functions, unit-tested without a GPU) ------------------
struct RopeProblem {
  DType dtype = DType::bf16;
  int64_t T = 0;
  int64_t heads = 0;         ///< q heads + k heads
  int rope_dim = 0;
  int max_vec_bytes = 16;    ///< the widest vector the addresses, strides and rope_dim allow
  std::string vec_why;       ///< why not 16, when max_vec_bytes < 16
  int num_sms = 132;
};

struct RopeChoice {
  RopeConfigId id = RopeConfigId::count;
  std::string reason;
  RopeGrid grid;
};

/// The grid for `vec_bytes`-wide vectors (reasons in rope.cpp).
RopeGrid rope_grid(const RopeProblem& p, int vec_bytes);

/// Chooses the config (the widest vector the layout allows) and the grid. `forced`
/// (FMOE_FORCE_CONFIG) names a config to use instead; a name of another op's config is ignored,
/// a rope config this problem cannot run throws Error.
RopeChoice select_rope_config(const RopeProblem& p, const char* forced = nullptr);

/// The config the public call would run for these arguments (validates them, reads the device's
/// SM count; launches nothing). For benchmarks and tests.
RopeChoice plan_rope(const RopeArgs& args);

}  // namespace fusedmoe::detail
