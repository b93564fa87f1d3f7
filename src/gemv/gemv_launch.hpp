// Internal interface between the host side of the NVFP4 GEMV (gemv.cpp: validation, config
// choice) and its kernels (sm90_gemv.cu): the config table, the kernel parameters, the shared
// memory layout (computed identically on host and device) and the launch entry point.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fusedmoe/gemv.hpp"

#if defined(__CUDACC__)
#define FMOE_HD __host__ __device__
#else
#define FMOE_HD
#endif

namespace fusedmoe::detail {

/// batched: one matrix per CTA row of the grid (blockIdx.y = l), one B column (b_l);
/// grouped: the MoE decode form, a CTA walks every distinct expert its token group selected.
enum class GemvMode : uint8_t { batched, grouped };

enum class GemvConfigId : int {
#define FMOE_GEMV(name, mode, mt, wm, wk, stages) name,
#define FMOE_GEMV_GENERIC(name, mode) name,
#include "gemv/gemv_configs.def"
#undef FMOE_GEMV
#undef FMOE_GEMV_GENERIC
  count
};

struct GemvConfigInfo {
  const char* name = "";
  GemvMode mode = GemvMode::batched;
  bool generic = false;  ///< the fallback kernel: any K % 16 == 0, any strides, fp32 CUDA cores
  int mt = 0, wm = 0, wk = 0, stages = 0;
  int threads() const { return generic ? kGenericThreads : 32 * wm * wk; }
  /// Rows per CTA: batched MT m16 tiles per warp; grouped the same 16 rows of MT experts.
  int block_m() const { return generic ? kGenericThreads / 32 : (mode == GemvMode::grouped ? 16 : 16 * mt) * wm; }
  static constexpr int kGenericThreads = 256;  // one warp per output row
};
GemvConfigInfo gemv_config_info(GemvConfigId id);
/// The id of a config name, or GemvConfigId::count when no gemv config has that name.
GemvConfigId gemv_config_by_name(const std::string& name);

// ---- the kernels' parameters (one POD, passed by value as a __grid_constant__) ----------------
enum class GemvOut : uint8_t { f16, bf16, f32 };

struct GemvParams {
  int M = 0;          ///< rows of each matrix (batched M; grouped N)
  int K = 0;          ///< reduction length, a multiple of 16
  int L = 0;          ///< batched: matrices; grouped: experts E
  // A (the NVFP4 matrices / experts), strides in bytes
  const uint8_t* a = nullptr;
  int64_t a_mat_stride = 0, a_row_stride = 0;
  const uint8_t* sfa = nullptr;
  int64_t sfa_mat_stride = 0, sfa_row_stride = 0;
  const float* a_global = nullptr;
  int64_t a_global_stride = 0;  ///< elements
  // B: batched b_l (NVFP4 or bf16) / grouped x_t (bf16); strides in elements of its dtype
  bool b_nvfp4 = false;
  const void* b = nullptr;
  int64_t b_stride = 0;
  const uint8_t* sfb = nullptr;
  int64_t sfb_stride = 0;
  const float* b_global = nullptr;
  int64_t b_global_stride = 0;
  // grouped routing
  const int32_t* ids = nullptr;
  int64_t ids_stride = 0;
  const float* route_w = nullptr;
  int64_t route_w_stride = 0;
  int T = 0, top_k = 0;
  int tokens_per_cta = 0;  ///< token group of one grid row (blockIdx.y), <= 8
  int* bad_id_count = nullptr;
  // C: batched c[l, m] / grouped y[t, n], strides in elements
  void* c = nullptr;
  GemvOut c_dtype = GemvOut::f16;
  int64_t c_stride_l = 0, c_stride_m = 0;
  bool pdl = false;
};

// ---- shared memory of the fast kernels (offsets in bytes) -------------------------------------
// B operand rows: K padded to whole warp steps (128 values) as fp16 in the mma's k order, 16 bytes
// per group of 8 values. Group q sits at unit q + q / 8 (a 16-byte gap every 128 bytes) and a row
// spans a number of units = 2 mod 8: the four lanes t of a quarter warp (groups 4t + j) and the
// two token rows of a quarter warp (grouped) then hit distinct banks. The raw bytes of a bf16 row
// are copied (cp.async) into the same units and converted in place; an NVFP4 b is copied into its
// own raw area first.
struct GemvSmem {
  uint32_t b_row_bytes = 0;
  uint32_t b_off = 0;     ///< (rows, b_row_bytes): rows = 1 (batched) or tokens_per_cta
  uint32_t raw_off = 0;   ///< batched NVFP4 b: packed values (K/2) then block scales (K/16)
  uint32_t red_off = 0;   ///< (wk, block_m, 8 or 1 columns) f32 partial sums of the k-split warps
  uint32_t ent_off = 0;   ///< grouped: (3, tokens * top_k) i32/f32: entry id, route weight, slot
  uint32_t list_off = 0;  ///< grouped: (tokens * top_k) i32 distinct experts, first-use order
  uint32_t coef_off = 0;  ///< grouped: (tokens * top_k, 8) f32 weight of each expert per token
  uint32_t misc_off = 0;  ///< 64 words: amax reduction, output factors, expert count
  uint32_t total = 0;
};

FMOE_HD inline int64_t gemv_k_padded(int64_t K) { return (K + 127) / 128 * 128; }
/// 16-byte unit of B group q within its row.
FMOE_HD inline uint32_t gemv_b_unit(uint32_t q) { return q + (q >> 3); }

FMOE_HD inline GemvSmem gemv_smem_layout(bool grouped, int block_m, int wk, int64_t K, int tokens,
                                         int top_k) {
  GemvSmem s;
  const int rows = grouped ? tokens : 1;
  const int n_ent = grouped ? tokens * top_k : 0;
  const uint32_t units = gemv_b_unit(uint32_t(gemv_k_padded(K) / 8));  // 9/8 of the groups
  s.b_row_bytes = (units + ((2u - units) & 7u)) * 16u;                 // units = 2 mod 8
  s.b_off = 0;
  s.raw_off = s.b_off + uint32_t(rows) * s.b_row_bytes;
  const uint32_t raw_bytes = grouped ? 0u : uint32_t((K / 2 + K / 16 + 15) / 16 * 16);
  s.red_off = s.raw_off + raw_bytes;
  s.ent_off = s.red_off + uint32_t(wk * block_m * (grouped ? 8 : 1) * 4);
  s.list_off = s.ent_off + uint32_t(3 * n_ent * 4);
  s.coef_off = s.list_off + uint32_t(n_ent * 4);
  s.misc_off = s.coef_off + uint32_t(n_ent * 8 * 4);
  s.total = s.misc_off + 64 * 4;
  return s;
}

/// Enqueues config `id` on `stream` with `smem_bytes` of dynamic shared memory (fast configs) and
/// the grid the config implies; sm90_gemv.cu switches over gemv_configs.def.
void launch_gemv(GemvConfigId id, const GemvParams& p, size_t smem_bytes, cudaStream_t stream);

// ---- config choice (pure host function, unit-tested without a GPU) ---------------------------
struct GemvProblem {
  GemvMode mode = GemvMode::batched;
  int64_t M = 0, K = 0;
  int64_t L = 0;              ///< batched: matrices
  int64_t T = 0, top_k = 0;   ///< grouped: tokens, routes per token
  int num_sms = 132;
  size_t smem_optin = 227 * 1024;  ///< max dynamic shared memory per block
  bool fast_ok = true;        ///< alignment / stride / K conditions of the fast kernels hold
  std::string fast_why_not;   ///< why not, when !fast_ok
};

struct GemvChoice {
  GemvConfigId id = GemvConfigId::count;
  std::string reason;
  int tokens_per_cta = 0;  ///< grouped
  size_t smem_bytes = 0;   ///< fast configs: dynamic shared memory per CTA
};

/// Chooses the config (reason on each branch). `forced` (FMOE_FORCE_CONFIG) names a config to
/// use instead; a name of another op's config is ignored, a gemv config that cannot run this
/// problem throws Error.
GemvChoice select_gemv_config(const GemvProblem& p, const char* forced = nullptr);

/// The config the public call would run for these arguments (validates them; launches nothing).
/// For benchmarks and tests.
GemvChoice plan_gemv_nvfp4(const GemvNvfp4Args& args);
GemvChoice plan_moe_gemv_nvfp4(const MoeGemvNvfp4Args& args);

}  // namespace fusedmoe::detail
