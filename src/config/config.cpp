// MoeConfig validation, names and the model presets (shapes and routing from the models'
// published configs; see docs/design.md for the sources).
#include <cstdint>

#include "common/json.hpp"
#include "common/text.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe {

const char* routing_fn_name(RoutingFn f) {
  switch (f) {
    case RoutingFn::softmax_topk: return "softmax_topk";
    case RoutingFn::sigmoid_grouped_topk: return "sigmoid_grouped_topk";
    case RoutingFn::sigmoid_top1_on_input: return "sigmoid_top1_on_input";
    case RoutingFn::topk_softmax: return "topk_softmax";
  }
  return "?";
}

const char* activation_fn_name(ActivationFn f) {
  switch (f) {
    case ActivationFn::swiglu: return "swiglu";
    case ActivationFn::swiglu_clamped: return "swiglu_clamped";
  }
  return "?";
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::bf16: return "bf16";
    case Precision::fp8_block: return "fp8_block";
    case Precision::nvfp4: return "nvfp4";
    case Precision::mxfp4: return "mxfp4";
  }
  return "?";
}

Precision parse_precision(const std::string& s) {
  if (s == "bf16") return Precision::bf16;
  if (s == "fp8" || s == "fp8_block") return Precision::fp8_block;
  if (s == "nvfp4") return Precision::nvfp4;
  if (s == "mxfp4") return Precision::mxfp4;
  FMOE_REQUIRE(false, "precision %s is not one of bf16, fp8, nvfp4, mxfp4",
               detail::quote_user_text(s).c_str());
}

void MoeConfig::validate() const {
  using L = ConfigLimits;
  const std::string shown = name.empty() ? std::string("config") : json::printable(name, 80);
  const char* n = shown.c_str();
  // Each size: in its range, then a multiple of 16 (the kernels step K and N by 16).
  auto check_size = [&](const char* what, int v, int lo, int hi) {
    FMOE_REQUIRE(v >= lo && v <= hi, "%s: %s %d is out of range: expected [%d, %d]", n, what, v,
                 lo, hi);
    FMOE_REQUIRE(v % L::kSizeStep == 0,
                 "%s: %s %d must be a multiple of %d (the kernels step K and N by %d)", n, what, v,
                 L::kSizeStep, L::kSizeStep);
  };
  check_size("hidden size", hidden, L::kSizeStep, L::kMaxHidden);
  check_size("expert intermediate size", intermediate, L::kSizeStep, L::kMaxIntermediate);
  FMOE_REQUIRE(num_experts >= 1 && num_experts <= L::kMaxExperts,
               "%s: number of experts %d is out of range: expected [1, %d]", n, num_experts,
               L::kMaxExperts);
  FMOE_REQUIRE(top_k >= 1, "%s: top-k must be at least 1, got %d", n, top_k);
  FMOE_REQUIRE(top_k <= num_experts, "%s: top-k=%d is larger than the number of experts (%d)", n,
               top_k, num_experts);
  FMOE_REQUIRE(top_k <= L::kMaxTopK, "%s: top-k=%d is above the supported maximum of %d", n,
               top_k, L::kMaxTopK);
  FMOE_REQUIRE(num_shared_experts >= 0 && num_shared_experts <= L::kMaxSharedExperts,
               "%s: shared expert count %d is out of range: expected [0, %d]", n,
               num_shared_experts, L::kMaxSharedExperts);
  if (num_shared_experts > 0) {
    check_size("shared intermediate size", shared_intermediate, L::kSizeStep,
               L::kMaxIntermediate);
  } else {
    FMOE_REQUIRE(shared_intermediate == 0 && !shared_expert_gate,
                 "%s: shared intermediate size %d or a shared-expert gate given without shared "
                 "experts", n, shared_intermediate);
  }
  const float scale = routing.routed_scaling_factor, cap = routing.softcap;
  FMOE_REQUIRE(scale >= L::kMinRoutedScale && scale <= L::kMaxRoutedScale,
               "%s: routed scaling factor %s is out of range: expected [%s, %s]", n,
               json::format_number(scale).c_str(), json::format_number(L::kMinRoutedScale).c_str(),
               json::format_number(L::kMaxRoutedScale).c_str());
  FMOE_REQUIRE(cap >= 0 && cap <= L::kMaxSoftcap,
               "%s: logit softcap %s is out of range: expected 0 (off) or up to %s", n,
               json::format_number(cap).c_str(), json::format_number(L::kMaxSoftcap).c_str());
  switch (routing.fn) {
    case RoutingFn::softmax_topk:
      break;
    case RoutingFn::sigmoid_grouped_topk: {
      const int g = routing.num_groups, tg = routing.topk_groups;
      FMOE_REQUIRE(g >= 1 && g <= num_experts && num_experts % g == 0,
                   "%s: %d expert groups must divide the %d experts", n, g, num_experts);
      FMOE_REQUIRE(tg >= 1 && tg <= g, "%s: topk_groups=%d must be in [1, num_groups=%d]", n, tg,
                   g);
      const int64_t kept = int64_t(tg) * (num_experts / g);  // 64 bits: both factors are ints
      FMOE_REQUIRE(top_k <= kept, "%s: top-k=%d exceeds the %lld experts in the %d kept groups",
                   n, top_k, (long long)kept, tg);
      break;
    }
    case RoutingFn::sigmoid_top1_on_input:
      FMOE_REQUIRE(top_k == 1, "%s: sigmoid_top1_on_input routing needs top-k=1, got %d", n,
                   top_k);
      break;
    case RoutingFn::topk_softmax:
      break;
  }
  FMOE_REQUIRE(routing.fn == RoutingFn::softmax_topk || routing.softcap == 0,
               "%s: logit softcap is only defined for softmax_topk routing", n);
  if (activation.fn == ActivationFn::swiglu_clamped) {
    const float limit = activation.limit, alpha = activation.alpha;
    FMOE_REQUIRE(limit >= L::kMinSwigluLimit && limit <= L::kMaxSwigluLimit,
                 "%s: clamped SwiGLU limit %s is out of range: expected [%s, %s]", n,
                 json::format_number(limit).c_str(),
                 json::format_number(L::kMinSwigluLimit).c_str(),
                 json::format_number(L::kMaxSwigluLimit).c_str());
    FMOE_REQUIRE(alpha >= L::kMinSwigluAlpha && alpha <= L::kMaxSwigluAlpha,
                 "%s: clamped SwiGLU alpha %s is out of range: expected [%s, %s]", n,
                 json::format_number(alpha).c_str(),
                 json::format_number(L::kMinSwigluAlpha).c_str(),
                 json::format_number(L::kMaxSwigluAlpha).c_str());
  }
  const Precision w = weight_precision, a = activation_precision;
  const bool ok = (w == Precision::bf16 && a == Precision::bf16) ||
                  (w == Precision::fp8_block && a == Precision::fp8_block) ||
                  (w == Precision::nvfp4 && (a == Precision::bf16 || a == Precision::nvfp4)) ||
                  (w == Precision::mxfp4 && a == Precision::bf16);
  FMOE_REQUIRE(ok,
               "%s: weight/activation precision %s/%s is not supported (bf16/bf16, fp8/fp8, "
               "nvfp4/bf16, nvfp4/nvfp4, mxfp4/bf16)", n, precision_name(w), precision_name(a));
  // One UE8M0 scale per 32 values along K: both GEMMs' K (hidden, intermediate) and the shared
  // MLP's intermediate must hold whole scale blocks.
  FMOE_REQUIRE(w != Precision::mxfp4 ||
                   (hidden % 32 == 0 && intermediate % 32 == 0 && shared_intermediate % 32 == 0),
               "%s: mxfp4 weights need hidden (%d), intermediate (%d) and shared_intermediate (%d) "
               "to be multiples of 32 (one scale per 32 values)", n, hidden, intermediate,
               shared_intermediate);
}

std::string MoeConfig::summary() const {
  std::string r = routing_fn_name(routing.fn);
  std::string opts;
  auto add = [&](const std::string& s) { opts += (opts.empty() ? "" : ","); opts += s; };
  if (routing.renormalize && (routing.fn == RoutingFn::softmax_topk ||
                              routing.fn == RoutingFn::sigmoid_grouped_topk))
    add("renorm");
  if (routing.softcap > 0) add(strf("softcap=%g", double(routing.softcap)));
  if (routing.fn == RoutingFn::sigmoid_grouped_topk)
    add(strf("groups=%d/%d", routing.topk_groups, routing.num_groups));
  if (routing.correction_bias) add("bias");
  if (routing.router_bias) add("router_bias");
  if (routing.routed_scaling_factor != 1.0f)
    add(strf("scale=%g", double(routing.routed_scaling_factor)));
  if (!opts.empty()) r += "(" + opts + ")";
  std::string shared = num_shared_experts
                           ? strf(" shared=%dx%d%s", num_shared_experts, shared_intermediate,
                                  shared_expert_gate ? "(gated)" : "")
                           : std::string();
  return strf("%s: H=%d I=%d E=%d top-%d%s %s %s%s %s/%s", json::printable(name, 80).c_str(), hidden, intermediate,
              num_experts, top_k, shared.c_str(), r.c_str(), activation_fn_name(activation.fn),
              expert_bias ? "+bias" : "", precision_name(weight_precision),
              precision_name(activation_precision));
}

namespace {

MoeConfig make(const char* name, int H, int I, int E, int k, int shared, int shared_I) {
  MoeConfig c;
  c.name = name;
  c.hidden = H;
  c.intermediate = I;
  c.num_experts = E;
  c.top_k = k;
  c.num_shared_experts = shared;
  c.shared_intermediate = shared_I;
  return c;
}

std::vector<MoeConfig> build_presets() {
  std::vector<MoeConfig> p;
  {  // Qwen3.5-35B-A3B: transformers qwen3_5_moe defaults; softmax top-8 with renormalisation,
     // one shared expert scaled by a sigmoid gate (as Qwen2-MoE / Qwen3-Next).
    MoeConfig c = make("qwen3.5-35b-a3b", 2048, 512, 256, 8, 1, 512);
    c.shared_expert_gate = true;
    p.push_back(c);
  }
  p.push_back(make("qwen3-30b-a3b", 2048, 768, 128, 8, 0, 0));     // norm_topk_prob: true
  p.push_back(make("qwen3-235b-a22b", 4096, 1536, 128, 8, 0, 0));  // norm_topk_prob: true
  {  // DeepSeek-V3 config_671B.json: sigmoid + e_score_correction_bias, 8 groups keep 4,
     // norm_topk_prob, routed_scaling_factor 2.5, one shared expert of 2048.
    MoeConfig c = make("deepseek-v3", 7168, 2048, 256, 8, 1, 2048);
    c.routing.fn = RoutingFn::sigmoid_grouped_topk;
    c.routing.num_groups = 8;
    c.routing.topk_groups = 4;
    c.routing.correction_bias = true;
    c.routing.routed_scaling_factor = 2.5f;
    p.push_back(c);
  }
  {  // Kimi K2: DeepSeek-V3 architecture with 384 experts, one group, scaling 2.827.
    MoeConfig c = make("kimi-k2", 7168, 2048, 384, 8, 1, 2048);
    c.routing.fn = RoutingFn::sigmoid_grouped_topk;
    c.routing.num_groups = 1;
    c.routing.topk_groups = 1;
    c.routing.correction_bias = true;
    c.routing.routed_scaling_factor = 2.827f;
    p.push_back(c);
  }
  p.push_back(make("mixtral-8x7b", 4096, 14336, 8, 2, 0, 0));  // softmax over the top-2
  {  // gpt-oss-120b: router bias, top-4 on logits then softmax over the 4, clamped SwiGLU with
     // interleaved gate/up and expert biases.
    MoeConfig c = make("gpt-oss-120b", 2880, 2880, 128, 4, 0, 0);
    c.routing.fn = RoutingFn::topk_softmax;
    c.routing.renormalize = false;
    c.routing.router_bias = true;
    c.activation.fn = ActivationFn::swiglu_clamped;
    c.expert_bias = true;
    p.push_back(c);
  }
  {  // Llama-4-Maverick: top-1, sigmoid weight applied to the token before the expert, one
     // shared expert of the expert size.
    MoeConfig c = make("llama4-maverick", 5120, 8192, 128, 1, 1, 8192);
    c.routing.fn = RoutingFn::sigmoid_top1_on_input;
    c.routing.renormalize = false;
    p.push_back(c);
  }
  for (const auto& c : p) c.validate();
  return p;
}

}  // namespace

const std::vector<MoeConfig>& model_presets() {
  static const std::vector<MoeConfig> presets = build_presets();
  return presets;
}

const char* default_preset_name() { return "qwen3.5-35b-a3b"; }

const MoeConfig& find_preset(const std::string& name) {
  std::string names;
  for (const auto& c : model_presets()) {
    if (c.name == name) return c;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  FMOE_REQUIRE(false, "unknown preset %s; the presets are: %s",
               detail::quote_user_text(name).c_str(), names.c_str());
}

}  // namespace fusedmoe
