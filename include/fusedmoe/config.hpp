// fusedmoe: the description of one MoE layer, model presets, and Hugging Face config.json import.
#pragma once

#include <string>
#include <vector>

namespace fusedmoe {

/// How router logits become (expert id, weight) pairs for each token.
enum class RoutingFn {
  /// softmax over all experts (after optional tanh softcapping), top-k, optional renormalisation
  /// of the k weights to sum 1 (Qwen, Mixtral).
  softmax_topk,
  /// sigmoid scores; top-k chosen on score + correction bias inside the best `topk_group` of
  /// `num_groups` groups (group score: sum of its two best biased scores); weights are the
  /// unbiased scores, optionally renormalised (DeepSeek-V3, Kimi-K2).
  sigmoid_grouped_topk,
  /// top-1 on the logits, weight sigmoid(logit), applied to the token before the expert (Llama 4).
  sigmoid_top1_on_input,
  /// top-k on the logits (plus the router bias), then softmax over the k chosen (gpt-oss).
  topk_softmax,
};

struct RoutingConfig {
  RoutingFn fn = RoutingFn::softmax_topk;
  bool renormalize = true;            ///< softmax_topk / sigmoid_grouped_topk: weights sum to 1
  float softcap = 0.0f;               ///< softmax_topk: logits = cap*tanh(logits/cap) when > 0
  int num_groups = 1;                 ///< sigmoid_grouped_topk: expert groups (n_group)
  int topk_groups = 1;                ///< sigmoid_grouped_topk: groups kept (topk_group)
  bool correction_bias = false;       ///< sigmoid_grouped_topk: e_score_correction_bias present
  bool router_bias = false;           ///< topk_softmax: a bias [E] added to the logits
  float routed_scaling_factor = 1.0f; ///< final multiplier on every routing weight
};

enum class ActivationFn {
  swiglu,          ///< silu(gate) * up; gate/up stacked as [gate (I rows); up (I rows)]
  swiglu_clamped,  ///< gpt-oss: gate/up interleaved by row, gate<=limit, |up|<=limit,
                   ///< out = (up + 1) * gate * sigmoid(alpha * gate)
};

struct ActivationConfig {
  ActivationFn fn = ActivationFn::swiglu;
  float alpha = 1.702f;  ///< swiglu_clamped
  float limit = 7.0f;    ///< swiglu_clamped
};

/// Number format of a tensor class. Hopper has no FP4 tensor cores: nvfp4 weights are decoded
/// exactly to bf16 in the kernel, so nvfp4 halves the weight bytes of fp8, not the math.
enum class Precision {
  bf16,      ///< plain bf16
  fp8_block, ///< FP8 E4M3; weights one fp32 scale per 128x128 block, activations per token per 128
  nvfp4,     ///< E2M1 values, one E4M3 scale per 16 along K, one fp32 global scale per tensor
  mxfp4,     ///< E2M1 values, one UE8M0 (power-of-two) scale per 32 along K (OCP MX; gpt-oss);
             ///< weights only (decoded like nvfp4), with bf16 activations
};

const char* routing_fn_name(RoutingFn f);
const char* activation_fn_name(ActivationFn f);
const char* precision_name(Precision p);
/// Parses "bf16", "fp8", "fp8_block", "nvfp4", "mxfp4"; throws Error otherwise.
Precision parse_precision(const std::string& s);

/// The plausible range of every MoeConfig field. MoeConfig::validate() and the config.json import
/// reject a value outside it with a sentence naming the field, the value and the range. The sizes
/// must also be multiples of 16: the kernels step K and N by 16 (fp8 and bf16 as well as nvfp4).
/// Bounds are generous: the largest published MoE models are far inside them.
struct ConfigLimits {
  static constexpr int kSizeStep = 16;                 ///< hidden and intermediate sizes: multiples
  static constexpr int kMaxHidden = 1 << 16;           ///< H in [16, 65536]
  static constexpr int kMaxIntermediate = 1 << 18;     ///< I and the shared MLP's in [16, 262144]
  static constexpr int kMaxExperts = 4096;             ///< E in [1, 4096]
  static constexpr int kMaxTopK = 32;                  ///< top-k in [1, min(E, 32)]
  static constexpr int kMaxSharedExperts = 64;         ///< shared experts in [0, 64]
  static constexpr double kMinRoutedScale = 1e-3;      ///< routed_scaling_factor in [1e-3, 1e3]
  static constexpr double kMaxRoutedScale = 1e3;
  static constexpr double kMaxSoftcap = 1e3;           ///< softcap 0 (off) or in (0, 1e3]
  static constexpr double kMinSwigluLimit = 1e-2;      ///< clamped SwiGLU limit in [1e-2, 1e3]
  static constexpr double kMaxSwigluLimit = 1e3;
  static constexpr double kMinSwigluAlpha = 1e-2;      ///< clamped SwiGLU alpha in [1e-2, 1e2]
  static constexpr double kMaxSwigluAlpha = 1e2;
  /// config.json files are a few KB; a larger file (or text) is refused before parsing.
  static constexpr long long kMaxConfigJsonBytes = 4ll << 20;
};

/// One MoE layer. Sizes are per expert; weights are [E, 2*I, H] (gate/up) and [E, H, I] (down).
struct MoeConfig {
  std::string name;                  ///< preset name or the config.json's model_type
  int hidden = 0;                    ///< H
  int intermediate = 0;              ///< I, per routed expert
  int num_experts = 0;               ///< E
  int top_k = 0;
  int num_shared_experts = 0;        ///< 0 or more, fused into one MLP of shared_intermediate
  int shared_intermediate = 0;       ///< total intermediate size of the shared MLP
  bool shared_expert_gate = false;   ///< Qwen: shared output scaled by sigmoid(x . w_gate)
  bool expert_bias = false;          ///< gpt-oss: biases on gate/up and down projections
  RoutingConfig routing;
  ActivationConfig activation;
  Precision weight_precision = Precision::fp8_block;
  Precision activation_precision = Precision::fp8_block;

  /// Throws Error naming the first inconsistent field (a value outside ConfigLimits, a size not
  /// a multiple of 16, top-k > experts, groups not dividing experts, precision pairs we do not
  /// run, ...).
  void validate() const;
  /// One line: "qwen3.5-35b-a3b: H=2048 I=512 E=256 top-8 shared=1x512 softmax_topk(renorm) fp8_block/fp8_block"
  std::string summary() const;
};

/// Presets with real shapes and routing. The default is the first, "qwen3.5-35b-a3b".
const std::vector<MoeConfig>& model_presets();
/// Throws Error listing the valid names when `name` is unknown.
const MoeConfig& find_preset(const std::string& name);
const char* default_preset_name();

/// Reads the MoE fields of a Hugging Face config.json (qwen2_moe, qwen3_moe, qwen3_next,
/// qwen3_5_moe, deepseek_v3, kimi_k2, mixtral, gpt_oss, llama4 families; a nested
/// "text_config" is followed). Precision comes from "quantization_config" (fp8 128x128 blocks,
/// ModelOpt NVFP4, "mxfp4" as gpt-oss ships it; none means bf16) unless `precision_override` is
/// given (the CLI's --precision); a file in another format needs the override.
/// Throws Error with the file and field on malformed JSON, an unknown model_type, a missing,
/// mistyped, duplicated or out-of-range field (ConfigLimits), or an inconsistent value.
/// Integer fields take JSON integers and floats with an integer value (2048.0); numbers are read
/// independently of the C locale. `origin` names the text in messages. The text may be at most
/// ConfigLimits::kMaxConfigJsonBytes long.
MoeConfig config_from_hf_json_text(const std::string& json_text, const std::string& origin,
                                   const Precision* precision_override = nullptr);
/// As config_from_hf_json_text, from a file: it must be a regular file (a directory, a device,
/// a FIFO is refused without reading from it) of at most ConfigLimits::kMaxConfigJsonBytes.
MoeConfig config_from_hf_json_file(const std::string& path,
                                   const Precision* precision_override = nullptr);

}  // namespace fusedmoe
