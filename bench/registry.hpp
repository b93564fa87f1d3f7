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

struct BenchOp {
  const char* name;
  const char* help;  ///< one line for the listing
  /// Options the op accepts beyond the common ones (--op, --json); validated by cli::Args.
  std::vector<std::string> options;
  void (*run)(const Context&, const cli::Args&);
};

std::vector<BenchOp>& bench_ops();

struct Register {
  explicit Register(BenchOp op) { bench_ops().push_back(std::move(op)); }
};

}  // namespace fusedmoe::bench
