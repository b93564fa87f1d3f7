// Launcher of stage 4 (finalize); the only TU that includes its kernel.
#include "finalize/sm90_finalize.cuh"

#include "common/cuda_check.hpp"
#include "common/launch.hpp"

namespace fusedmoe::detail {

namespace {
template <typename RowT>
bool launch_rows(const FinalizeParams& p, cudaStream_t stream) {
  using Cfg = FinalizeRowsConfig;
  const size_t smem = size_t(Cfg::kStages) * p.k * Cfg::kCW * sizeof(RowT);
  if (smem > 227 * 1024) return false;
  auto kernel = finalize_rows_kernel<RowT>;
  FMOE_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  const int64_t items = int64_t(p.T) * ((p.N + Cfg::kCW - 1) / Cfg::kCW);
  const int grid = int((items + Cfg::kItemsPerCta - 1) / Cfg::kItemsPerCta);
  launch_pdl(kernel, dim3(grid), dim3(Cfg::kThreads), smem, stream, p);
  FMOE_CHECK_LAUNCH("finalize_rows_kernel", stream);
  return true;
}
}  // namespace

void launch_finalize(const FinalizeParams& p, cudaStream_t stream) {
  const int64_t threads = int64_t(p.T) * (p.N / FinalizeConfig::kCols);
  if (threads <= 0) return;
  // The bulk-copy kernel (FMOE_FINALIZE_BULK: 0 never, 2 for any sums over rows, 1 the rule).
  // The rule takes it for bf16 rows in slot order (the down GEMM's staged twin, from 128 routes
  // per expert), the one case where it measured faster (H200, session 40, finalize at T=8192:
  // deepseek-v3 0.94, qwen3-30b-a3b 0.97, qwen3.5-35b-a3b 0.98). It lost on fp32 rows
  // (deterministic mode: 1.15-1.18x at T=2048, 1.02-1.04x at T=8192 on qwen) and on bf16 rows
  // by route (deepseek-v3 T=2048: 1.05x).
  const int bulk = knobs().finalize_bulk;
  const bool rows = p.deterministic && p.route_slot && p.k <= FinalizeRowsConfig::kMaxK;
  const bool rule = p.rows16 && p.route_row;
  if (rows && (bulk == 2 || (bulk == 1 && rule)) &&
      (p.rows16 ? launch_rows<__nv_bfloat16>(p, stream) : launch_rows<float>(p, stream)))
    return;
  const int grid = int((threads + FinalizeConfig::kThreads - 1) / FinalizeConfig::kThreads);
  launch_pdl(finalize_kernel, dim3(grid), dim3(FinalizeConfig::kThreads), 0, stream, p);
  FMOE_CHECK_LAUNCH("finalize_kernel", stream);
}

}  // namespace fusedmoe::detail
