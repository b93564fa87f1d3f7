// fusedmoe: the command-line tool. Subcommands: info, run, list-presets (bench arrives with the
// GPU kernels). Exit codes: 0 success, 1 a library error, 2 a bad command line.
#include <cstdio>
#include <string>
#include <vector>

#include "fmoe_commit.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/device.hpp"
#include "fusedmoe/error.hpp"
#include "tools/cli.hpp"

namespace fusedmoe::cli {
namespace {

const char* kMainUsage =
    "usage: fusedmoe <command> [options]\n"
    "\n"
    "commands:\n"
    "  info           the GPUs this machine has (arch, memory, driver), or that it has none\n"
    "  run            one MoE layer forward of a model preset, checked against the CPU reference\n"
    "  list-presets   the model presets and their shapes and routing\n"
    "  bench          time an op (or 'bench ceilings': this card's copy and GEMM rates)\n"
    "\n"
    "Run 'fusedmoe <command> --help' for a command's options.\n";

const char* kInfoUsage =
    "usage: fusedmoe info\n"
    "\n"
    "Prints the build (commit, CUDA runtime) and every CUDA device: name, compute capability,\n"
    "SMs, memory, L2, clocks and whether the kernels (sm_90a) run on it.\n";

const char* kPresetsUsage =
    "usage: fusedmoe list-presets\n"
    "\n"
    "Prints each model preset: hidden size H, expert intermediate size I, experts E, top-k,\n"
    "shared experts, routing function, activation and weight/activation precision.\n";

int cmd_info(const std::vector<std::string>& argv) {
  Args args(argv, {}, {});
  const DeviceReport r = query_devices();
  std::printf("fusedmoe %s (commit %s)\n", "0.1.0", FMOE_GIT_COMMIT);
  if (!r.built_with_cuda) {
    std::printf("build    : CPU reference only (no CUDA)\n");
  } else {
    std::printf("build    : CUDA runtime %d.%d, kernels for sm_90a\n", r.runtime_version / 1000,
                (r.runtime_version % 1000) / 10);
    if (r.driver_version)
      std::printf("driver   : CUDA %d.%d\n", r.driver_version / 1000, (r.driver_version % 1000) / 10);
  }
  if (r.devices.empty()) {
    std::printf("GPUs     : none (%s)\n", r.why_none.c_str());
    std::printf("           'fusedmoe run' uses the CPU reference on this machine\n");
    return 0;
  }
  for (const DeviceInfo& d : r.devices) {
    std::printf("GPU %d    : %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.0f MiB, smem/block %zu KiB, "
                "SM clock %d MHz, memory clock %d MHz x %d bit%s\n",
                d.index, d.name.c_str(), d.cc_major, d.cc_minor, d.sm_count,
                double(d.global_mem_bytes) / (1 << 30), double(d.l2_bytes) / (1 << 20),
                d.smem_per_block_optin / 1024, d.sm_clock_khz / 1000, d.mem_clock_khz / 1000,
                d.mem_bus_bits, d.supported() ? "" : "  (unsupported: kernels need sm_90)");
  }
  return 0;
}

int cmd_list_presets(const std::vector<std::string>& argv) {
  Args args(argv, {}, {});
  for (const MoeConfig& c : model_presets())
    std::printf("%s%s\n", c.summary().c_str(),
                c.name == default_preset_name() ? "   [default]" : "");
  return 0;
}

struct Command {
  const char* name;
  int (*fn)(const std::vector<std::string>&);
  std::string usage;
};

}  // namespace
}  // namespace fusedmoe::cli

int main(int argc, char** argv) {
  using namespace fusedmoe::cli;
  const Command commands[] = {
      {"info", cmd_info, kInfoUsage},
      {"run", cmd_run, kRunUsage},
      {"list-presets", cmd_list_presets, kPresetsUsage},
#if defined(FMOE_HAS_CUDA)
      {"bench", cmd_bench, bench_usage()},
#endif
  };
  if (argc < 2) {
    std::fprintf(stderr, "fusedmoe: missing command\n%s", kMainUsage);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    std::printf("%s", kMainUsage);
    return 0;
  }
  for (const Command& c : commands) {
    if (name != c.name) continue;
    std::vector<std::string> rest(argv + 2, argv + argc);
    for (const std::string& a : rest)
      if (a == "--help" || a == "-h") {
        std::printf("%s", c.usage.c_str());
        return 0;
      }
    try {
      return c.fn(rest);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "fusedmoe %s: %s\n%s", c.name, e.what(), c.usage.c_str());
      return 2;
    } catch (const fusedmoe::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fusedmoe: unexpected error: %s\n", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "fusedmoe: unknown command \"%s\"\n%s", name.c_str(), kMainUsage);
  return 2;
}
