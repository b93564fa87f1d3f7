#include "common/text.hpp"

#include <cstdio>

namespace fusedmoe::detail {

std::string quote_user_text(std::string_view text, size_t max_chars) {
  std::string out = "\"";
  const size_t n = text.size() < max_chars ? text.size() : max_chars;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c >= 0x20 && c < 0x7F) {
          out += char(c);
        } else {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02X", c);
          out += buf;
        }
    }
  }
  out += "\"";
  if (text.size() > n) {
    char buf[48];
    std::snprintf(buf, sizeof(buf), "...(%zu bytes)", text.size());
    out += buf;
  }
  return out;
}

}  // namespace fusedmoe::detail
