#include "tools/cli.hpp"

#include <cerrno>
#include <cstdlib>

#include "fusedmoe/error.hpp"

namespace fusedmoe::cli {

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2)
      throw UsageError(strf("unexpected argument \"%s\"", a.c_str()));
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name)) {
      if (inline_value) throw UsageError(strf("option --%s takes no value", name.c_str()));
      values_[name] = "1";
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw UsageError(strf("option --%s needs a value", name.c_str()));
        value = argv[++i];
      }
      values_[name] = value;
    } else {
      throw UsageError(strf("unknown option --%s", name.c_str()));
    }
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

long long parse_int(const std::string& option, const std::string& text, long long lo, long long hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(strf("--%s expects an integer, got \"%s\"", option.c_str(), text.c_str()));
  if (v < lo || v > hi)
    throw UsageError(strf("--%s must be in [%lld, %lld], got %lld", option.c_str(), lo, hi, v));
  return v;
}

long long Args::integer(const std::string& name, long long fallback, long long lo, long long hi) const {
  return has(name) ? parse_int(name, str(name, ""), lo, hi) : fallback;
}

double Args::number(const std::string& name, double fallback) const {
  if (!has(name)) return fallback;
  const std::string text = str(name, "");
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0')
    throw UsageError(strf("--%s expects a number, got \"%s\"", name.c_str(), text.c_str()));
  return v;
}

std::vector<long long> Args::int_list(const std::string& name,
                                      const std::vector<long long>& fallback, long long lo,
                                      long long hi) const {
  if (!has(name)) return fallback;
  std::vector<long long> out;
  const std::string text = str(name, "");
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    out.push_back(parse_int(name, text.substr(start, comma - start), lo, hi));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace fusedmoe::cli
