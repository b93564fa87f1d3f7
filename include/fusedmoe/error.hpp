// fusedmoe: the one exception type of the library.
#pragma once

#include <stdexcept>
#include <string>

namespace fusedmoe {

/// Every failure the library reports: invalid arguments (with the argument's name and the
/// expected versus actual value), CUDA errors (call text, error name, file:line), unreadable
/// files. The library never calls exit() or abort() on user input.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// printf-style formatting into a std::string.
std::string strf(const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/// Throws Error("fusedmoe: <msg>"); file and line are appended in debug builds.
[[noreturn]] void raise(const char* file, int line, const std::string& msg);

}  // namespace fusedmoe

/// Argument check at an API boundary: FMOE_REQUIRE(k % 16 == 0, "gemv: k=%d must be ...", k).
#define FMOE_REQUIRE(cond, ...)                                                   \
  do {                                                                            \
    if (!(cond)) ::fusedmoe::raise(__FILE__, __LINE__, ::fusedmoe::strf(__VA_ARGS__)); \
  } while (0)
