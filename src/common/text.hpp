// Text the user gave, made safe to print inside a message: quoted, control characters and
// non-ASCII bytes escaped (a decoded "\u001b]0;...\u0007" must not retitle the terminal, a NUL
// must not cut the message short), and truncated (a 100 KB name is not echoed whole).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace fusedmoe::detail {

/// "\"name\"" with \n, \t, \", \\ and every other byte outside 0x20..0x7E as \xHH; at most
/// `max_chars` characters of the input, then "...(N bytes)".
std::string quote_user_text(std::string_view text, size_t max_chars = 80);

}  // namespace fusedmoe::detail
