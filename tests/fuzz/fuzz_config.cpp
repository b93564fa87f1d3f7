// libFuzzer target: the config.json reader (config_from_hf_json_text). Each input is used twice:
//   1. as the whole config.json text, with and without a precision override;
//   2. as user text in every place the reader may quote it back: the value of each string field
//      that reaches a message, an object key on the path of an error, the origin (file name), a
//      preset name and a precision name. (Random mutation rarely grows a "\u001b" inside exactly
//      those strings of a whole file; this makes each input test all of them.)
// Built and run by scripts/fuzz.sh under ASan + UBSan.
//
// A finding is: a crash or sanitizer report, a hang or a memory blow-up (libFuzzer's -timeout,
// -rss_limit_mb), a leak, an exception other than fusedmoe::Error, an accepted config that does
// not validate, or a message that echoes a byte outside printable ASCII or grows without bound
// (the file's text must not reach the user's terminal raw).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "fusedmoe/config.hpp"
#include "fusedmoe/error.hpp"

namespace {

constexpr size_t kMaxMessageBytes = 2048;

void require_printable(const std::string& what, const std::string& text) {
  for (unsigned char c : text) {
    if (c < 0x20 || c >= 0x7F) {
      std::fprintf(stderr, "fuzz_config: %s holds the byte 0x%02X: %.300s\n", what.c_str(), c,
                   text.c_str());
      std::abort();
    }
  }
  if (text.size() > kMaxMessageBytes) {
    std::fprintf(stderr, "fuzz_config: %s is %zu bytes (limit %zu): %.300s...\n", what.c_str(),
                 text.size(), kMaxMessageBytes, text.c_str());
    std::abort();
  }
}

void read_config(const std::string& text, const fusedmoe::Precision* override_precision,
                 const std::string& origin = "fuzz/config.json") {
  try {
    const fusedmoe::MoeConfig c =
        fusedmoe::config_from_hf_json_text(text, origin, override_precision);
    c.validate();  // what the import returns must be valid as it stands
    require_printable("MoeConfig::summary()", c.summary());
  } catch (const fusedmoe::Error& e) {
    require_printable("the Error message", e.what());
  }
}

template <class Fn>
void expect_error_only(const char* what, Fn&& fn) {
  try {
    fn();
  } catch (const fusedmoe::Error& e) {
    require_printable(what, e.what());
  }
}

// Documents with @ where the user text goes (as a JSON string).
constexpr const char* kQwen = R"({"model_type": "qwen3_moe", "hidden_size": 2048,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8, )";
constexpr const char* kDeepSeek = R"({"model_type": "deepseek_v3", "hidden_size": 7168,
    "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8, )";
const std::string kTemplates[] = {
    R"({"model_type": @})",
    R"({"model_type": "llama4", "text_config": {"model_type": @}})",
    std::string(kDeepSeek) + R"("scoring_func": @})",
    std::string(kDeepSeek) + R"("topk_method": @})",
    std::string(kQwen) + R"("quantization_config": {"quant_method": @}})",
    std::string(kQwen) + R"("quantization_config": {"quant_method": "modelopt", "quant_algo": @}})",
    std::string(kQwen) + R"("quantization_config": {"quant_method": "fp8",
        "weight_block_size": [128, 128], "activation_scheme": @}})",
    std::string(kQwen) + R"("quantization_config": {"quant_method": "fp8",
        "weight_block_size": [@, 128]}})",
    std::string(kQwen).replace(std::string(kQwen).find("2048"), 4, "@") + "}",
    R"({"rope_scaling": {@: [0, 1e999]}})",  // the key path of a number error
};

void quote_back(const std::string& bytes) {
  // JSON text of the bytes (invalid UTF-8 replaced: a JSON file cannot hold it in a string).
  const std::string as_json =
      nlohmann::json(bytes).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  for (const std::string& t : kTemplates) {
    std::string doc = t;
    doc.replace(doc.find('@'), 1, as_json);
    read_config(doc, nullptr);
  }
  read_config("{", nullptr, bytes);  // the origin
  expect_error_only("find_preset", [&] { fusedmoe::find_preset(bytes); });
  expect_error_only("parse_precision", [&] { fusedmoe::parse_precision(bytes); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  read_config(text, nullptr);
  // With an override the quantization_config is skipped: gpt-oss's mxfp4 files get further.
  const fusedmoe::Precision nvfp4 = fusedmoe::Precision::nvfp4;
  read_config(text, &nvfp4);
  // 256 bytes are past every quoting limit (40..200), so truncation is exercised too; longer
  // values only slow the run down (the 100 KB cases are unit tests).
  quote_back(text.substr(0, 256));
  return 0;
}
