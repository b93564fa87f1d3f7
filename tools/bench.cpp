// fusedmoe bench: `bench ceilings` and `bench --op NAME [op options] [--json PATH]`.
#include <unistd.h>

#include <cstdio>
#include <set>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/device.hpp"
#include "tools/cli.hpp"
#include "tools/ep_launch.hpp"

namespace fusedmoe::bench {
std::vector<BenchOp>& bench_ops() {
  static std::vector<BenchOp> ops;
  return ops;
}
}  // namespace fusedmoe::bench

namespace fusedmoe::cli {
namespace {

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

const char* kJsonHelp = "also write every row, the ceilings, the device, clocks and the commit";

// The value of --op in `argv` ("" when absent); a missing value is a UsageError.
std::string op_name(const std::vector<std::string>& argv) {
  std::string name;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i] == "--op") {
      if (i + 1 >= argv.size() || looks_like_option(argv[i + 1]))
        throw UsageError("--op needs a value (an op name; see the list below)");
      name = argv[i + 1];
    } else if (argv[i].rfind("--op=", 0) == 0) {
      name = argv[i].substr(5);
    }
  }
  return name;
}

const bench::BenchOp& find_op(const std::string& name) {
  std::string names;
  for (const auto& o : bench::bench_ops()) {
    if (name == o.name) return o;
    names += std::string(names.empty() ? "" : ", ") + o.name;
  }
  throw UsageError(strf("unknown benchmark op %s; the ops are: %s", cli::quoted(name).c_str(),
                        names.c_str()));
}

std::string op_usage(const bench::BenchOp& op) {
  std::string u = strf("usage: fusedmoe bench --op %s [options] [--json PATH]\n\n%s.\n\n"
                       "options:\n", op.name, op.help);
  auto line = [&](const std::string& left, const char* help) {
    u += left.size() <= 22 ? strf("  %-22s %s\n", left.c_str(), help)
                           : strf("  %s\n  %-22s %s\n", left.c_str(), "", help);
  };
  for (const bench::BenchOption& o : op.options) line(strf("--%s %s", o.name, o.value), o.help);
  line("--json PATH", kJsonHelp);
  return u;
}

// Checks every op option the way the op will read it, before the GPU is touched.
void check_op_options(const bench::BenchOp& op, const Args& args) {
  using Kind = bench::BenchOption::Kind;
  for (const bench::BenchOption& o : op.options) {
    if (!args.has(o.name)) continue;
    switch (o.kind) {
      case Kind::text: break;
      case Kind::choice: args.choice(o.name, "", o.choices); break;
      case Kind::integer: args.integer(o.name, 0, o.lo, o.hi); break;
      case Kind::int_list: args.int_list(o.name, {}, o.lo, o.hi); break;
      case Kind::preset: {
        const std::string name = args.str(o.name, "");
        std::string names;
        bool found = false;
        for (const MoeConfig& c : model_presets()) {
          found = found || c.name == name;
          names += (names.empty() ? "" : ", ") + c.name;
        }
        if (!found)
          throw UsageError(strf("--%s: unknown preset %s; the presets are: %s", o.name,
                                cli::quoted(name).c_str(), names.c_str()));
        break;
      }
    }
  }
}

// A --json path whose directory cannot be written would fail after minutes of measuring.
void check_json_path(const std::string& path) {
  if (path.empty()) throw UsageError("--json needs a file path");
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(dir.c_str(), W_OK) != 0)
    throw UsageError(strf("--json %s: the directory %s does not exist or is not writable",
                          cli::quoted(path).c_str(), cli::quoted(dir).c_str()));
}

}  // namespace

std::string bench_usage(const std::vector<std::string>& argv) {
  const bool ceilings = !argv.empty() && argv[0] == "ceilings";
  const std::string name = ceilings ? "" : op_name(argv);
  if (!name.empty()) return op_usage(find_op(name));
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
  std::set<std::string> valued = {"json"};
  const bench::BenchOp* op = nullptr;
  if (only_ceilings) {
    if (!op_name(argv).empty())
      throw UsageError("'bench ceilings' takes no --op (it measures the ceilings only; 'bench "
                       "--op NAME' measures them too)");
  } else {
    const std::string name = op_name(argv);
    if (name.empty()) throw UsageError("give 'ceilings' or --op NAME");
    op = &find_op(name);
    valued.insert("op");
    for (const bench::BenchOption& o : op->options) valued.insert(o.name);
    if (op->launch) valued.insert(kEpChildOption);  // a rank process of a multi-process op
  }
  Args args(argv, valued, {});
  if (op) {
    check_op_options(*op, args);
    if (op->check) op->check(args);
  }
  if (args.has("json")) check_json_path(args.str("json", ""));
  // A multi-process op: the parent starts the ranks; a rank binds its GPU and only rank 0 prints
  // the ceilings and the table (each rank measures its own card's ceilings) and writes the JSON.
  int device = 0;
  bool quiet = false;
  if (op && op->launch) {
    if (!args.has(kEpChildOption)) return op->launch(args, argv_in);
    const EpChild ch = parse_ep_child(args.str(kEpChildOption, ""), int(args.integer("ep", 1, 1, 1 << 10)));
    device = ch.device;
    quiet = ch.rank != 0;
  }
  set_activity("benchmarking");
  std::string why;
  FMOE_REQUIRE(gpu_usable(device, &why), "bench needs an sm_90 GPU: %s", why.c_str());
  FMOE_CUDA(cudaSetDevice(device));

  cudaStream_t stream;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (!quiet) std::printf("measuring ceilings (copy bandwidth, cuBLASLt FP8/BF16 8192^3) ...\n");
  std::fflush(stdout);
  const bench::Ceilings& c = bench::ceilings(stream);
  if (!quiet) std::printf("device %s, %d SMs, L2 %.0f MiB, max clocks SM %d / mem %d MHz\n", c.device.c_str(),
              c.sm_count, c.l2_bytes / (1 << 20), c.sm_clock_mhz, c.mem_clock_mhz);
  if (!quiet) std::printf("ceilings: bytes %.0f GB/s (best: %s; copy kernels %.0f / %.0f, read-only %.0f, "
              "memcpy %.0f in a graph / %.0f direct), FP8 GEMM %.0f TFLOP/s, BF16 GEMM %.0f "
              "TFLOP/s\n", c.copy_gbps, c.copy_source.c_str(), c.copy_kernel_gbps,
              c.copy_nc8_gbps, c.read_gbps, c.memcpy_gbps, c.memcpy_nograph_gbps, c.fp8_tflops,
              c.bf16_tflops);
  std::vector<bench::Row> rows;
  if (op) {
    bench::Context ctx{stream, &c, &rows};
    if (!quiet) bench::print_header();
    op->run(ctx, args);
  }
  if (args.has("json") && !quiet) {
    std::string command = "fusedmoe bench";
    for (const auto& a : argv_in) command += " " + a;
    bench::write_json(args.str("json", ""), c, rows, command);
    std::printf("wrote %s\n", args.str("json", "").c_str());
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace fusedmoe::cli
