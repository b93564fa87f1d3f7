// CPU reference of every stage of the MoE layer: the oracle the GPU kernels are tested against.
//
// Plain C++, double accumulation, fed the same quantized values the kernels see (codes and
// scales, never the pre-quantization floats), so a test tolerance only has to cover output
// rounding and accumulation order. The quantizers themselves are the library's host codecs
// (include/fusedmoe/formats.hpp), which are bit-exact with the device quantizers.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "fusedmoe/config.hpp"

namespace fusedmoe {
struct CheckpointLayer;
}

namespace fusedmoe::ref {

// ================================================================================================
// Routing: logits [T, E] fp32 -> per token k (expert id, weight) pairs.
// ================================================================================================
struct Routing {
  int num_tokens = 0, top_k = 0;
  std::vector<int32_t> ids;    ///< [T, k], best first; ties go to the lower expert id
  std::vector<float> weights;  ///< [T, k], routed_scaling_factor applied
};

/// `bias` is the e_score_correction_bias (sigmoid_grouped_topk) or the router bias
/// (topk_softmax), [E]; nullptr when the config has none.
Routing route(const RoutingConfig& cfg, const float* logits, int T, int E, int k,
              const float* bias);

// ================================================================================================
// Permutation: group the T*k routes by expert.
// A route id is t*k + j (token t's j-th choice).
// ================================================================================================
struct Permutation {
  std::vector<int32_t> counts;            ///< [E] routes per expert
  std::vector<int32_t> offsets;           ///< [E+1] exclusive prefix sum of counts
  std::vector<int32_t> sorted_route_ids;  ///< [T*k] expert-major; ascending within an expert
  std::vector<int32_t> route_slot;        ///< [T*k] position of each route in sorted order
};
Permutation permute(const int32_t* ids, int T, int k, int E);

// ================================================================================================
// Quantized operands. decode_row returns the exact real values the kernel multiplies, in double.
// ================================================================================================
/// E matrices of [N, K] (expert weights), K the reduction dimension.
struct WeightSet {
  Precision precision = Precision::bf16;
  int E = 0, N = 0, K = 0;
  std::vector<uint16_t> bf16;         ///< bf16: [E, N, K]
  std::vector<uint8_t> q;             ///< fp8: [E, N, K] e4m3; nvfp4, mxfp4: [E, N, K/2] packed e2m1
  std::vector<float> scale;           ///< fp8: [E, ceil(N/128), ceil(K/128)] (w ~= q * scale)
  std::vector<uint8_t> block_scale;   ///< nvfp4: [E, N, K/16] e4m3; mxfp4: [E, N, K/32] ue8m0
  std::vector<float> global_scale;    ///< nvfp4: [E, global_groups]
  int global_groups = 1;              ///< nvfp4: global scales per expert, each for N/groups
                                      ///< consecutive rows (checkpoints scale gate and up apart)

  void decode_row(int e, int n, double* out) const;  ///< out[K]
  size_t bytes_per_expert() const;                    ///< values + scales
};
/// Progress of a long step, reported on the calling thread: (units done, units in all), with
/// `done` growing to `total`. Never changes what the step computes.
using ProgressFn = std::function<void(int64_t done, int64_t total)>;

/// Quantizes float weights w [E, N, K] (nvfp4: one global scale per expert from its amax;
/// mxfp4: fmt::quantize_mxfp4).
WeightSet make_weights(Precision p, const float* w, int E, int N, int K);
/// Same, with expert e's float values [N, K] written by expert_values(e, buffer) one expert at a
/// time (random weights for a whole model never exist as floats all at once; the one expert's
/// buffer, N*K floats, does). `progress`, if set, gets (experts done, E) after each expert.
WeightSet make_weights(Precision p, int E, int N, int K,
                       const std::function<void(int, float*)>& expert_values,
                       const ProgressFn& progress = {});

/// M activation rows of K values.
struct ActRows {
  Precision precision = Precision::bf16;
  int M = 0, K = 0;
  std::vector<uint16_t> bf16;        ///< bf16: [M, K]
  std::vector<uint8_t> q;            ///< fp8: [M, K]; nvfp4: [M, K/2]
  std::vector<float> scale;          ///< fp8: [M, ceil(K/block)]
  int block = 128;                   ///< fp8: columns per scale
  std::vector<uint8_t> block_scale;  ///< nvfp4: [M, K/16]
  float global_scale = 1.0f;         ///< nvfp4: one for all rows

  void decode_row(int m, double* out) const;  ///< out[K]
};
/// Quantizes x [M, K] (already bf16-valued floats) the way the kernels quantize activations:
/// bf16 as is, fp8 per token per `fp8_block` columns (128 for the layer input, 64 for the FP8
/// layer's intermediate), nvfp4 with `nvfp4_global` (<= 0: from the amax of x).
ActRows make_acts(Precision p, const float* x, int M, int K, float nvfp4_global = 0.0f,
                  int fp8_block = 128);

// ================================================================================================
// Grouped GEMM: D[r, n] = sum_k A[r, k] * W[e(r), n, k] for rows sorted by expert.
// ================================================================================================
struct GemmResult {
  int rows = 0, cols = 0;
  std::vector<double> value;    ///< [rows, cols]
  std::vector<double> abs_sum;  ///< [rows, cols] sum_k |A*W|: scales the tolerance (if asked)
};
/// Row r of A belongs to the expert e with offsets[e] <= r < offsets[e+1] (offsets [E+1]).
GemmResult grouped_gemm(const ActRows& a, const WeightSet& w, const int32_t* offsets,
                        bool want_abs_sum);

/// The NVFP4 grouped GEMM (include/fusedmoe/grouped_gemm.hpp) on the CPU: for group g, rows r in
/// [offsets[g], offsets[g+1]): c[r, n] = a_global[g] * b_global[g] * sum_k dq(a)[r,k] * dq(b_g)[n,k]
/// with float64 sums of the exact dequantized products; dq(x) = e2m1 * e4m3 scale (per 16 along K).
/// a: [M, K/2] packed (even element in the low nibble), a_scale [M, K/16] e4m3 codes, a_global [G] (nullptr: 1),
/// offsets [G+1] (assumed valid here), b [G, N, K/2], b_scale [G, N, K/16], b_global [G]. Returns [M, N] fp32 (rows no group covers are 0).
std::vector<float> nvfp4_grouped_gemm(const uint8_t* a, const uint8_t* a_scale, const float* a_global,
                                      const int32_t* offsets, int G, int M, const uint8_t* b,
                                      const uint8_t* b_scale, const float* b_global, int N, int K);

// ================================================================================================
// Element-wise stages.
// ================================================================================================
/// gate_up [rows, 2I] -> out [rows, I]. swiglu: [gate | up] halves; swiglu_clamped: interleaved
/// (gate 2i, up 2i+1). fp32 math, as the kernel epilogue does it.
void activation(const ActivationConfig& cfg, const float* gate_up, int rows, int I, float* out);

/// y[t, :] = sum_j weights[t, j] * expert_out[slot(t*k + j), :], summed in j order, in double.
/// route_slot maps a route id to its row of expert_out (nullptr: row = route id, route order);
/// weights nullptr means 1 (weights already applied on the input).
void combine(const double* expert_out, const int32_t* route_slot, const float* weights, int T,
             int k, int H, double* y);

/// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w, per row of H, in double.
void rmsnorm(const float* x, const float* w, int rows, int H, float eps, float* y);

/// The fused RMSNorm + quantize (fusedmoe::rmsnorm_quant, include/fusedmoe/norm.hpp), row by row:
/// h = x, or bf16(x + residual) (one fp32 add, one rounding); inv_rms = 1 / sqrt(mean(h^2) + eps)
/// in double; y = h * inv_rms * w in double, rounded once to fp32. With `inv_rms_given` ([T], the
/// kernel's fp32 inv_rms) y is instead the kernel's own fp32 operations (h * inv_rms) * w, so the
/// outputs can be compared bit for bit. Then bf16(y), or y quantized by
/// fmt::quantize_fp8_per_token_128 / fmt::quantize_nvfp4 under norm.hpp's poison rules: a row
/// whose sum of squares is not finite in fp32 (here: a non-finite h, or a double sum above
/// FLT_MAX) has inv_rms NaN; a block with a NaN or Inf y has a NaN scale; a global scale that is
/// not positive and finite makes every NVFP4 scale NaN (0x7F) with codes 0.
/// x, residual: [T, H] bf16-valued floats (residual may be nullptr); w: [H] bf16-valued.
enum class NormOutForm { bf16, fp8, nvfp4 };
struct RmsNormQuantResult {
  int T = 0, H = 0;
  std::vector<float> h;             ///< [T, H] the normalized input (what residual becomes)
  std::vector<double> inv_rms;      ///< [T] in double (NaN: the row is poisoned)
  std::vector<float> y;             ///< [T, H] the fp32 values the quantizers see
  std::vector<uint16_t> out_bf16;   ///< bf16: [T, H] bits
  std::vector<uint8_t> q;           ///< fp8: [T, H] e4m3 codes; nvfp4: [T, H/2] e2m1 pairs
  std::vector<float> fp8_scale;     ///< fp8: [T, ceil(H/128)]
  std::vector<uint8_t> nvfp4_scale; ///< nvfp4: [T, H/16] e4m3 codes
};
RmsNormQuantResult rmsnorm_quant(const float* x, const float* residual, const float* w, int T, int H,
                                 float eps, NormOutForm form, float global_scale = 1.0f,
                                 const float* inv_rms_given = nullptr);

enum class RopeStyle { gptj_interleaved, neox };
/// Rotates the first rotary_dim of each head in place: x [T, heads, head_dim]; position[T];
/// angle_i = pos * theta^(-2i/rotary_dim). GPT-J pairs (2i, 2i+1); NeoX pairs (i, i + rd/2).
/// inverse rotates by -angle (undoes forward).
void rope(float* x, const int32_t* position, int T, int heads, int head_dim, int rotary_dim,
          float theta, RopeStyle style, bool inverse);

/// vLLM's cos_sin_cache [max_position, rope_dim] f32: row p holds cos(p * f_i) for i < rope_dim/2,
/// then sin(p * f_i), f_i = theta^(-2i/rope_dim); computed in double, rounded once to float.
std::vector<float> rope_cos_sin_cache(int max_position, int rope_dim, double theta);

/// The RoPE op (fusedmoe::rope, include/fusedmoe/rope.hpp) in double: rotates the LAST rope_dim
/// values of each head of x [T, heads, head_dim] (the values the kernel reads: bf16 / f16 / f32,
/// exact in float) with cos/sin from `cos_sin_cache` [max_position, rope_dim] (pair i uses
/// columns i and rope_dim/2 + i), pairs as `style` says, by -angle when `inverse`. A token whose
/// position is outside [0, max_position) keeps its values and is counted.
struct RopeFromCacheResult {
  std::vector<double> value;      ///< [T, heads, head_dim], before rounding to the storage type
  std::vector<double> abs_terms;  ///< per element |x * cos| + |y * sin| (0 where not rotated):
                                  ///< the scale of the fp32 rounding error, for the tolerance
  int64_t bad_positions = 0;
};
RopeFromCacheResult rope_from_cache(const float* x, int T, int heads, int head_dim, int rope_dim,
                                    const int64_t* positions, const float* cos_sin_cache,
                                    int64_t max_position, RopeStyle style, bool inverse);

// ================================================================================================
// One routed expert projection (the FP8 pipeline of src/moe): y = sum_j w_tj * quant(a_t) @ W_e^T.
// ================================================================================================
struct ProjectionResult {
  Routing routing;
  std::vector<double> y;        ///< [T, N] before the output rounding
  std::vector<double> abs_sum;  ///< [T, N] sum over routes and k of |w * a * W|: tolerance scale
};
/// Routes `logits` (unless `given` is set: then its ids/weights are used), quantizes each token
/// per 128 columns to FP8 (bf16(x * w) when the routing puts the weight on the input: then the
/// output is not weighted), multiplies with the expert weights `w` (any precision) and sums the k
/// routes of each token in choice order. x: [T, K] bf16-valued floats.
ProjectionResult moe_projection(const RoutingConfig& cfg, const float* x, const float* logits,
                                const float* bias, int T, int k, const WeightSet& w,
                                const Routing* given = nullptr);

// ================================================================================================
// The whole layer.
// ================================================================================================
/// All parameters of one MoE layer, already quantized to cfg's weight precision.
struct LayerWeights {
  MoeConfig cfg;
  WeightSet w13;                   ///< [E, 2I, H] gate/up (layout per cfg.activation)
  WeightSet w2;                    ///< [E, H, I] down
  std::vector<float> b13, b2;      ///< expert biases [E, 2I], [E, H] (cfg.expert_bias)
  std::vector<float> route_bias;   ///< [E] correction or router bias (cfg.routing)
  WeightSet shared_w13;            ///< [1, 2S, H] the shared experts as one MLP
  WeightSet shared_w2;             ///< [1, H, S]
  std::vector<float> shared_gate;  ///< [H] bf16 values (cfg.shared_expert_gate)
};

/// Seeded random weights: each tensor from its own counter-based stream, so the values do not
/// depend on the thread count. Weights ~ U(-1, 1) * sqrt(3 / K) before quantization.
/// `progress`, if set, gets (weight elements generated, in all) after each expert matrix (the
/// large presets take minutes on a few cores).
LayerWeights make_random_layer(const MoeConfig& cfg, uint64_t seed, const ProgressFn& progress = {});

/// The layer read from a checkpoint (load_moe_layer) as the reference takes it: codes and scales
/// as stored (fp8 blocks, nvfp4 values with weight_scale and the gate's and up's own
/// weight_scale_2), biases and the shared gate as floats. Takes `ckpt`'s buffers (each tensor is
/// released once converted, so host memory stays about one copy of the layer); `ckpt` is left
/// empty. Throws Error on a layer whose tensors do not match its config.
LayerWeights layer_from_checkpoint(CheckpointLayer&& ckpt);

struct LayerResult {
  Routing routing;
  std::vector<float> y;  ///< [T, H], bf16-rounded
};

/// The layer, stage by stage (docs/design.md has the data path):
///   route -> per route: a = x (or bf16(x*w) for weights on the input), quantized -> GEMM1 ->
///   + b13 -> activation (fp32) -> quantized (fp8: per h_block columns from fp32, as the GPU
///   epilogue does: 64, or 128 where the GPU layer's plan says so; bf16: rounded) -> GEMM2 -> + b2
///   -> weighted sum over the k routes + shared MLP (* sigmoid gate) -> bf16.
/// x: [T, H] bf16-valued floats; logits: [T, E] fp32.
LayerResult moe_layer(const LayerWeights& lw, const float* x, const float* logits, int T,
                      int h_block = 64);

/// Rows of `a` (bf16-valued floats, already in expert order), grouped by `offsets` [E + 1], through
/// GEMM 1 -> + b13 -> activation -> quantize (fp8 per h_block / bf16) -> GEMM 2 -> + b2: double
/// [rows, H]. The routed-expert chain of moe_layer, shared with the EP reference (ref/ep.cpp).
std::vector<double> expert_mlp(const MoeConfig& cfg, const WeightSet& w13, const WeightSet& w2,
                               const float* b13, const float* b2, const std::vector<float>& a,
                               const std::vector<int32_t>& offsets, int h_block = 64);

/// One dense SwiGLU MLP on rows of x (the shared expert path), fp32 outputs [T, H] (unrounded).
void mlp(const MoeConfig& cfg, const WeightSet& w13, const WeightSet& w2, const float* b13,
         const float* b2, const float* x, int T, std::vector<float>& out, int h_block = 64);

// ================================================================================================
// The layer split over R ranks by experts (issue 13; the plan: src/dist/ep_plan.hpp).
// ================================================================================================
/// How a token's results come back. rank_order: each destination returns one row per (token,
/// rank), the sum of its weighted routes, and the token's rank adds them in rank order (fewer
/// bytes; equal to moe_layer within one final rounding, bitwise where a token's routes all sit on
/// one rank, e.g. R = 1 or top-1). choice_order: each route's weighted row comes back and is summed
/// in choice order, as ref::combine does: bitwise equal to moe_layer.
enum class EpCombine { rank_order, choice_order };

/// One rank's own tokens: x [T, H] bf16-valued floats, logits [T, E].
struct EpRankTokens {
  const float* x = nullptr;
  const float* logits = nullptr;
  int T = 0;
};
struct EpLayerResult {
  std::vector<LayerResult> rank;  ///< [R]: each rank's routing of its tokens and its y [T_r, H]
  int64_t overflow_rows = 0;      ///< (token, rank) rows past max_tokens_per_rank, all sources
  int64_t overflow_routes = 0;    ///< the routes those rows carried (they add nothing to y)
};
/// R = ranks.size() ranks, each owning its ExpertPartition share of lw's experts: every rank routes
/// and dispatches its tokens, runs the experts it owns on the rows it received, returns the
/// results, and combines its tokens' results plus the shared MLP of its own tokens. fp8 / bf16
/// activations only (an nvfp4 activation's global scale is the amax of the whole batch).
EpLayerResult moe_layer_ep(const LayerWeights& lw, const std::vector<EpRankTokens>& ranks,
                           int max_tokens_per_rank, EpCombine combine);

}  // namespace fusedmoe::ref
