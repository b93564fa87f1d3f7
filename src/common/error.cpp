#include "fusedmoe/error.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <vector>

namespace fusedmoe {

std::string strf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::vector<char> buf(size_t(n > 0 ? n : 0) + 1, '\0');
  if (n > 0) std::vsnprintf(buf.data(), buf.size(), fmt, args);
  va_end(args);
  return std::string(buf.data());
}

void raise(const char* file, int line, const std::string& msg) {
  // The message is for the user: "fusedmoe: <sentence>". Debug builds append the location of the
  // check, " [file.cpp:123]", last so the CLI's one-line reason still reads naturally.
#if defined(NDEBUG)
  (void)file;
  (void)line;
  throw Error("fusedmoe: " + msg);
#else
  const char* base = std::strrchr(file, '/');
  base = base ? base + 1 : file;
  throw Error(strf("fusedmoe: %s [%s:%d]", msg.c_str(), base, line));
#endif
}

}  // namespace fusedmoe
