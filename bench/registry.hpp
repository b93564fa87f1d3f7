// `fusedmoe bench --op NAME`: each bench/*.cpp registers its ops here at static-init time, so a
// new benchmark is one new file (the CLI executable links every bench source).
#pragma once

#include <string>
#include <vector>

#include "bench/harness.hpp"
#include "tools/cli.hpp"

namespace fusedmoe::bench {

struct Context {
  cudaStream_t stream = nullptr;
  const Ceilings* ceil = nullptr;
  std::vector<Row>* rows = nullptr;  ///< append every measured row here
};

/// One option of an op: what `fusedmoe bench --op NAME --help` prints, and what the CLI checks
/// before it touches the GPU (so a typo fails in a second, not after the ceilings).
struct BenchOption {
  enum class Kind {
    text,      ///< any value
    choice,    ///< one of `choices`
    integer,   ///< an integer in [lo, hi]
    int_list,  ///< comma-separated integers in [lo, hi]
    preset,    ///< a model preset name
  };
  const char* name;   ///< without the leading "--"
  const char* value;  ///< the value's placeholder in the usage: "N", "LIST", "on|off"
  const char* help;   ///< one line, with the default
  Kind kind = Kind::text;
  std::vector<std::string> choices = {};
  long long lo = 0, hi = 0;
};

struct BenchOp {
  const char* name;
  const char* help;  ///< one line for the listing
  /// Options the op accepts beyond the common ones (--op, --json).
  std::vector<BenchOption> options;
  void (*run)(const Context&, const cli::Args&);
  /// Optional: checks that span several options (a custom shape's sizes against each other),
  /// throwing cli::UsageError; called with the per-option checks, before the GPU is touched.
  void (*check)(const cli::Args&) = nullptr;
  /// Optional: an op that runs as several processes (bench --op ep_layer). In the process the
  /// user started (no --ep-child), `launch` runs instead of the ceilings and `run`: it checks
  /// what needs the machine and starts the rank processes, which run the op (tools/ep_launch.hpp);
  /// `argv` are bench's arguments as given. Returns the exit status.
  int (*launch)(const cli::Args&, const std::vector<std::string>& argv) = nullptr;
};

std::vector<BenchOp>& bench_ops();

struct Register {
  explicit Register(BenchOp op) { bench_ops().push_back(std::move(op)); }
};

}  // namespace fusedmoe::bench
