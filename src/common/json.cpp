#include "common/json.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <vector>

#include "common/text.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe::json {

bool Document::duplicated(const Value& object, const std::string& key) const {
  if (duplicates_.empty() || !object.is_object()) return false;
  return duplicates_.count({&object.get_ref<const Value::object_t&>(), key}) != 0;
}

std::string printable(std::string_view text, size_t max_chars) {
  bool plain = !text.empty() && text.size() <= max_chars;
  for (size_t i = 0; plain && i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    plain = c >= 0x20 && c < 0x7F && c != '"' && c != '\\';
  }
  return plain ? std::string(text) : detail::quote_user_text(text, max_chars);
}

std::string format_number(double v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

std::string format_number(float v) {
  char buf[64];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, r.ptr);
}

namespace {

locale_t c_locale() {
  // Created once and never freed: uselocale() needs it for the whole life of the process.
  static const locale_t loc = newlocale(LC_ALL_MASK, "C", locale_t(0));
  FMOE_REQUIRE(loc != locale_t(0), "json: newlocale(LC_ALL_MASK, \"C\") failed");
  return loc;
}

// Every byte outside printable ASCII as \xHH, at most max_bytes of input.
std::string escape_bytes(std::string_view s, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < max_bytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += char(c);
    } else {
      static const char kHex[] = "0123456789ABCDEF";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > max_bytes) out += "...";
  return out;
}

// Builds the DOM from nlohmann's SAX events: the same as nlohmann's own DOM parser, plus the
// limits, the record of duplicated keys, and the path of a value for messages.
class DomBuilder final : public nlohmann::json_sax<Value> {
 public:
  DomBuilder(std::string_view text, const std::string& origin, const Limits& limits,
             Value& root, std::set<std::pair<const Value::object_t*, std::string>>& duplicates)
      : text_(text), origin_(origin), limits_(limits), root_(root), duplicates_(duplicates) {}

  bool null() override { put(Value()); return true; }
  bool boolean(bool v) override { put(Value(v)); return true; }
  bool number_integer(number_integer_t v) override { put(Value(v)); return true; }
  bool number_unsigned(number_unsigned_t v) override { put(Value(v)); return true; }
  // Finite: nlohmann reports a literal beyond a double through parse_error (406) instead.
  bool number_float(number_float_t v, const string_t&) override { put(Value(v)); return true; }
  bool string(string_t& v) override { put(Value(std::move(v))); return true; }
  bool binary(binary_t&) override { return false; }  // not produced by the JSON text parser

  bool start_object(std::size_t) override { open(Value::value_t::object); return true; }
  bool end_object() override { close(); return true; }
  bool start_array(std::size_t) override { open(Value::value_t::array); return true; }
  bool end_array() override { close(); return true; }

  bool key(string_t& k) override {
    Value::object_t& obj = stack_.back()->get_ref<Value::object_t&>();
    auto it = obj.find(k);
    if (it == obj.end()) {
      it = obj.emplace(std::move(k), Value()).first;
    } else {
      // The last value wins. The discarded one is kept alive until the parse ends so that the
      // address of an object inside it is not reused by a later object (duplicates_ keys on it).
      duplicates_.emplace(&obj, it->first);
      discarded_.push_back(std::move(it->second));
      it->second = Value();
    }
    slot_ = &it->second;
    keys_.back() = &it->first;
    return true;
  }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::json::exception& ex) override {
    if (ex.id == 406) {  // out_of_range.406: a number literal beyond a double (1e400)
      // Point at the number's first character (nlohmann's position is past its last).
      const size_t start = position + 1 - std::min(position, last_token.size());
      const std::string where = path();
      fail(start, strf("%s%sthe number %s is beyond the range of a double (magnitude above "
                       "1.8e308)", where.empty() ? "" : "field ", where.c_str(),
                       printable(last_token, 40).c_str()));
    }
    // An empty text gets our own sentence: nlohmann's wording for it changed between releases
    // (Debian 12's 3.11.2 says "unexpected end of input", the GPU machine's newer copy "attempting
    // to parse an empty input"), and a test pins the message.
    if (text_.find_first_not_of(" \t\r\n") == std::string::npos)
      fail(position, "malformed JSON: unexpected end of input (the text is empty or only "
                     "whitespace)");
    // nlohmann: "[json.exception.parse_error.101] parse error at line 1, column 5: <why>". Keep
    // <why>, with the token it quotes escaped and shortened.
    std::string why = ex.what();
    const size_t col = why.find(", column ");
    const size_t colon = col == std::string::npos ? col : why.find(": ", col);
    if (colon != std::string::npos) {
      why = why.substr(colon + 2);
    } else if (why.compare(0, 16, "[json.exception.") == 0 && why.find("] ") != std::string::npos) {
      why = why.substr(why.find("] ") + 2);
    }
    const std::string quoted = "last read: '" + last_token + "'";
    const size_t at = why.find(quoted);
    if (at != std::string::npos)
      why.replace(at, quoted.size(), "last read: " + detail::quote_user_text(last_token, 40));
    fail(position, "malformed JSON: " + escape_bytes(why, 400));
  }

 private:
  [[noreturn]] void fail(size_t position, const std::string& why) const {
    // position: bytes read, the offending one included (1 for an empty text).
    const size_t end = position == 0 ? 0 : std::min(position - 1, text_.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < end; ++i)
      if (text_[i] == '\n') { ++line; line_start = i + 1; }
    raise(__FILE__, __LINE__,
          strf("%s:%zu:%zu: %s", printable(origin_).c_str(), line, end - line_start + 1,
               why.c_str()));
  }

  // Where the parser is, as "\"text_config.routed_scaling_factor\": " ("" at the top level).
  std::string path() const {
    std::string p;
    for (size_t i = 0; i < stack_.size(); ++i) {
      if (stack_[i]->is_array()) {
        // Enclosing arrays already hold the open child; the innermost one not yet the value.
        const size_t n = stack_[i]->size();
        p += strf("[%zu]", i + 1 < stack_.size() ? n - 1 : n);
      } else if (keys_[i]) {
        p += (p.empty() ? "" : ".") + *keys_[i];
      }
    }
    return p.empty() ? p : detail::quote_user_text(p, 80) + ": ";
  }

  Value* put(Value&& v) {
    if (++num_values_ > limits_.max_values)
      raise(__FILE__, __LINE__,
            strf("%s: JSON document with more than %lld values (numbers, strings, arrays, ...): "
                 "refused to bound memory", printable(origin_).c_str(), limits_.max_values));
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Value& top = *stack_.back();
    if (top.is_array()) {
      Value::array_t& arr = top.get_ref<Value::array_t&>();
      arr.push_back(std::move(v));
      return &arr.back();
    }
    *slot_ = std::move(v);  // an object: key() chose the slot
    return slot_;
  }

  void open(Value::value_t kind) {
    // No position here (SAX events carry none): the depth and the origin name the problem.
    if (int(stack_.size()) >= limits_.max_depth)
      raise(__FILE__, __LINE__,
            strf("%s: malformed JSON: arrays and objects nested deeper than %d levels",
                 printable(origin_).c_str(), limits_.max_depth));
    // The new container stays where put() placed it while it is open: nothing is added to its
    // parent until it is closed, so the pointer on the stack stays valid.
    stack_.push_back(put(Value(kind)));
    keys_.push_back(nullptr);
  }

  void close() {
    stack_.pop_back();
    keys_.pop_back();
  }

  std::string_view text_;
  const std::string& origin_;
  const Limits& limits_;
  Value& root_;
  std::set<std::pair<const Value::object_t*, std::string>>& duplicates_;
  std::vector<Value*> stack_;   // open arrays and objects, innermost last
  std::vector<const std::string*> keys_;  // per open object: its current key (for messages)
  Value* slot_ = nullptr;       // where the value after the last key goes
  long long num_values_ = 0;
  std::vector<Value> discarded_;
};

}  // namespace

ScopedCLocale::ScopedCLocale() : previous_(uselocale(c_locale())) {}
ScopedCLocale::~ScopedCLocale() { uselocale(previous_); }

Document parse(std::string_view text, const std::string& origin, const Limits& limits) {
  // nlohmann reads floats with strtod after swapping '.' for the first byte of localeconv()'s
  // decimal point: right for "de_DE" (','), wrong for a multi-byte one (ps_AF's U+066B, where it
  // also trips an assertion). Under "C" both are plain '.'.
  const ScopedCLocale c_numbers;
  Document doc;
  DomBuilder builder(text, origin, limits, doc.root_, doc.duplicates_);
  const char* begin = text.empty() ? "" : text.data();
  // strict: the whole text is one value; no comments.
  const bool ok = Value::sax_parse(begin, begin + text.size(), &builder,
                                   Value::input_format_t::json, /*strict=*/true,
                                   /*ignore_comments=*/false);
  FMOE_REQUIRE(ok, "%s: malformed JSON (the parser stopped without a reason)",
               printable(origin).c_str());
  return doc;
}

}  // namespace fusedmoe::json
