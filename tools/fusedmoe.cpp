// fusedmoe: the command-line tool. Subcommands: info, run, list-presets, bench (CUDA builds).
// Exit codes: 0 success, 1 a library error (including a malformed FMOE_* environment variable
// and running out of host memory), 2 a bad command line (a one-line reason, then the usage).
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/env.hpp"
#include "fmoe_commit.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/device.hpp"
#include "fusedmoe/error.hpp"
#include "tools/cli.hpp"

namespace fusedmoe::cli {
namespace {

const char* kVersion = "0.1.0";

const char* kMainUsage =
    "usage: fusedmoe <command> [options]\n"
    "       fusedmoe help <command> | --help | --version\n"
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
  std::printf("fusedmoe %s (commit %s)\n", kVersion, FMOE_GIT_COMMIT);
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

std::string info_usage(const std::vector<std::string>&) { return kInfoUsage; }
std::string run_usage(const std::vector<std::string>&) { return kRunUsage; }
std::string presets_usage(const std::vector<std::string>&) { return kPresetsUsage; }

struct Command {
  const char* name;
  int (*fn)(const std::vector<std::string>&);
  /// The usage; given the arguments, so `bench --op NAME --help` can show that op's options.
  std::string (*usage)(const std::vector<std::string>&);
};

const Command kCommands[] = {
    {"info", cmd_info, info_usage},
    {"run", cmd_run, run_usage},
    {"list-presets", cmd_list_presets, presets_usage},
#if defined(FMOE_HAS_CUDA)
    {"bench", cmd_bench, bench_usage},
#endif
};

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

bool wants_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "--help" || a == "-h") return true;
  return false;
}

// The usage after a UsageError: the one the arguments ask for when they are valid enough to
// pick it (an op's options), else the command's own.
std::string usage_after_error(const Command& c, const std::vector<std::string>& args) {
  try {
    return c.usage(args);
  } catch (const std::exception&) {
    return c.usage({});
  }
}

int run_command(const Command& c, const std::vector<std::string>& args) {
  try {
    if (wants_help(args)) {
      std::printf("%s", c.usage(args).c_str());
      return 0;
    }
    // Every FMOE_* variable is parsed before the command starts: a malformed one ends it here
    // with one line, not halfway through its output (the first use may be deep inside a step).
    detail::knobs();
    return c.fn(args);
  } catch (const UsageError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "fusedmoe %s: %s\n%s", c.name, e.what(), usage_after_error(c, args).c_str());
    return 2;
  } catch (const fusedmoe::Error& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    // The memory checks up front estimate; this is the last resort when the estimate was short
    // (another process took the memory, a limit the checks cannot see).
    std::fflush(stdout);
    std::fprintf(stderr, "fusedmoe %s: out of host memory while %s; use fewer tokens or a smaller "
                 "model, or free memory\n", c.name, activity());
    return 1;
  } catch (const std::length_error&) {
    std::fflush(stdout);
    std::fprintf(stderr, "fusedmoe %s: a buffer too large for this machine while %s; use fewer "
                 "tokens or a smaller model\n", c.name, activity());
    return 1;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "fusedmoe %s: unexpected error while %s: %s\n", c.name, activity(),
                 e.what());
    return 1;
  }
}

}  // namespace
}  // namespace fusedmoe::cli

int main(int argc, char** argv) {
  using namespace fusedmoe::cli;
  if (argc < 2) {
    std::fprintf(stderr, "fusedmoe: missing command\n%s", kMainUsage);
    return 2;
  }
  const std::string name = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  if (name == "--version") {
    std::printf("fusedmoe %s (commit %s)\n", kVersion, FMOE_GIT_COMMIT);
    return 0;
  }
  if (name == "--help" || name == "-h" || name == "help") {
    if (name == "help" && !rest.empty()) {
      const Command* c = find_command(rest[0]);
      if (!c || rest.size() > 1) {
        std::fprintf(stderr, "fusedmoe help: %s\n%s",
                     c ? "give one command name"
                       : (fusedmoe::cli::quoted(rest[0]) + " is not a command").c_str(),
                     kMainUsage);
        return 2;
      }
      std::printf("%s", c->usage({}).c_str());
      return 0;
    }
    std::printf("%s", kMainUsage);
    return 0;
  }
  if (const Command* c = find_command(name)) return run_command(*c, rest);
  std::fprintf(stderr, "fusedmoe: unknown command %s\n%s", fusedmoe::cli::quoted(name).c_str(), kMainUsage);
  return 2;
}
