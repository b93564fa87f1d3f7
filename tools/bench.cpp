// fusedmoe bench: `bench ceilings` and `bench --op NAME [op options] [--json PATH]`.
#include <cstdio>
#include <set>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "fusedmoe/device.hpp"
#include "tools/cli.hpp"

namespace fusedmoe::bench {
std::vector<BenchOp>& bench_ops() {
  static std::vector<BenchOp> ops;
  return ops;
}
}  // namespace fusedmoe::bench

namespace fusedmoe::cli {

const char* kBenchUsage =
    "usage: fusedmoe bench ceilings [--json PATH]\n"
    "       fusedmoe bench --op NAME [options] [--json PATH]\n"
    "\n"
    "Times an op with CUDA events over CUDA-graph replays (median, p10, p90) after a warm-up, on\n"
    "random inputs rotated so weights come from HBM, and prints TFLOP/s, GB/s and the ratio to\n"
    "the floor measured in the same run (bytes over copy bandwidth, or FLOPs over the dense\n"
    "cuBLASLt rate). 'ceilings' measures the copy bandwidth and the dense FP8/BF16 GEMM rates.\n"
    "--json PATH also writes every row, the ceilings, the device, clocks and the commit.\n"
    "Run 'fusedmoe bench --op NAME --help' for an op's options. Ops:\n";

std::string bench_usage() {
  std::string u = kBenchUsage;
  for (const auto& op : bench::bench_ops()) u += strf("  %-12s %s\n", op.name, op.help);
  return u;
}

int cmd_bench(const std::vector<std::string>& argv_in) {
  std::vector<std::string> argv = argv_in;
  bool only_ceilings = false;
  if (!argv.empty() && argv[0] == "ceilings") {
    only_ceilings = true;
    argv.erase(argv.begin());
  }
  std::set<std::string> valued = {"op", "json"};
  const bench::BenchOp* op = nullptr;
  if (!only_ceilings) {
    std::string name;
    for (size_t i = 0; i < argv.size(); ++i) {
      if (argv[i] == "--op" && i + 1 < argv.size()) name = argv[i + 1];
      if (argv[i].rfind("--op=", 0) == 0) name = argv[i].substr(5);
    }
    if (name.empty()) throw UsageError("give 'ceilings' or --op NAME");
    for (const auto& o : bench::bench_ops())
      if (name == o.name) op = &o;
    if (!op) throw UsageError(strf("unknown benchmark op \"%s\"", name.c_str()));
    valued.insert(op->options.begin(), op->options.end());
  }
  Args args(argv, valued, {});
  std::string why;
  FMOE_REQUIRE(gpu_usable(0, &why), "bench needs an sm_90 GPU: %s", why.c_str());

  cudaStream_t stream;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("measuring ceilings (copy bandwidth, cuBLASLt FP8/BF16 8192^3) ...\n");
  std::fflush(stdout);
  const bench::Ceilings& c = bench::ceilings(stream);
  std::printf("device %s, %d SMs, L2 %.0f MiB, max clocks SM %d / mem %d MHz\n", c.device.c_str(),
              c.sm_count, c.l2_bytes / (1 << 20), c.sm_clock_mhz, c.mem_clock_mhz);
  std::printf("ceilings: copy %.0f GB/s (kernel %.0f, memcpy %.0f), FP8 GEMM %.0f TFLOP/s, "
              "BF16 GEMM %.0f TFLOP/s\n", c.copy_gbps, c.copy_kernel_gbps, c.memcpy_gbps,
              c.fp8_tflops, c.bf16_tflops);
  std::vector<bench::Row> rows;
  if (op) {
    bench::Context ctx{stream, &c, &rows};
    bench::print_header();
    op->run(ctx, args);
  }
  if (args.has("json")) {
    std::string command = "fusedmoe bench";
    for (const auto& a : argv_in) command += " " + a;
    bench::write_json(args.str("json", ""), c, rows, command);
    std::printf("wrote %s\n", args.str("json", "").c_str());
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace fusedmoe::cli
