// JSON for config.json and safetensors headers: nlohmann-json (Debian nlohmann-json3-dev, found by
// CMake) does the parsing; this wrapper fixes the policy every reader in fusedmoe shares:
//   - strict RFC 8259: no NaN/Infinity literals, no comments, no trailing text; strings must be
//     valid UTF-8 with paired surrogates (nlohmann's lexer checks both).
//   - independent of the C locale: the parse runs under the "C" locale of this thread
//     (uselocale), so a caller's setlocale(LC_ALL, "de_DE.UTF-8") cannot turn 2.5 into 2.
//   - numbers keep their kind: integers up to 64 bits are exact (number_integer/unsigned); every
//     number is finite: a literal beyond a double (1e400) is an error naming its field (nlohmann
//     refuses it; Python would read inf).
//   - duplicate keys: the last value wins (as Python's json, so transformers sees the same), and
//     the document remembers which (object, key) pairs were duplicated, so a reader can refuse a
//     duplicate in a field it actually reads while ignoring one in a field nobody reads.
//   - nesting and the number of values are bounded (Limits): memory stays a small multiple of
//     the text, whatever its shape.
//   - errors are fusedmoe::Error("fusedmoe: <origin>:<line>:<col>: malformed JSON: <why>", or
//     "...: field \"a.b[1]\": the number 1e400 is beyond the range of a double") with the
//     offending token escaped and truncated (no control bytes reach the user's terminal).
#pragma once

#include <locale.h>

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

namespace fusedmoe::json {

using Value = nlohmann::json;

/// Bounds on the shape of a document, so that memory stays a small multiple of the text: a DOM
/// value costs 16 bytes plus its container's share (~30x the text for "[{},{},...]" otherwise).
struct Limits {
  int max_depth = 64;              ///< arrays/objects nested deeper: an error (real files: < 8)
  long long max_values = 1 << 22;  ///< values of any kind (containers, scalars, keys' values)
};

/// A parsed document: the root value and the keys that appeared more than once in their object.
class Document {
 public:
  const Value& root() const { return root_; }
  /// True when `key` appeared more than once in `object` (which must be a value of this
  /// document; its last value is the one kept).
  bool duplicated(const Value& object, const std::string& key) const;

 private:
  friend Document parse(std::string_view text, const std::string& origin, const Limits& limits);
  Value root_;
  std::set<std::pair<const Value::object_t*, std::string>> duplicates_;
};

/// Parses `text` (any bytes; NUL included). Throws fusedmoe::Error naming `origin` (shown as given
/// when it is plain printable text, else escaped), the line and column, and the reason.
Document parse(std::string_view text, const std::string& origin, const Limits& limits = {});

/// `text` as it can appear in a message: unchanged when it is short printable ASCII without
/// quotes or backslashes, else quoted and escaped by detail::quote_user_text (at most `max_chars`).
std::string printable(std::string_view text, size_t max_chars = 200);

/// Shortest decimal text that reads back as `v` ("2.5", "1e+300"), independent of the C locale;
/// the float overload prints a float's shortest form (0.005f as "0.005").
std::string format_number(double v);
std::string format_number(float v);

/// Sets this thread's locale to "C" for its lifetime (uselocale; restored by the destructor, also
/// on an exception): number parsing and printf-style messages in its scope do not depend on the
/// caller's setlocale(). Other threads are not affected.
class ScopedCLocale {
 public:
  ScopedCLocale();
  ~ScopedCLocale();
  ScopedCLocale(const ScopedCLocale&) = delete;
  ScopedCLocale& operator=(const ScopedCLocale&) = delete;

 private:
  locale_t previous_;  // this thread's locale before (possibly LC_GLOBAL_LOCALE)
};

}  // namespace fusedmoe::json
