#include "tools/cli.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "common/text.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe::cli {

std::string quoted(const std::string& text) { return detail::quote_user_text(text); }

bool looks_like_option(const std::string& token) {
  return token.size() >= 2 && token[0] == '-' &&
         (token[1] == '-' || std::isalpha(static_cast<unsigned char>(token[1])));
}

Args::Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
           const std::set<std::string>& flags) {
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a.size() == 2) {
      if (looks_like_option(a)) throw UsageError("unknown option " + cli::quoted(a));
      throw UsageError("unexpected argument " + cli::quoted(a) +
                       " (options are --name VALUE or --name=VALUE)");
    }
    std::string name = a.substr(2), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (flags.count(name)) {
      if (inline_value) throw UsageError(strf("--%s takes no value", name.c_str()));
      value.push_back('1');  // (not value = "1": g++ 12 warns falsely on that, -Wrestrict)
    } else if (valued.count(name)) {
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw UsageError(strf("--%s needs a value", name.c_str()));
        // "--tokens --backend cpu": the user forgot the value; taking "--backend" as it would
        // report "cpu" as the mistake. A value that starts with "--" can be given as --name=VALUE.
        if (looks_like_option(argv[i + 1]))
          throw UsageError(strf("--%s needs a value (%s is an option, not a value)", name.c_str(),
                                cli::quoted(argv[i + 1]).c_str()));
        value = argv[++i];
      }
    } else {
      throw UsageError("unknown option " + cli::quoted("--" + name));
    }
    if (!values_.emplace(name, value).second)
      throw UsageError(strf("--%s is given more than once", name.c_str()));
  }
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

long long parse_int(const std::string& option, const std::string& text, long long lo, long long hi) {
  // strtoll alone would take " 5", "+5" and stop at nothing worse than the end: digits only.
  const size_t digits = text.size() > 0 && text[0] == '-' ? 1 : 0;
  bool ok = text.size() > digits;
  for (size_t i = digits; ok && i < text.size(); ++i)
    ok = std::isdigit(static_cast<unsigned char>(text[i])) != 0;
  errno = 0;
  const long long v = ok ? std::strtoll(text.c_str(), nullptr, 10) : 0;
  if (!ok)
    throw UsageError(strf("--%s expects an integer, got %s", option.c_str(), cli::quoted(text).c_str()));
  if (errno == ERANGE || v < lo || v > hi)
    throw UsageError(strf("--%s must be in [%lld, %lld], got %s", option.c_str(), lo, hi,
                          cli::quoted(text).c_str()));
  return v;
}

long long Args::integer(const std::string& name, long long fallback, long long lo, long long hi) const {
  return has(name) ? parse_int(name, str(name, ""), lo, hi) : fallback;
}

std::string Args::choice(const std::string& name, const std::string& fallback,
                         const std::vector<std::string>& choices) const {
  const std::string v = str(name, fallback);
  std::string list;
  for (const std::string& c : choices) {
    if (v == c) return v;
    list += (list.empty() ? "" : ", ") + c;
  }
  throw UsageError(strf("--%s must be one of %s, got %s", name.c_str(), list.c_str(),
                        cli::quoted(v).c_str()));
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

namespace {
const char* g_activity = "running the command";
}  // namespace

void set_activity(const char* what) { g_activity = what; }
const char* activity() { return g_activity; }

}  // namespace fusedmoe::cli
