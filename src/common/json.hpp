// A small strict JSON reader (RFC 8259) for config.json and safetensors headers. Errors carry the
// origin (file name) and line:column. No writer here: bench output is written with printf.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace fusedmoe::json {

struct Value {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  bool b = false;
  double num = 0.0;
  bool num_is_integer = false;  ///< written without fraction or exponent
  std::string str;
  std::vector<Value> arr;
  std::map<std::string, Value> obj;

  bool is_null() const { return kind == Kind::null; }
  bool is_object() const { return kind == Kind::object; }
  /// nullptr when absent (objects only).
  const Value* find(const std::string& key) const;
  static const char* kind_name(Kind k);
};

/// Parses `text`; throws fusedmoe::Error("<origin>:<line>:<col>: <what>") on malformed input.
Value parse(const std::string& text, const std::string& origin);

}  // namespace fusedmoe::json
