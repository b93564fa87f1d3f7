// Internals of the MoE layer (include/fusedmoe/layer.hpp): the prepared weights, the workspace
// carve-up and the plan of one forward call. The layer is the only place that knows the order of
// the stages:
//   src/route/     route_quant   routing (+ the shared chunks as extra columns) + the rows GEMM 1
//                                reads (fp8 per 128, or bf16 when the weight goes on the input)
//   src/schedule/  schedule      counts, slots, token-tile table, compact route offsets
//   src/gemm/      GEMM 1        gate/up: gathered rows, swiglu epilogue -> h (fp8 per 64 or bf16)
//   src/gemm/      GEMM 2        down: h's compact rows by TMA, combine epilogue -> fp32 sums
//   src/finalize/  finalize      fp32 sums -> bf16 y
// Shared experts are extra experts E .. E + C - 1 (chunks of the shared MLP's intermediate, I_pad
// each) that every token selects with weight 1 or Qwen's sigmoid gate.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "common/device_buffer.hpp"
#include "finalize/finalize.hpp"
#include "fusedmoe/layer.hpp"
#include "gemm/grouped_gemm.hpp"
#include "layer/decode_gemv.hpp"
#include "route/route_quant.hpp"
#include "schedule/schedule.hpp"

namespace fusedmoe {

struct MoeLayer::Impl {
  MoeConfig cfg;
  int device = 0;
  bool fp8 = true;           // fp8_block weights and activations; else bf16 activations
  bool e2m1 = false;         // NVFP4 or MXFP4 weights (prepared e2m1 blocks), bf16 activations
  bool mx = false;           // of those, MXFP4 (UE8M0 scales per 32, no global scales)
  int E = 0, k = 0;          // routed experts, routed top-k
  int C = 0;                 // shared chunks (always-selected extra experts)
  int E_total = 0, k_total = 0;
  int H = 0, I = 0, S = 0;
  int I_pad = 0;             // I rounded up to 64: the intermediate's row length
  int NT1 = 0;               // GEMM 1 weight tiles per expert: I_pad / 64 (128 rows: 64 gate/up pairs)
  int NB2 = 0;               // GEMM 2 weight tiles per expert: ceil(H / 128)
  bool on_input = false;     // Llama 4: the routing weight multiplies the token before the expert
  // Prepared weights (device):
  DeviceBuffer w13;          // [E_total, NT1 * 128, H]: per 16 rows, 8 gate rows then their 8 up rows
  DeviceBuffer w13_scale;    // fp8: [E_total, NT1, ceil(H/128), 16] one scale per 8-row group
  bool w13_two_scales = false;  // fp8: per tile and k-block, the 8 gate groups share one scale and
                                // the 8 up groups another (GEMM 1 may put tokens on wgmma's M side)
  bool w13_thread_order = false;  // w13's gate/up pairs in thread order (grouped_gemm.hpp:
                                  // swiglu_intermediate; fp8 with w13_two_scales), else blocked
  DeviceBuffer w2;           // [E_total, H, I_pad], rows paired (GroupedGemmParams::paired_rows)
  DeviceBuffer w2_scale;     // fp8: [E_total, NB2, ceil(I_pad/128)]
  // e2m1: w13 / w2 hold e2m1 blocks (src/gemm/e2m1_layout.hpp) [E_total, NT1 | NB2, KB] in the
  // same prepared row orders, and these each prepared row's global scale * 2^26
  DeviceBuffer w13_row_scale;  // f32 [E_total, NT1 * 128]
  DeviceBuffer w2_row_scale;   // f32 [E_total, NB2 * 128]
  DeviceBuffer b13;          // f32 [E_total, NT1 * 128] in w13's prepared row order, or empty
  DeviceBuffer b2;           // f32 [E_total, H], or empty
  DeviceBuffer routing_bias; // f32 [E], or empty
  DeviceBuffer shared_gate;  // bf16 [H], or empty
  CUtensorMap w13_desc{}, w2_desc{};
};

namespace detail {

struct LayerWorkspace {
  int32_t* status = nullptr;         // [kStatusWords]
  int32_t* counts = nullptr;         // [E_total]
  int32_t* tile_offsets = nullptr;   // [E_total + 1]
  int32_t* route_offsets = nullptr;  // [E_total + 1]
  int32_t* topk_ids = nullptr;       // [T, k_total]
  float* topk_weights = nullptr;     // [T, k_total]
  int32_t* route_slot = nullptr;     // [T * k_total]
  int32_t* route_row = nullptr;      // fast mode's bf16 rows: [T * k_total], each kept route's row
                                     // when the down GEMM writes them in slot order (sorted_rows)
  int32_t* sorted_route = nullptr;   // [E_total * T]
  uint8_t* rows = nullptr;           // GEMM 1 input: fp8 [T_rows, H] or bf16 [T_rows, H]
  float* row_scales = nullptr;       // fp8: [T_rows, ceil(H/128)]
  uint8_t* h = nullptr;              // the intermediate: [T * k_total, I_pad] fp8 or bf16
  float* h_scale = nullptr;          // fp8: [T * k_total, I_pad / h_block] (sized for 64)
  float* acc = nullptr;              // fast: [T, H]; deterministic: [T * k_total, H]
  float* split_partials = nullptr;   // GEMM 1 split K (decode): [kMaxSplit, kSplitMaxTiles, 2048]
  int32_t* split_counters = nullptr; // [kSplitMaxTiles]
};

/// Lays the workspace out from `base` (nullptr: sizes only). Returns the bytes needed.
size_t layer_workspace_layout(const MoeLayer::Impl& L, int T, ReductionMode mode, void* base,
                              LayerWorkspace* ws);

struct LayerPlan {
  int T = 0;  // 0: nothing to launch
  bool fused_schedule = false;
  GemmConfigId up_config = GemmConfigId::count, down_config = GemmConfigId::count;
  int split = 1;  // GEMM 1's split K
  int h_block = 64;  // fp8: columns per scale of the intermediate h (64, or 128: layer.cpp says when)
  std::string config_reason;
  int num_sms = 0;
  LayerWorkspace ws;
  RouteQuantParams route_quant{};
  ScheduleParams schedule{};
  GroupedGemmParams up{}, down{};
  // 4-bit weights at T <= FMOE_GEMV_MAX_T: both GEMMs as the decode GEMVs (decode_gemv.hpp)
  // instead of up/down, no schedule; h rows and deterministic rows indexed by route.
  bool gemv = false;
  DecodeGemvParams gemv_up{}, gemv_down{};
  FinalizeParams finalize{};
};

/// Validates `args` (throws Error naming the argument) and builds the plan; does not synchronize
/// (except the optional host check of caller-given ids).
LayerPlan plan_layer_forward(const MoeLayer::Impl& L, const MoeForwardArgs& args, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream);

enum class LayerStage { route_quant, schedule, gate_up, down, finalize };
constexpr LayerStage kLayerStages[] = {LayerStage::route_quant, LayerStage::schedule,
                                       LayerStage::gate_up, LayerStage::down, LayerStage::finalize};
const char* layer_stage_name(LayerStage s);
void run_layer_stage(const LayerPlan& plan, LayerStage stage, cudaStream_t stream);

}  // namespace detail
}  // namespace fusedmoe
