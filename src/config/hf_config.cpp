// MoeConfig from a Hugging Face config.json. Only the MoE fields are read; attention and
// vocabulary fields are ignored. Every read field is type-checked and every inconsistency is an
// Error naming the file and the field.
#include <cmath>
#include <fstream>
#include <sstream>

#include "common/json.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe {
namespace {

class Fields {
 public:
  Fields(const json::Value& obj, std::string origin) : obj_(obj), origin_(std::move(origin)) {}

  bool has(const char* key) const {
    const json::Value* v = obj_.find(key);
    return v && !v->is_null();
  }

  int get_int(const char* key) const {
    const json::Value& v = require(key);
    FMOE_REQUIRE(v.kind == json::Value::Kind::number && v.num_is_integer &&
                     std::fabs(v.num) < 2147483647.0,
                 "%s: field \"%s\" must be an integer, got %s", origin_.c_str(), key,
                 describe(v).c_str());
    return int(v.num);
  }
  int get_int(const char* key, int fallback) const { return has(key) ? get_int(key) : fallback; }

  double get_number(const char* key) const {
    const json::Value& v = require(key);
    FMOE_REQUIRE(v.kind == json::Value::Kind::number && std::isfinite(v.num),
                 "%s: field \"%s\" must be a finite number, got %s", origin_.c_str(), key,
                 describe(v).c_str());
    return v.num;
  }
  double get_number(const char* key, double fallback) const {
    return has(key) ? get_number(key) : fallback;
  }

  bool get_bool(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json::Value& v = require(key);
    FMOE_REQUIRE(v.kind == json::Value::Kind::boolean, "%s: field \"%s\" must be true or false, got %s",
                 origin_.c_str(), key, describe(v).c_str());
    return v.b;
  }

  std::string get_string(const char* key) const {
    const json::Value& v = require(key);
    FMOE_REQUIRE(v.kind == json::Value::Kind::string, "%s: field \"%s\" must be a string, got %s",
                 origin_.c_str(), key, describe(v).c_str());
    return v.str;
  }
  std::string get_string(const char* key, const std::string& fallback) const {
    return has(key) ? get_string(key) : fallback;
  }

  const json::Value* object(const char* key) const {
    if (!has(key)) return nullptr;
    const json::Value& v = require(key);
    FMOE_REQUIRE(v.is_object(), "%s: field \"%s\" must be an object, got %s", origin_.c_str(), key,
                 describe(v).c_str());
    return &v;
  }

  const json::Value& require(const char* key) const {
    const json::Value* v = obj_.find(key);
    FMOE_REQUIRE(v && !v->is_null(), "%s: required field \"%s\" is missing", origin_.c_str(), key);
    return *v;
  }

  const std::string& origin() const { return origin_; }

  static std::string describe(const json::Value& v) {
    switch (v.kind) {
      case json::Value::Kind::number: return strf("the number %g", v.num);
      case json::Value::Kind::string: return strf("the string \"%s\"", v.str.c_str());
      default: return json::Value::kind_name(v.kind);
    }
  }

 private:
  const json::Value& obj_;
  std::string origin_;
};

// quantization_config -> (weight, activation) precision.
void read_quantization(const Fields& f, MoeConfig& c) {
  const json::Value* q = f.object("quantization_config");
  if (!q) {
    c.weight_precision = c.activation_precision = Precision::bf16;
    return;
  }
  const Fields qf(*q, f.origin() + " quantization_config");
  const std::string method = qf.get_string("quant_method");
  if (method == "fp8") {
    const json::Value* blk = q->find("weight_block_size");
    FMOE_REQUIRE(blk && blk->kind == json::Value::Kind::array && blk->arr.size() == 2 &&
                     blk->arr[0].num == 128 && blk->arr[1].num == 128,
                 "%s: quantization_config.weight_block_size must be [128, 128] for fp8 weights "
                 "(per-tensor and per-channel fp8 are not supported)", f.origin().c_str());
    const std::string scheme = qf.get_string("activation_scheme", "dynamic");
    FMOE_REQUIRE(scheme == "dynamic",
                 "%s: quantization_config.activation_scheme \"%s\" is not supported (expected "
                 "\"dynamic\": per-token per-128 scales computed at run time)",
                 f.origin().c_str(), scheme.c_str());
    c.weight_precision = c.activation_precision = Precision::fp8_block;
    return;
  }
  if (method == "modelopt") {
    const std::string algo = qf.get_string("quant_algo");
    FMOE_REQUIRE(algo == "NVFP4",
                 "%s: ModelOpt quant_algo \"%s\" is not supported (expected \"NVFP4\")",
                 f.origin().c_str(), algo.c_str());
    // Hopper has no FP4 tensor cores: NVFP4 weights run with bf16 activations (W4A16).
    c.weight_precision = Precision::nvfp4;
    c.activation_precision = Precision::bf16;
    return;
  }
  FMOE_REQUIRE(false,
               "%s: quantization_config.quant_method \"%s\" is not supported (fp8 with 128x128 "
               "blocks, modelopt NVFP4, or none); pass a precision override to re-quantize",
               f.origin().c_str(), method.c_str());
}

MoeConfig from_object(const json::Value& root, const std::string& origin,
                      const Precision* precision_override, int depth) {
  FMOE_REQUIRE(root.is_object(), "%s: a config.json must hold a JSON object, got %s",
               origin.c_str(), json::Value::kind_name(root.kind));
  const Fields f(root, origin);
  const std::string type = f.get_string("model_type");

  // Multimodal wrappers keep the language model in text_config; the quantization config may sit
  // at either level.
  if (type == "qwen3_5_moe" || type == "llama4") {
    FMOE_REQUIRE(depth == 0, "%s: nested text_config inside text_config", origin.c_str());
    const json::Value* text = f.object("text_config");
    FMOE_REQUIRE(text != nullptr, "%s: model_type \"%s\" needs a \"text_config\" object",
                 origin.c_str(), type.c_str());
    json::Value merged = *text;
    if (!merged.find("model_type")) {
      json::Value text_type;
      text_type.kind = json::Value::Kind::string;
      text_type.str = type + "_text";
      merged.obj["model_type"] = text_type;
    }
    if (!merged.find("quantization_config") && root.find("quantization_config"))
      merged.obj["quantization_config"] = *root.find("quantization_config");
    return from_object(merged, origin + " text_config", precision_override, depth + 1);
  }

  MoeConfig c;
  c.name = type;
  c.hidden = f.get_int("hidden_size");
  if (type == "qwen2_moe" || type == "qwen3_moe" || type == "qwen3_next" ||
      type == "qwen3_5_moe_text") {
    c.intermediate = f.get_int("moe_intermediate_size");
    c.num_experts = f.get_int("num_experts");
    c.top_k = f.get_int("num_experts_per_tok");
    c.routing.fn = RoutingFn::softmax_topk;
    c.routing.renormalize = f.get_bool("norm_topk_prob", type != "qwen2_moe");
    const int shared_I = f.get_int("shared_expert_intermediate_size", 0);
    FMOE_REQUIRE(shared_I >= 0, "%s: shared_expert_intermediate_size must be >= 0, got %d",
                 origin.c_str(), shared_I);
    if (shared_I > 0) {
      c.num_shared_experts = 1;
      c.shared_intermediate = shared_I;
      c.shared_expert_gate = true;  // Qwen's shared expert always has its sigmoid gate
    }
  } else if (type == "deepseek_v3" || type == "kimi_k2") {
    c.intermediate = f.get_int("moe_intermediate_size");
    c.num_experts = f.get_int("n_routed_experts");
    c.top_k = f.get_int("num_experts_per_tok");
    const std::string scoring = f.get_string("scoring_func", "sigmoid");
    FMOE_REQUIRE(scoring == "sigmoid",
                 "%s: scoring_func \"%s\" is not supported for %s (expected \"sigmoid\")",
                 origin.c_str(), scoring.c_str(), type.c_str());
    const std::string method = f.get_string("topk_method", "noaux_tc");
    FMOE_REQUIRE(method == "noaux_tc",
                 "%s: topk_method \"%s\" is not supported (expected \"noaux_tc\")", origin.c_str(),
                 method.c_str());
    c.routing.fn = RoutingFn::sigmoid_grouped_topk;
    c.routing.correction_bias = true;
    c.routing.num_groups = f.get_int("n_group", 1);
    c.routing.topk_groups = f.get_int("topk_group", 1);
    c.routing.renormalize = f.get_bool("norm_topk_prob", true);
    c.routing.routed_scaling_factor = float(f.get_number("routed_scaling_factor", 1.0));
    const int shared = f.get_int("n_shared_experts", 0);
    FMOE_REQUIRE(shared >= 0, "%s: n_shared_experts must be >= 0, got %d", origin.c_str(), shared);
    c.num_shared_experts = shared;
    c.shared_intermediate = shared * c.intermediate;
  } else if (type == "mixtral") {
    c.intermediate = f.get_int("intermediate_size");
    c.num_experts = f.get_int("num_local_experts");
    c.top_k = f.get_int("num_experts_per_tok");
    c.routing.fn = RoutingFn::softmax_topk;
    c.routing.renormalize = true;  // softmax over the top-k logits
  } else if (type == "gpt_oss") {
    c.intermediate = f.get_int("intermediate_size");
    c.num_experts = f.get_int("num_local_experts");
    const bool has_new = f.has("num_experts_per_tok"), has_old = f.has("experts_per_token");
    FMOE_REQUIRE(has_new || has_old, "%s: required field \"num_experts_per_tok\" is missing",
                 origin.c_str());
    c.top_k = has_new ? f.get_int("num_experts_per_tok") : f.get_int("experts_per_token");
    if (has_new && has_old)
      FMOE_REQUIRE(f.get_int("experts_per_token") == c.top_k,
                   "%s: num_experts_per_tok=%d and experts_per_token=%d disagree", origin.c_str(),
                   c.top_k, f.get_int("experts_per_token"));
    c.routing.fn = RoutingFn::topk_softmax;
    c.routing.renormalize = false;
    c.routing.router_bias = true;
    c.activation.fn = ActivationFn::swiglu_clamped;
    c.activation.limit = float(f.get_number("swiglu_limit", 7.0));
    c.expert_bias = true;
  } else if (type == "llama4_text") {
    c.intermediate = f.get_int("intermediate_size");
    c.num_experts = f.get_int("num_local_experts");
    c.top_k = f.get_int("num_experts_per_tok");
    c.routing.fn = RoutingFn::sigmoid_top1_on_input;
    c.routing.renormalize = false;
    c.num_shared_experts = 1;
    c.shared_intermediate = c.intermediate;
  } else {
    FMOE_REQUIRE(false,
                 "%s: model_type \"%s\" is not a supported MoE family (qwen2_moe, qwen3_moe, "
                 "qwen3_next, qwen3_5_moe, deepseek_v3, kimi_k2, mixtral, gpt_oss, llama4)",
                 origin.c_str(), type.c_str());
  }

  if (precision_override) {
    c.weight_precision = *precision_override;
    c.activation_precision =
        *precision_override == Precision::nvfp4 ? Precision::bf16 : *precision_override;
  } else {
    read_quantization(f, c);
  }

  try {
    c.validate();
  } catch (const Error& e) {
    // Name the file: the field values came from it.
    throw Error(strf("%s (from %s)", e.what(), origin.c_str()));
  }
  return c;
}

}  // namespace

MoeConfig config_from_hf_json_text(const std::string& json_text, const std::string& origin,
                                   const Precision* precision_override) {
  return from_object(json::parse(json_text, origin), origin, precision_override, 0);
}

MoeConfig config_from_hf_json_file(const std::string& path, const Precision* precision_override) {
  std::ifstream in(path, std::ios::binary);
  FMOE_REQUIRE(in.good(), "cannot open config file \"%s\"", path.c_str());
  std::ostringstream ss;
  ss << in.rdbuf();
  return config_from_hf_json_text(ss.str(), path, precision_override);
}

}  // namespace fusedmoe
