// Command-line plumbing shared by the fusedmoe subcommands.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "fusedmoe/config.hpp"

namespace fusedmoe::cli {

/// A bad command line: main prints "fusedmoe <command>: <what>", the usage of the command, and
/// exits 2. Text the user typed goes into the message through quote_user_text.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `text` quoted for a message: control characters escaped, at most 80 characters echoed.
std::string quoted(const std::string& text);

/// True for a token that is an option, not an option's value: "--x", "--", "-h"; a negative
/// number ("-5", "-.5") is a value.
bool looks_like_option(const std::string& token);

/// "--name value", "--name=value" and bare "--flag"; positional arguments are refused, and so is
/// an option given twice.
class Args {
 public:
  /// `valued` options take a value, `flags` do not; anything else is a UsageError.
  Args(const std::vector<std::string>& argv, const std::set<std::string>& valued,
       const std::set<std::string>& flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::string str(const std::string& name, const std::string& fallback) const;
  long long integer(const std::string& name, long long fallback, long long lo, long long hi) const;
  /// The value, which must be one of `choices` (else a UsageError listing them).
  std::string choice(const std::string& name, const std::string& fallback,
                     const std::vector<std::string>& choices) const;
  /// Comma-separated integers, e.g. "--tokens 1,8,128".
  std::vector<long long> int_list(const std::string& name, const std::vector<long long>& fallback,
                                  long long lo, long long hi) const;

 private:
  std::map<std::string, std::string> values_;
};

/// A decimal integer in [lo, hi] (an optional '-' and digits, nothing else), else a UsageError
/// naming --option.
long long parse_int(const std::string& option, const std::string& text, long long lo, long long hi);

/// What the command is doing now, for the message when host memory runs out ("generating the
/// weights"). main reads it after the exception; it is never reset on the way out.
void set_activity(const char* what);
const char* activity();

int cmd_run(const std::vector<std::string>& args);
/// `run --ep R` (tools/run_ep.cpp): in the parent, checks and starts the R rank processes; in a
/// rank (--ep-child), runs that rank. `argv` are run's arguments as given.
int run_ep(const Args& args, const std::vector<std::string>& argv, const MoeConfig& cfg, int T,
           uint64_t seed, const std::string& mode);
extern const char* kRunUsage;
int cmd_bench(const std::vector<std::string>& args);
/// The usage of `fusedmoe bench`, or of one op when `args` names one with --op (throws
/// UsageError for an unknown op).
std::string bench_usage(const std::vector<std::string>& args);

}  // namespace fusedmoe::cli
