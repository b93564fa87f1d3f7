// Command-line plumbing shared by the fusedmoe subcommands.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace fusedmoe::cli {

/// A bad command line: main prints "fusedmoe: <what>", the usage of the command, and exits 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// "--name value", "--name=value" and bare "--flag"; positional arguments are refused.
class Args {
 public:
  /// `valued` options take a value, `flags` do not; anything else is a UsageError.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
       const std::set<std::string>& flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  long long integer(const std::string& name, long long fallback, long long lo, long long hi) const;
  double number(const std::string& name, double fallback) const;
  /// Comma-separated integers, e.g. "--tokens 1,8,128".
  std::vector<long long> int_list(const std::string& name, const std::vector<long long>& fallback,
                                  long long lo, long long hi) const;

 private:
  std::map<std::string, std::string> values_;
};

long long parse_int(const std::string& option, const std::string& text, long long lo, long long hi);

int cmd_run(const std::vector<std::string>& args);
extern const char* kRunUsage;
int cmd_bench(const std::vector<std::string>& args);
std::string bench_usage();

}  // namespace fusedmoe::cli
