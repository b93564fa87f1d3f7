// MoeConfig from a Hugging Face config.json. Only the MoE fields are read; attention and
// vocabulary fields are ignored. Every read field is type- and range-checked (ConfigLimits), and
// every inconsistency is an Error naming the file and the field, with expected versus actual.
// User text (strings from the file, the path) reaches a message only through json::printable or
// detail::quote_user_text: escaped and bounded.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/json.hpp"
#include "common/text.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe {
namespace {

using json::Value;
using L = ConfigLimits;

// The precision names parse_precision() accepts, for messages that ask for an override.
constexpr const char* kPrecisionChoices = "bf16, fp8, nvfp4, mxfp4";

// A JSON number as text: integers exactly, floats shortest round-trip ("2.5", "1e+300").
std::string number_text(const Value& v) {
  if (v.is_number_unsigned()) return strf("%llu", (unsigned long long)v.get<uint64_t>());
  if (v.is_number_integer()) return strf("%lld", (long long)v.get<int64_t>());
  return json::format_number(v.get<double>());
}

// "the number 4096.5", "the string \"4096\"", "an array", ...: what a field holds, bounded.
std::string describe(const Value& v) {
  switch (v.type()) {
    case Value::value_t::number_integer:
    case Value::value_t::number_unsigned:
    case Value::value_t::number_float:
      return "the number " + number_text(v);
    case Value::value_t::string:
      return "the string " + detail::quote_user_text(v.get_ref<const std::string&>(), 60);
    case Value::value_t::boolean: return v.get<bool>() ? "true" : "false";
    case Value::value_t::array: return "an array";
    case Value::value_t::object: return "an object";
    default: return v.type_name();
  }
}

// The fields of one JSON object. `prefix` is the object's path ("", "text_config.",
// "quantization_config."), so messages name fields as they are spelled in the file.
class Fields {
 public:
  Fields(const json::Document& doc, const Value& obj, const std::string& origin, std::string prefix)
      : doc_(doc), obj_(obj), origin_(origin), prefix_(std::move(prefix)) {}

  const std::string& origin() const { return origin_; }
  std::string name(const char* key) const { return prefix_ + key; }

  /// The value of `key`; nullptr when absent or null (HF writes null for "not set").
  const Value* find(const char* key) const {
    const auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    FMOE_REQUIRE(!doc_.duplicated(obj_, key),
                 "%s: field \"%s\" appears more than once; which value is meant is ambiguous",
                 origin_.c_str(), name(key).c_str());
    return &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }

  const Value& require(const char* key) const {
    const Value* v = find(key);
    FMOE_REQUIRE(v, "%s: required field \"%s\" is missing", origin_.c_str(), name(key).c_str());
    return *v;
  }

  /// An integer in [lo, hi]: a JSON integer, or a float with an integer value (2048.0).
  int get_int(const char* key, int lo, int hi) const {
    const Value& v = require(key);
    const std::string range = strf("an integer in [%d, %d]", lo, hi);
    FMOE_REQUIRE(v.is_number(), "%s: field \"%s\" must be %s, got %s", origin_.c_str(),
                 name(key).c_str(), range.c_str(), describe(v).c_str());
    if (v.is_number_float()) {
      const double d = v.get<double>();  // finite: json::parse refuses 1e400
      FMOE_REQUIRE(d == std::trunc(d), "%s: field \"%s\" must be %s, got the number %s (not an "
                   "integer)", origin_.c_str(), name(key).c_str(), range.c_str(),
                   json::format_number(d).c_str());
      FMOE_REQUIRE(d >= lo && d <= hi, "%s: field \"%s\" = %s is out of range: expected %s",
                   origin_.c_str(), name(key).c_str(), number_text(v).c_str(), range.c_str());
      return int(d);
    }
    // Integers compare exactly, without a detour through double (9007199254740993 stays itself).
    // nlohmann gives non-negative integers as unsigned, negative ones as signed.
    const bool in_range =
        v.is_number_unsigned()
            ? v.get<uint64_t>() <= uint64_t(hi) && (lo <= 0 || v.get<uint64_t>() >= uint64_t(lo))
            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    FMOE_REQUIRE(in_range, "%s: field \"%s\" = %s is out of range: expected %s", origin_.c_str(),
                 name(key).c_str(), number_text(v).c_str(), range.c_str());
    return int(v.get<int64_t>());
  }
  int get_int(const char* key, int lo, int hi, int fallback) const {
    return has(key) ? get_int(key, lo, hi) : fallback;
  }

  /// A finite number in [lo, hi] (JSON integers included).
  double get_number(const char* key, double lo, double hi) const {
    const Value& v = require(key);
    const std::string range =
        "a number in [" + json::format_number(lo) + ", " + json::format_number(hi) + "]";
    FMOE_REQUIRE(v.is_number(), "%s: field \"%s\" must be %s, got %s", origin_.c_str(),
                 name(key).c_str(), range.c_str(), describe(v).c_str());
    const double d = v.get<double>();  // finite: json::parse refuses 1e400
    FMOE_REQUIRE(d >= lo && d <= hi, "%s: field \"%s\" = %s is out of range: expected %s",
                 origin_.c_str(), name(key).c_str(), number_text(v).c_str(),
                 range.c_str());
    return d;
  }
  double get_number(const char* key, double lo, double hi, double fallback) const {
    return has(key) ? get_number(key, lo, hi) : fallback;
  }

  bool get_bool(const char* key, bool fallback) const {
    const Value* v = find(key);
    if (!v) return fallback;
    FMOE_REQUIRE(v->is_boolean(), "%s: field \"%s\" must be true or false, got %s",
                 origin_.c_str(), name(key).c_str(), describe(*v).c_str());
    return v->get<bool>();
  }

  std::string get_string(const char* key) const {
    const Value& v = require(key);
    FMOE_REQUIRE(v.is_string(), "%s: field \"%s\" must be a string, got %s", origin_.c_str(),
                 name(key).c_str(), describe(v).c_str());
    return v.get<std::string>();
  }
  std::string get_string(const char* key, const std::string& fallback) const {
    return has(key) ? get_string(key) : fallback;
  }

  /// The object under `key`, or nullptr when absent.
  const Value* object(const char* key) const {
    const Value* v = find(key);
    if (!v) return nullptr;
    FMOE_REQUIRE(v->is_object(), "%s: field \"%s\" must be an object, got %s", origin_.c_str(),
                 name(key).c_str(), describe(*v).c_str());
    return v;
  }

  Fields nested(const Value& obj, const char* key) const {
    return Fields(doc_, obj, origin_, prefix_ + key + ".");
  }

 private:
  const json::Document& doc_;
  const Value& obj_;
  const std::string& origin_;
  std::string prefix_;
};

std::string quoted(const std::string& s) { return detail::quote_user_text(s, 60); }

// quantization_config -> (weight, activation) precision. `q` may be null (no quantization).
void read_quantization(const Fields* q, MoeConfig& c) {
  if (!q) {
    c.weight_precision = c.activation_precision = Precision::bf16;
    return;
  }
  const std::string method = q->get_string("quant_method");
  if (method == "fp8") {
    const Value& blk = q->require("weight_block_size");
    bool ok = blk.is_array() && blk.size() == 2;
    for (size_t i = 0; ok && i < 2; ++i)
      ok = blk[i].is_number() && blk[i].get<double>() == 128.0;  // 128 or 128.0
    FMOE_REQUIRE(ok, "%s: field \"%s\" must be [128, 128] for fp8 weights (per-tensor and "
                 "per-channel fp8 are not supported), got %s", q->origin().c_str(),
                 q->name("weight_block_size").c_str(),
                 json::printable(blk.dump(-1, ' ', /*ensure_ascii=*/true), 40).c_str());
    const std::string scheme = q->get_string("activation_scheme", "dynamic");
    FMOE_REQUIRE(scheme == "dynamic",
                 "%s: field \"%s\" = %s is not supported (expected \"dynamic\": per-token per-128 "
                 "scales computed at run time)", q->origin().c_str(),
                 q->name("activation_scheme").c_str(), quoted(scheme).c_str());
    c.weight_precision = c.activation_precision = Precision::fp8_block;
    return;
  }
  if (method == "modelopt") {
    const std::string algo = q->get_string("quant_algo");
    FMOE_REQUIRE(algo == "NVFP4", "%s: field \"%s\" = %s is not supported (expected \"NVFP4\")",
                 q->origin().c_str(), q->name("quant_algo").c_str(), quoted(algo).c_str());
    // Hopper has no FP4 tensor cores: NVFP4 weights run with bf16 activations (W4A16).
    c.weight_precision = Precision::nvfp4;
    c.activation_precision = Precision::bf16;
    return;
  }
  if (method == "mxfp4") {
    // gpt-oss: E2M1 experts with one UE8M0 scale per 32 (the *_blocks / *_scales tensors); the
    // attention and router stay bf16 (modules_to_not_convert), which the MoE layer does not use.
    c.weight_precision = Precision::mxfp4;
    c.activation_precision = Precision::bf16;
    return;
  }
  FMOE_REQUIRE(false,
               "%s: field \"%s\" = %s is not a format fusedmoe reads (it reads \"fp8\" with "
               "128x128 blocks, \"modelopt\" NVFP4, \"mxfp4\", or no quantization_config for bf16). To run "
               "this model's shapes in one of %s, pass the precision: --precision on the "
               "command line, or the precision_override argument of config_from_hf_json_file",
               q->origin().c_str(), q->name("quant_method").c_str(), quoted(method).c_str(),
               kPrecisionChoices);
}

// The MoE fields of one family; `f` is the language model's object (root or text_config).
MoeConfig read_family(const Fields& f, const std::string& type, const Fields* quant,
                      const Precision* precision_override) {
  const std::string& origin = f.origin();
  static const char* const kFamilies[] = {"qwen2_moe", "qwen3_moe", "qwen3_next",
                                          "qwen3_5_moe_text", "deepseek_v3", "kimi_k2",
                                          "mixtral", "gpt_oss", "llama4_text"};
  bool known = false;
  for (const char* fam : kFamilies) known = known || type == fam;
  FMOE_REQUIRE(known,
               "%s: field \"%s\" = %s is not a supported MoE family (qwen2_moe, qwen3_moe, "
               "qwen3_next, qwen3_5_moe, deepseek_v3, kimi_k2, mixtral, gpt_oss, llama4)",
               origin.c_str(), f.name("model_type").c_str(), quoted(type).c_str());
  MoeConfig c;
  c.name = type;
  c.hidden = f.get_int("hidden_size", L::kSizeStep, L::kMaxHidden);
  const int kS = L::kSizeStep, kI = L::kMaxIntermediate, kE = L::kMaxExperts, kK = L::kMaxTopK;
  if (type == "qwen2_moe" || type == "qwen3_moe" || type == "qwen3_next" ||
      type == "qwen3_5_moe_text") {
    c.intermediate = f.get_int("moe_intermediate_size", kS, kI);
    c.num_experts = f.get_int("num_experts", 1, kE);
    c.top_k = f.get_int("num_experts_per_tok", 1, kK);
    c.routing.fn = RoutingFn::softmax_topk;
    c.routing.renormalize = f.get_bool("norm_topk_prob", type != "qwen2_moe");
    const int shared_I = f.get_int("shared_expert_intermediate_size", 0, kI, 0);
    if (shared_I > 0) {
      c.num_shared_experts = 1;
      c.shared_intermediate = shared_I;
      c.shared_expert_gate = true;  // Qwen's shared expert always has its sigmoid gate
    }
  } else if (type == "deepseek_v3" || type == "kimi_k2") {
    c.intermediate = f.get_int("moe_intermediate_size", kS, kI);
    c.num_experts = f.get_int("n_routed_experts", 1, kE);
    c.top_k = f.get_int("num_experts_per_tok", 1, kK);
    const std::string scoring = f.get_string("scoring_func", "sigmoid");
    FMOE_REQUIRE(scoring == "sigmoid",
                 "%s: field \"%s\" = %s is not supported for %s (expected \"sigmoid\")",
                 origin.c_str(), f.name("scoring_func").c_str(), quoted(scoring).c_str(),
                 type.c_str());
    const std::string method = f.get_string("topk_method", "noaux_tc");
    FMOE_REQUIRE(method == "noaux_tc",
                 "%s: field \"%s\" = %s is not supported (expected \"noaux_tc\")", origin.c_str(),
                 f.name("topk_method").c_str(), quoted(method).c_str());
    c.routing.fn = RoutingFn::sigmoid_grouped_topk;
    c.routing.correction_bias = true;
    c.routing.num_groups = f.get_int("n_group", 1, kE, 1);
    c.routing.topk_groups = f.get_int("topk_group", 1, kE, 1);
    c.routing.renormalize = f.get_bool("norm_topk_prob", true);
    c.routing.routed_scaling_factor = float(f.get_number(
        "routed_scaling_factor", L::kMinRoutedScale, L::kMaxRoutedScale, 1.0));
    const int shared = f.get_int("n_shared_experts", 0, L::kMaxSharedExperts, 0);
    // The shared experts run as one MLP of shared x I rows: 64 bits, then the MLP's limit.
    const int64_t shared_I = int64_t(shared) * c.intermediate;
    FMOE_REQUIRE(shared_I <= kI,
                 "%s: fields \"%s\" x \"%s\" = %d x %d = %lld is out of range for the shared "
                 "MLP's intermediate size: expected at most %d", origin.c_str(),
                 f.name("n_shared_experts").c_str(), f.name("moe_intermediate_size").c_str(),
                 shared, c.intermediate, (long long)shared_I, kI);
    c.num_shared_experts = shared;
    c.shared_intermediate = int(shared_I);
  } else if (type == "mixtral") {
    c.intermediate = f.get_int("intermediate_size", kS, kI);
    c.num_experts = f.get_int("num_local_experts", 1, kE);
    c.top_k = f.get_int("num_experts_per_tok", 1, kK);
    c.routing.fn = RoutingFn::softmax_topk;
    c.routing.renormalize = true;  // softmax over the top-k logits
  } else if (type == "gpt_oss") {
    c.intermediate = f.get_int("intermediate_size", kS, kI);
    c.num_experts = f.get_int("num_local_experts", 1, kE);
    const bool has_new = f.has("num_experts_per_tok"), has_old = f.has("experts_per_token");
    FMOE_REQUIRE(has_new || has_old, "%s: required field \"%s\" is missing", origin.c_str(),
                 f.name("num_experts_per_tok").c_str());
    c.top_k = f.get_int(has_new ? "num_experts_per_tok" : "experts_per_token", 1, kK);
    if (has_new && has_old) {
      const int old_k = f.get_int("experts_per_token", 1, kK);
      FMOE_REQUIRE(old_k == c.top_k, "%s: fields \"%s\" = %d and \"%s\" = %d disagree",
                   origin.c_str(), f.name("num_experts_per_tok").c_str(), c.top_k,
                   f.name("experts_per_token").c_str(), old_k);
    }
    c.routing.fn = RoutingFn::topk_softmax;
    c.routing.renormalize = false;
    c.routing.router_bias = true;
    c.activation.fn = ActivationFn::swiglu_clamped;
    c.activation.limit = float(
        f.get_number("swiglu_limit", L::kMinSwigluLimit, L::kMaxSwigluLimit, 7.0));
    c.expert_bias = true;
  } else {  // llama4_text (the list above)
    c.intermediate = f.get_int("intermediate_size", kS, kI);
    c.num_experts = f.get_int("num_local_experts", 1, kE);
    c.top_k = f.get_int("num_experts_per_tok", 1, kK);
    c.routing.fn = RoutingFn::sigmoid_top1_on_input;
    c.routing.renormalize = false;
    c.num_shared_experts = 1;
    c.shared_intermediate = c.intermediate;
  }

  if (precision_override) {
    c.weight_precision = *precision_override;
    c.activation_precision =
        (*precision_override == Precision::nvfp4 || *precision_override == Precision::mxfp4)
            ? Precision::bf16
            : *precision_override;
  } else {
    read_quantization(quant, c);
  }

  try {
    c.validate();
  } catch (const Error& e) {
    // Name the file: the field values came from it.
    throw Error(strf("%s (from %s)", e.what(), origin.c_str()));
  }
  return c;
}

MoeConfig read_document(const json::Document& doc, const std::string& origin,
                        const Precision* precision_override) {
  const Value& root = doc.root();
  FMOE_REQUIRE(root.is_object(), "%s: a config.json must hold a JSON object, got %s",
               origin.c_str(), describe(root).c_str());
  const Fields top(doc, root, origin, "");
  const std::string type = top.get_string("model_type");
  const Value* root_quant = top.object("quantization_config");
  if (type != "qwen3_5_moe" && type != "llama4") {
    if (!root_quant) return read_family(top, type, nullptr, precision_override);
    const Fields quant = top.nested(*root_quant, "quantization_config");
    return read_family(top, type, &quant, precision_override);
  }

  // Multimodal wrappers keep the language model in text_config; the quantization config may sit
  // at either level (the inner one wins).
  const Value* text = top.object("text_config");
  FMOE_REQUIRE(text != nullptr, "%s: model_type %s needs a \"text_config\" object",
               origin.c_str(), quoted(type).c_str());
  const Fields tf = top.nested(*text, "text_config");
  const std::string text_type = tf.get_string("model_type", type + "_text");
  FMOE_REQUIRE(text_type != "qwen3_5_moe" && text_type != "llama4",
               "%s: field \"%s\" = %s: a multimodal wrapper inside a wrapper is not a language "
               "model config", origin.c_str(), tf.name("model_type").c_str(),
               quoted(text_type).c_str());
  if (const Value* inner_quant = tf.object("quantization_config")) {
    const Fields quant = tf.nested(*inner_quant, "quantization_config");
    return read_family(tf, text_type, &quant, precision_override);
  }
  if (root_quant) {
    const Fields quant = top.nested(*root_quant, "quantization_config");
    return read_family(tf, text_type, &quant, precision_override);
  }
  return read_family(tf, text_type, nullptr, precision_override);
}

// The whole file, refusing what is not a small regular file before reading from it.
std::string read_config_file(const std::string& path) {
  const std::string shown = json::printable(path, 200);
  // O_NONBLOCK: opening a FIFO for reading must not wait for a writer (it is refused below).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  FMOE_REQUIRE(fd >= 0, "cannot open config file %s: %s", shown.c_str(), std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  FMOE_REQUIRE(::fstat(fd, &st) == 0, "cannot stat config file %s: %s", shown.c_str(),
               std::strerror(errno));
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  FMOE_REQUIRE(S_ISREG(st.st_mode), "config file %s must be a regular file, it is %s",
               shown.c_str(), kind);
  const long long cap = L::kMaxConfigJsonBytes;
  FMOE_REQUIRE(st.st_size <= cap,
               "config file %s is %lld bytes, above the limit of %lld bytes (4 MiB; a "
               "config.json is a few KB)", shown.c_str(), (long long)st.st_size, cap);
  // Read at most cap + 1 bytes: files in /proc report size 0, and a file may grow meanwhile.
  std::string text(size_t(st.st_size > 0 ? st.st_size : 4096), '\0');
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if ((long long)got > cap) break;
      text.resize(std::min<size_t>(text.size() * 2, size_t(cap) + 1));
    }
    const ssize_t n = ::read(fd, &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    FMOE_REQUIRE(n >= 0, "cannot read config file %s: %s", shown.c_str(), std::strerror(errno));
    if (n == 0) break;
    got += size_t(n);
  }
  FMOE_REQUIRE((long long)got <= cap,
               "config file %s is above the limit of %lld bytes (4 MiB; a config.json is a few "
               "KB): it grew while being read", shown.c_str(), cap);
  text.resize(got);
  return text;
}

}  // namespace

MoeConfig config_from_hf_json_text(const std::string& json_text, const std::string& origin,
                                   const Precision* precision_override) {
  // Numbers in messages ("%g") and in the parse do not depend on the caller's locale.
  const json::ScopedCLocale c_locale;
  const std::string shown = json::printable(origin, 200);
  FMOE_REQUIRE((long long)json_text.size() <= L::kMaxConfigJsonBytes,
               "%s: the config text is %zu bytes, above the limit of %lld bytes (4 MiB; a "
               "config.json is a few KB)", shown.c_str(), json_text.size(), L::kMaxConfigJsonBytes);
  // A config.json has hundreds of values (a few thousand with long module lists): 2^18 bounds
  // the DOM to ~20 MB whatever the 4 MiB text holds.
  json::Limits limits;
  limits.max_depth = 64;
  limits.max_values = 1 << 18;
  const json::Document doc = json::parse(json_text, origin, limits);
  return read_document(doc, shown, precision_override);
}

MoeConfig config_from_hf_json_file(const std::string& path, const Precision* precision_override) {
  return config_from_hf_json_text(read_config_file(path), path, precision_override);
}

}  // namespace fusedmoe
