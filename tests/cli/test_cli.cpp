// The fusedmoe CLI as a user meets it: exit codes, one-line errors, usage, and a small run.
#include <sys/wait.h>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fusedmoe/checkpoint.hpp"
#include "fusedmoe/device.hpp"
#include "tests/checkpoint/checkpoint_writer.hpp"
#include "tests/test_util.hpp"
#include "tools/model_case.hpp"
#include "tools/projection_case.hpp"

namespace {

struct Result {
  int code;
  std::string out;  // stdout and stderr together
};

// `prefix` runs in the same shell first: environment assignments ("FMOE_THREADS=3") or limits
// ("ulimit -v 2000000;").
// With `merge`, stderr is read with stdout (after it, in time order of the writes).
Result run_cli(const std::string& args, const std::string& prefix = "", bool merge = true) {
  const std::string cmd =
      prefix + " " + std::string(FMOE_CLI_PATH) + " " + args + (merge ? " 2>&1" : "");
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

bool has(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

// A usage error: exit 2, "fusedmoe <cmd>: <reason>" on the first line, then the usage.
void expect_usage_error(const std::string& args, const std::string& reason,
                        const std::string& usage = "usage: fusedmoe ") {
  const Result r = run_cli(args);
  EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
  EXPECT_TRUE(has(first_line(r.out), reason)) << args << "\nwant: " << reason << "\ngot: " << r.out;
  EXPECT_EQ(r.out.rfind("fusedmoe ", 0), 0u) << args << "\n" << r.out;
  EXPECT_TRUE(has(r.out, usage)) << args << "\n" << r.out;
}

// The address space (kB, within 16 MB) the binary needs to start: limits in the tests are set
// above it, so they mean the same on machines whose libraries map more or less.
long long startup_kb() {
  static const long long kb = [] {
    long long lo = 1000, hi = 8000000;  // `--version` fails at lo and runs at hi
    if (run_cli("--version", "ulimit -v " + std::to_string(hi) + ";").code != 0) return -1ll;
    while (hi - lo > 256) {  // 256 KB: the out-of-memory test gives a few MB of headroom
      const long long mid = (lo + hi) / 2;
      (run_cli("--version", "ulimit -v " + std::to_string(mid) + ";").code == 0 ? hi : lo) = mid;
    }
    return hi;
  }();
  return kb;
}

std::string ulimit_v(long long kb_above_startup) {
  return "ulimit -v " + std::to_string(startup_kb() + kb_above_startup) + ";";
}

// The small model of the CLI tests: fp8, H=256, I=64, 16 experts, top-4.
std::string small_config() {
  return write_file("small.json",
      R"({"model_type": "qwen3_moe", "hidden_size": 256, "moe_intermediate_size": 64,
          "num_experts": 16, "num_experts_per_tok": 4,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
}

}  // namespace

TEST(Cli, HelpAndListPresets) {
  for (const char* c : {"--help", "info --help", "run --help", "list-presets --help"}) {
    const Result r = run_cli(c);
    EXPECT_EQ(r.code, 0) << c << "\n" << r.out;
    EXPECT_NE(r.out.find("usage: fusedmoe"), std::string::npos) << c;
  }
  const Result r = run_cli("list-presets");
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(count_lines(r.out), 8) << r.out;
  EXPECT_NE(r.out.find("qwen3.5-35b-a3b: H=2048 I=512 E=256 top-8"), std::string::npos);
}

TEST(Cli, InfoWorksWithOrWithoutGpu) {
  const Result r = run_cli("info");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("GPU"), std::string::npos) << r.out;
}

TEST(Cli, BadArgumentsGiveOneLineReasonAndUsage) {
  Result r = run_cli("frobnicate");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out.rfind("fusedmoe: unknown command \"frobnicate\"", 0), 0u) << r.out;
  r = run_cli("run --tokens abc");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out.rfind("fusedmoe run: --tokens expects an integer, got \"abc\"\n", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("usage: fusedmoe run"), std::string::npos);
  r = run_cli("run --bogus 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("unknown option \"--bogus\""), std::string::npos) << r.out;
  r = run_cli("run --tokens -5");
  EXPECT_EQ(r.code, 2);
  r = run_cli("run --preset a --config b");
  EXPECT_EQ(r.code, 2);
}

TEST(Cli, WrongPresetMalformedConfigAndTopKAreOneLineErrors) {
  expect_usage_error("run --preset qwen9", "--preset: unknown preset \"qwen9\"; the presets are: ");

  Result r = run_cli("run --config " + write_file("bad.json", "{\"model_type\": \"mixtral\",,}"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("malformed JSON"), std::string::npos) << r.out;

  r = run_cli("run --config /nonexistent/config.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("cannot open config file \"/nonexistent/config.json\" (No such file"),
            std::string::npos) << r.out;
  r = run_cli("run --config " + testing::TempDir());
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("(it is a directory)"), std::string::npos) << r.out;

  expect_usage_error("run --preset mixtral-8x7b --top-k 9",
                     "--top-k 9 does not suit the model: mixtral-8x7b: top-k=9 is larger than the "
                     "number of experts (8)");
  expect_usage_error("run --preset llama4-maverick --top-k 2",
                     "--top-k 2 does not suit the model: llama4-maverick: sigmoid_top1_on_input "
                     "routing needs top-k=1, got 2");
  expect_usage_error("run --top-k 0", "--top-k must be in [1, 1048576], got \"0\"");

  r = run_cli("run --config " + write_file("topk.json",
      R"({"model_type": "qwen3_moe", "hidden_size": 256, "moe_intermediate_size": 64,
          "num_experts": 4, "num_experts_per_tok": 5})"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("top-k=5 is larger than the number of experts (4)"), std::string::npos);
}

TEST(Cli, SmallRunPrintsSummaryAndIsDeterministic) {
  const std::string cfg = write_file("small.json",
      R"({"model_type": "qwen3_moe", "hidden_size": 256, "moe_intermediate_size": 64,
          "num_experts": 16, "num_experts_per_tok": 4,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  const Result a = run_cli("run --backend cpu --tokens 9 --seed 5 --config " + cfg);
  ASSERT_EQ(a.code, 0) << a.out;
  for (const char* s : {"backend  : cpu-reference", "tokens   : 9", "fp8_block", "bits hash"})
    EXPECT_NE(a.out.find(s), std::string::npos) << s << "\n" << a.out;
  const Result b = run_cli("run --backend cpu --tokens 9 --seed 5 --config " + cfg);
  const auto hash = [](const std::string& s) { return s.substr(s.find("bits hash")); };
  EXPECT_EQ(hash(a.out), hash(b.out));
  const Result z = run_cli("run --backend cpu --tokens 0 --config " + cfg);
  EXPECT_EQ(z.code, 0) << z.out;
}

TEST(Cli, ProjectionRunsOnTheCpuAndPrintsTheBackend) {
  // auto: the GPU pipeline where one is usable, else the CPU reference; both print the backend.
  Result r = run_cli("run --projection --tokens 4 --preset qwen3-30b-a3b");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"fusedmoe run --projection", "backend  : ", "tokens   : 4", "y[4, 768]",
                        "bits hash"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  if (!fusedmoe::gpu_usable()) {
    EXPECT_NE(r.out.find("backend  : cpu-reference ("), std::string::npos) << r.out;
  }

  // The CPU reference on request, in both modes, is deterministic (same bits hash).
  r = run_cli("run --projection --backend cpu --tokens 4 --seed 3 --preset qwen3-30b-a3b");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("backend  : cpu-reference (--backend cpu)"), std::string::npos) << r.out;
  const Result d = run_cli(
      "run --projection --backend cpu --tokens 4 --seed 3 --mode deterministic --preset qwen3-30b-a3b");
  ASSERT_EQ(d.code, 0) << d.out;
  const auto hash = [](const std::string& s) { return s.substr(s.find("bits hash")); };
  EXPECT_EQ(hash(r.out), hash(d.out));

  r = run_cli("run --projection --backend cpu --tokens 0 --preset qwen3-30b-a3b");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(Cli, ProjectionBadModeAndBackend) {
  expect_usage_error("run --projection --mode turbo",
                     "fusedmoe run: --mode must be one of fast, deterministic, got \"turbo\"",
                     "usage: fusedmoe run");
  // The whole layer has reduction modes too (since the layer runs on the GPU): no usage error.
  {
    const Result r = run_cli("run --mode deterministic --tokens 1 --backend cpu");
    EXPECT_EQ(r.code, 0) << r.out;
  }
  expect_usage_error("run --projection --precision nvfp4",
                     "--projection runs the FP8 pipeline; --precision nvfp4 is not supported");

  if (!fusedmoe::gpu_usable()) {
    const Result r = run_cli("run --projection --backend gpu --tokens 4");
    EXPECT_EQ(r.code, 1) << r.out;  // a valid command line this machine cannot run
    EXPECT_EQ(count_lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("--backend gpu: "), std::string::npos) << r.out;
  }
}

// Issue 8, item 1: every mistake on the command line is exit 2, one line naming the option, and
// the usage; a value is never taken from the next option.
TEST(Cli, UsageErrorsExit2WithTheReasonAndTheUsage) {
  expect_usage_error("run --precision fp4",
                     "fusedmoe run: --precision must be one of bf16, fp8, fp8_block, nvfp4, mxfp4, got "
                     "\"fp4\"", "usage: fusedmoe run");
  expect_usage_error("run --tokens --backend cpu",
                     "fusedmoe run: --tokens needs a value (\"--backend\" is an option, not a value)");
  expect_usage_error("run --backend cpu --tokens", "fusedmoe run: --tokens needs a value");
  expect_usage_error("run --config --tokens 4", "--config needs a value");
  expect_usage_error("run --backend fast", "--backend must be one of auto, cpu, gpu, got \"fast\"");
  expect_usage_error("run --tokens ' 5'", "--tokens expects an integer, got \" 5\"");
  expect_usage_error("run --tokens +5", "--tokens expects an integer, got \"+5\"");
  expect_usage_error("run --tokens 1048577", "--tokens must be in [0, 1048576], got \"1048577\"");
  expect_usage_error("run --seed 99999999999999999999999",
                     "--seed must be in [0, 4611686018427387904], got \"99999999999999999999999\"");
  expect_usage_error("run --tokens 1 --tokens 2", "--tokens is given more than once");
  expect_usage_error("run --projection --projection", "--projection is given more than once");
  expect_usage_error("run --projection=yes", "--projection takes no value");
  expect_usage_error("run -t 5", "unknown option \"-t\"");
  expect_usage_error("run tokens=5", "unexpected argument \"tokens=5\"");
  expect_usage_error("run --", "unknown option \"--\"");
  expect_usage_error("info --verbose", "fusedmoe info: unknown option \"--verbose\"",
                     "usage: fusedmoe info");
  expect_usage_error("info gpu", "fusedmoe info: unexpected argument \"gpu\"");
  expect_usage_error("list-presets --all", "fusedmoe list-presets: unknown option \"--all\"",
                     "usage: fusedmoe list-presets");
  // A negative number is a value, not an option: the range check answers.
  expect_usage_error("run --tokens -5", "--tokens must be in [0, 1048576], got \"-5\"");

  Result r = run_cli("help nope");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(first_line(r.out), "fusedmoe help: \"nope\" is not a command") << r.out;
  r = run_cli("help run");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, run_cli("run --help").out);
  r = run_cli("--version");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("fusedmoe 0.1.0 (commit ", 0), 0u) << r.out;
}

#if defined(FMOE_HAS_CUDA)
// Bench options are checked before the GPU is touched: a typo fails here too, as a usage error.
TEST(Cli, BenchUsageErrorsComeBeforeTheGpu) {
  const std::string op_usage = "usage: fusedmoe bench --op moe_fp8 [options]";
  expect_usage_error("bench", "fusedmoe bench: give 'ceilings' or --op NAME");
  expect_usage_error("bench --op", "fusedmoe bench: --op needs a value");
  expect_usage_error("bench --op --tokens 4", "fusedmoe bench: --op needs a value");
  expect_usage_error("bench --op nope",
                     "unknown benchmark op \"nope\"; the ops are: ep_layer, gemv, nvfp4_grouped_gemm, "
                     "l2_feed, layer, layer_all, moe_fp8, moe_fp8_all");
  expect_usage_error("bench ceilings --op moe_fp8", "'bench ceilings' takes no --op",
                     "usage: fusedmoe bench ceilings");
  expect_usage_error("bench --op moe_fp8 --mode x",
                     "--mode must be one of fast, deterministic, both, got \"x\"", op_usage);
  expect_usage_error("bench --op moe_fp8 --tokens 0", "--tokens must be in [1, 65536], got \"0\"",
                     op_usage);
  expect_usage_error("bench --op moe_fp8 --tokens 1,x", "--tokens expects an integer, got \"x\"");
  expect_usage_error("bench --op moe_fp8 --tokens --mode fast", "--tokens needs a value");
  expect_usage_error("bench --op moe_fp8 --preset qwen9", "--preset: unknown preset \"qwen9\"");
  expect_usage_error("bench --op moe_fp8 --pdl on", "unknown option \"--pdl\"", op_usage);
  expect_usage_error("bench --op moe_fp8_all --preset qwen3-30b-a3b", "unknown option \"--preset\"");
  expect_usage_error("bench --op gemv --pdl x", "--pdl must be one of off, on, both, got \"x\"",
                     "usage: fusedmoe bench --op gemv");
  expect_usage_error("bench --op gemv --tokens 65", "--tokens must be in [1, 64]");
  expect_usage_error("bench --op gemv --json /nonexistent-dir/out.json",
                     "--json \"/nonexistent-dir/out.json\": the directory \"/nonexistent-dir\" "
                     "does not exist or is not writable");
  // nvfp4_grouped_gemm: the per-option checks, and its own check of the custom shape's options
  // against each other (BenchOp::check), all before the GPU.
  const std::string gg_usage = "usage: fusedmoe bench --op nvfp4_grouped_gemm";
  expect_usage_error("bench --op nvfp4_grouped_gemm --shapes all",
                     "--shapes must be one of contest, custom, got \"all\"", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --out e4m3",
                     "--out must be one of bf16, f16, f32, got \"e4m3\"", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --groups 513 --m 1 --n 8 --k 16",
                     "--groups must be in [1, 512]", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --m 8 --n 64 --k 24",
                     "--k must be a multiple of 16", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --groups 3 --m 8,16 --n 64 --k 32",
                     "--m gives 2 group sizes but --groups is 3", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --m 8,8 --k 32",
                     "a custom shape needs --n, --k and --m; --n is missing", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --shapes custom",
                     "a custom shape needs --n, --k and --m", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --shapes contest --m 8 --n 64 --k 32",
                     "describe a custom shape: give them without --shapes contest", gg_usage);
  expect_usage_error("bench --op nvfp4_grouped_gemm --m 0,0 --n 64 --k 32",
                     "--m: the groups need at least one row in all", gg_usage);
  // ep_layer: its options, and the hidden rank option checked like the others.
  const std::string ep_usage = "usage: fusedmoe bench --op ep_layer";
  expect_usage_error("bench --op ep_layer --ep 0", "--ep must be in [1, 1024], got \"0\"", ep_usage);
  expect_usage_error("bench --op ep_layer --ep two", "--ep expects an integer, got \"two\"", ep_usage);
  expect_usage_error("bench --op ep_layer --shared none", "--shared must be one of keep, drop", ep_usage);
  expect_usage_error("bench --op ep_layer --precision nvfp4", "--precision must be one of fp8, bf16",
                     ep_usage);
  expect_usage_error("bench --op layer --ep-child 0,1,0,00", "unknown option \"--ep-child\"");
}

// Issue 8, item 2: the bench usage says to run this to see an op's options.
TEST(Cli, BenchOpHelpPrintsTheOpsOwnOptions) {
  const Result generic = run_cli("bench --help");
  EXPECT_EQ(generic.code, 0) << generic.out;
  EXPECT_TRUE(has(generic.out, "Run 'fusedmoe bench --op NAME --help' for an op's options."));
  for (const char* op : {"moe_fp8", "moe_fp8_all", "gemv", "nvfp4_grouped_gemm", "ep_layer"})
    EXPECT_TRUE(has(generic.out, std::string("\n  ") + op + " ")) << op << "\n" << generic.out;

  Result r = run_cli("bench --op moe_fp8 --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.rfind("usage: fusedmoe bench --op moe_fp8 [options] [--json PATH]\n", 0), 0u)
      << r.out;
  for (const char* opt : {"--preset NAME", "--tokens LIST", "--mode fast|deterministic|both",
                          "--stages on|off", "--seed N", "--json PATH"})
    EXPECT_TRUE(has(r.out, "\n  " + std::string(opt))) << opt << "\n" << r.out;
  EXPECT_FALSE(has(r.out, "Times an op with CUDA events")) << "the generic help:\n" << r.out;
  EXPECT_EQ(run_cli("bench --op=moe_fp8 -h").out, r.out);

  r = run_cli("bench --op gemv --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--tokens LIST", "--configs auto|all", "--pdl off|on|both",
                          "--shapes all|contest|moe", "--time on|off", "--json PATH"})
    EXPECT_TRUE(has(r.out, "\n  " + std::string(opt))) << opt << "\n" << r.out;
  EXPECT_FALSE(has(r.out, "--preset")) << r.out;

  r = run_cli("bench --op nvfp4_grouped_gemm --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--shapes contest|custom", "--groups G", "--n N", "--k K", "--m LIST",
                          "--out bf16|f16|f32", "--l2 cold|warm|both", "--seed N", "--json PATH"})
    EXPECT_TRUE(has(r.out, "\n  " + std::string(opt))) << opt << "\n" << r.out;

  r = run_cli("bench --op ep_layer --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--ep R", "--preset NAME", "--tokens LIST", "--precision fp8|bf16",
                          "--mode fast|deterministic|both", "--shared keep|drop", "--seed N",
                          "--json PATH"})
    EXPECT_TRUE(has(r.out, "\n  " + std::string(opt))) << opt << "\n" << r.out;
  EXPECT_FALSE(has(r.out, "ep-child")) << "the rank option is internal\n" << r.out;

  r = run_cli("bench --op layer --help");
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* opt : {"--presets LIST", "--precision fp8|bf16|both|nvfp4|mxfp4", "--stages on|off",
                          "--configs auto|all", "--routing model|unbiased", "--json PATH"})
    EXPECT_TRUE(has(r.out, "\n  " + std::string(opt))) << opt << "\n" << r.out;
  expect_usage_error("bench --op layer --configs some", "--configs");

  r = run_cli("bench --op moe_fp8_all --help");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "\n  --stages on|off")) << r.out;
  EXPECT_FALSE(has(r.out, "--tokens")) << r.out;

  expect_usage_error("bench --op nope --help", "unknown benchmark op \"nope\"",
                     "usage: fusedmoe bench ceilings");
}
#endif

// Issue 8, item 4: a malformed FMOE_* knob ends every command with one line and exit 1 (the
// header used to be half printed first), and a thread count the system refuses does not abort.
TEST(Cli, MalformedKnobsEndTheCommandWithOneLine) {
  const std::string cfg = small_config();
  const std::string run = "run --backend cpu --tokens 1 --config " + cfg;
  for (const std::string v : {"abc", "0", "-3", "99999999999", "100000", "4x", " 4"}) {
    for (const std::string& args : {run, std::string("info"), std::string("list-presets")}) {
      if (args != run && v != "abc") continue;  // every command once, every value on run
      const Result r = run_cli(args, "FMOE_THREADS='" + v + "'");
      EXPECT_EQ(r.code, 1) << v << " " << args << "\n" << r.out;
      EXPECT_EQ(count_lines(r.out), 1) << v << " " << args << "\n" << r.out;
      EXPECT_TRUE(has(r.out, "environment variable FMOE_THREADS=\"")) << r.out;
      EXPECT_TRUE(has(r.out, "(expected an integer in [1, 4096])")) << r.out;
    }
  }
  const Result r = run_cli("run --backend cpu --tokens 1 --config " + cfg, "FMOE_DEBUG_SYNC=2");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "FMOE_DEBUG_SYNC=\"2\" must be 0 or 1")) << r.out;
  // The 4-bit decode GEMVs' K split, fast mode's bf16 route rows, the schedule's routes a thread.
  for (const auto& [knob, want] : std::vector<std::pair<std::string, std::string>>{
           {"FMOE_GEMV_SPLIT=3", "FMOE_GEMV_SPLIT=\"3\" must be 1, 2 or 4"},
           {"FMOE_GEMV_SPLIT=8", "FMOE_GEMV_SPLIT=\"8\" is out of range"},
           {"FMOE_ROWS16_MIN_T=-1", "FMOE_ROWS16_MIN_T=\"-1\" is out of range"},
           {"FMOE_SCHEDULE_ROUTES=3", "FMOE_SCHEDULE_ROUTES=\"3\" must be 1, 2, 4 or 8"},
           {"FMOE_SCHEDULE_ROUTES=16", "FMOE_SCHEDULE_ROUTES=\"16\" is out of range"}}) {
    const Result k = run_cli("run --backend cpu --tokens 1 --config " + cfg, knob);
    EXPECT_EQ(k.code, 1) << knob << "\n" << k.out;
    EXPECT_EQ(count_lines(k.out), 1) << knob << "\n" << k.out;
    EXPECT_TRUE(has(k.out, want)) << k.out;
  }
  // --help needs no knobs.
  EXPECT_EQ(run_cli("run --help", "FMOE_THREADS=abc").code, 0);
  // The --ep ranks' timeout, before anything starts.
  for (const char* v : {"0", "86401", "1.5"}) {
    const Result e = run_cli("run --ep 1", std::string("FMOE_EP_TIMEOUT=") + v);
    EXPECT_EQ(e.code, 1) << v << "\n" << e.out;
    EXPECT_EQ(count_lines(e.out), 1) << v << "\n" << e.out;
    EXPECT_TRUE(has(e.out, "FMOE_EP_TIMEOUT=\"" + std::string(v) + "\"")) << e.out;
    EXPECT_TRUE(has(e.out, "(expected an integer in [1, 86400])")) << e.out;
  }
}

TEST(Cli, MoreThreadsThanTheSystemAllowsStillRuns) {
  // 4096 threads of 8 MB stacks do not fit in 1.3 GB of address space above what the program
  // needs to start: threads are refused (the first refusal used to be std::terminate,
  // SIGABRT). The run must end cleanly: finished, with the output it has on 2 threads, or (when
  // the threads that did start, each with its stack and malloc arena, leave too little room for
  // the reference's buffers: it depends on how many started first) the one-line out-of-memory
  // message, exit 1. Never an abort.
  ASSERT_GT(startup_kb(), 0);
  const std::string args = "run --projection --backend cpu --preset qwen3-30b-a3b --tokens 4";
  const Result many = run_cli(args, ulimit_v((1300 << 10) + 16384) + " FMOE_THREADS=4096");
  EXPECT_FALSE(has(many.out, "terminate")) << many.out;
  if (many.code == 1) {
    EXPECT_TRUE(has(many.out, "fusedmoe run: out of host memory while ")) << many.out;
    return;
  }
  ASSERT_EQ(many.code, 0) << many.out;
  const Result two = run_cli(args, "FMOE_THREADS=2");
  ASSERT_EQ(two.code, 0) << two.out;
  const auto hash = [](const std::string& s) { return s.substr(s.find("bits hash")); };
  EXPECT_EQ(hash(many.out), hash(two.out));
}

// Issue 8, item 5: the whole host footprint is checked before anything is allocated, and the
// last resort for an allocation that fails anyway is one line, never std::bad_alloc.
TEST(Cli, HostMemoryIsCheckedUpFront) {
  // Token-dependent buffers: 1M tokens of the default preset need hundreds of GB. The limit
  // makes the answer the same on machines with more memory.
  Result r = run_cli("run --backend cpu --tokens 1048576", "ulimit -v 16000000;");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "qwen3.5-35b-a3b with 1048576 tokens needs about ")) << r.out;
  EXPECT_TRUE(has(r.out, " this process can use (")) << r.out;
  EXPECT_TRUE(has(r.out, "; reduce --tokens to at most ")) << r.out;
  EXPECT_FALSE(has(r.out, "bad_alloc")) << r.out;
  // The advice is exact: that many tokens pass the check (the run starts; it is stopped after
  // 2 s), one more does not.
  const int fits = std::atoi(r.out.c_str() + r.out.find("at most ") + 8);
  ASSERT_GT(fits, 0) << r.out;
  r = run_cli("run --backend cpu --tokens " + std::to_string(fits), "ulimit -v 16000000; timeout 2");
  EXPECT_TRUE(has(r.out, "  backend  : cpu-reference")) << r.out;
  EXPECT_FALSE(has(r.out, "needs about")) << r.out;
  r = run_cli("run --backend cpu --tokens " + std::to_string(fits + 1), "ulimit -v 16000000;");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "reduce --tokens to at most " + std::to_string(fits) + ",")) << r.out;

  // The float staging of one expert matrix: a 64K-wide shared expert is 0.8 GB as fp8 but
  // 2.1 GB as floats while it is quantized (the old check counted 0.8 GB and ran out).
  const std::string wide_shared = write_file("wide_shared.json",
      R"({"model_type": "qwen2_moe", "hidden_size": 4096, "moe_intermediate_size": 128,
          "num_experts": 2, "num_experts_per_tok": 1, "shared_expert_intermediate_size": 65536,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  r = run_cli("run --backend cpu --tokens 1 --config " + wide_shared, "ulimit -v 3000000;");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "weights 0.81 GB, float staging 2.15 GB")) << r.out;
  EXPECT_TRUE(has(r.out, "even 0 tokens do not fit")) << r.out;
  EXPECT_FALSE(has(r.out, "bad_alloc")) << r.out;

  // 65536 x 262144 (the largest sizes the config import accepts; the issue's 29203 x 3737984 is
  // now refused as out of range): 52 GB of fp8 weights and 137 GB of staging. The 100 GB limit
  // makes it too much on any machine (a 512 GB GPU host ran it: 3 minutes, then PASS of the run).
  const std::string huge = write_file("huge_shared.json",
      R"({"model_type": "qwen2_moe", "hidden_size": 65536, "moe_intermediate_size": 64,
          "num_experts": 4, "num_experts_per_tok": 2, "shared_expert_intermediate_size": 262144,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  r = run_cli("run --backend cpu --tokens 1 --config " + huge, "ulimit -v 100000000;");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "weights 51.60 GB, float staging 137.44 GB")) << r.out;

  // --projection: the routed GEMM's double results dominate at many tokens.
  r = run_cli("run --projection --backend cpu --tokens 1048576 --preset qwen3-30b-a3b",
              "ulimit -v 16000000;");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "qwen3-30b-a3b --projection with 1048576 tokens needs about ")) << r.out;
  EXPECT_TRUE(has(r.out, "reduce --tokens to at most ")) << r.out;
}

TEST(Cli, OutOfHostMemoryIsOneLineNotBadAlloc) {

  // The last resort: an allocation no check foresaw (here parsing a config.json just under the
  // 4 MiB cap, which holds the text and its JSON tree, under an address-space limit 4 MB above
  // what the program needs to start) fails.
  ASSERT_GT(startup_kb(), 0) << "fusedmoe --version does not run under an 8 GB address space";
  const std::string path = testing::TempDir() + "big_config.json";
  {
    std::ofstream f(path);
    f << "{\"model_type\": \"" << std::string((4 << 20) - 64, 'x') << "\"}";
  }
  const Result r = run_cli("run --backend cpu --config " + path, ulimit_v(4 << 10));
  std::remove(path.c_str());
  EXPECT_EQ(r.code, 1) << r.out.substr(0, 2000);
  EXPECT_EQ(r.out, "fusedmoe run: out of host memory while reading the config file; use fewer "
                   "tokens or a smaller model, or free memory\n");
}

// Issue 8, item 6: what the user typed is quoted, escaped and truncated in every message.
TEST(Cli, UserTextIsQuotedEscapedAndTruncated) {
  const std::string big(100 * 1024, 'a');
  for (const std::string& args : {"run --" + big, "run --preset " + big, "run --tokens " + big,
                                 "run --backend " + big, "run " + big, big,
                                 "run --config /" + big}) {
    const Result r = run_cli(args);
    EXPECT_NE(r.code, 0) << args.substr(0, 40);
    EXPECT_LT(r.out.size(), 4000u) << args.substr(0, 40) << "\n" << r.out.substr(0, 400);
    EXPECT_TRUE(has(first_line(r.out), "...(")) << args.substr(0, 40) << "\n" << first_line(r.out);
  }
  // ESC ] 0 ; ... BEL would retitle the terminal; a newline would forge a second line.
  const std::string evil = "\"$(printf 'x\\033]0;pwned\\007\\ny')\"";
  std::vector<std::string> cases = {"run --preset " + evil, "run --" + evil, "run --precision " + evil,
                                    evil, "run --config " + evil};
#if defined(FMOE_HAS_CUDA)
  cases.push_back("bench --op " + evil);  // bench exists in CUDA builds only
#endif
  for (const std::string& args : cases) {
    const Result r = run_cli(args);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << args << "\n" << r.out;
    EXPECT_EQ(r.out.find('\x07'), std::string::npos) << args << "\n" << r.out;
    EXPECT_TRUE(has(first_line(r.out), "x\\x1B]0;pwned\\x07\\ny")) << args << "\n" << r.out;
  }
}

// Issue 8, item 3: weight generation says it is alive, at a bounded rate, on stderr; the
// weights (and so the output) stay those of the seed, whatever the thread count.
TEST(Cli, WeightGenerationReportsProgressAtABoundedRate) {
  // 80 experts of 2 x 2048 x 1024 + 2048 x 1024: 503M weights, ~5 s on 2 cores.
  const std::string cfg = write_file("progress.json",
      R"({"model_type": "qwen3_moe", "hidden_size": 2048, "moe_intermediate_size": 1024,
          "num_experts": 80, "num_experts_per_tok": 2,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  const std::string err_path = testing::TempDir() + "progress.stderr";
  const Result r = run_cli("run --backend cpu --tokens 2 --config " + cfg + " 2>" + err_path, "",
                           false);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string err = [&] {
    std::ifstream f(err_path);
    return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }();
  std::remove(err_path.c_str());
  EXPECT_FALSE(has(r.out, "% after ")) << "progress belongs on stderr:\n" << r.out;
  const size_t at = r.out.find("generated in ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double seconds = std::atof(r.out.c_str() + at + 13);
  int lines = 0, last_pct = -1;
  for (size_t p = 0; p < err.size(); p = err.find('\n', p) + 1) {
    const std::string line = err.substr(p, err.find('\n', p) - p);
    EXPECT_EQ(line.rfind("  weights  : ", 0), 0u) << "stderr holds only progress:\n" << err;
    EXPECT_TRUE(has(line, "% after ")) << line;
    const int pct = std::atoi(line.c_str() + 13);
    EXPECT_GT(pct, last_pct) << line;
    EXPECT_LT(pct, 100) << line;
    last_pct = pct;
    ++lines;
  }
  EXPECT_LE(lines, int(seconds / 2.0) + 1) << "more than one line per 2 s:\n" << err;
  // A machine fast enough to generate these weights in under 3 s has nothing to report.
  if (seconds >= 3.0) {
    EXPECT_GE(lines, 1) << "no progress in " << seconds << " s:\n" << r.out;
  }
  // The weights, and so the output, do not depend on the thread count.
  const std::string small = "run --backend cpu --tokens 9 --config " + small_config();
  const auto hash = [](const std::string& s) { return s.substr(s.find("bits hash")); };
  EXPECT_EQ(hash(run_cli(small, "FMOE_THREADS=1").out), hash(run_cli(small, "FMOE_THREADS=3").out));
}

// Issue 8: a machine with no driver at all hears that in words, not cudaErrorInsufficientDriver.
TEST(Cli, NoDriverIsSaidInWords) {
  std::string why;
  if (fusedmoe::gpu_usable(0, &why)) GTEST_SKIP() << "this machine has a usable GPU";
  if (why.find("cudaErrorInsufficientDriver") == std::string::npos &&
      why.find("cudaErrorNoDevice") == std::string::npos && why.find("no NVIDIA driver") == std::string::npos)
    GTEST_SKIP() << "no GPU here for another reason: " << why;
  const std::string tiny = write_file("tiny_nodriver.json",
      R"({"model_type": "qwen3_moe", "hidden_size": 64, "moe_intermediate_size": 64,
          "num_experts": 4, "num_experts_per_tok": 2})");
  for (const std::string& args : {std::string("info"), "run --tokens 1 --config " + tiny}) {
    const Result r = run_cli(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "no NVIDIA driver / no GPU found")) << args << "\n" << r.out;
    EXPECT_FALSE(has(r.out, "driver version is insufficient")) << args << "\n" << r.out;
  }
}

// `run --model DIR --layer N`: one layer of a checkpoint the test writes (DeepSeek-shaped FP8, and
// ModelOpt NVFP4), read, run on the CPU here (and on the GPU where there is one), and the very
// output the reference gives for that layer, x and router.
namespace {

const char* kCkptConfig = R"({"model_type": "deepseek_v3", "hidden_size": 256,
  "moe_intermediate_size": 128, "n_routed_experts": 4, "n_shared_experts": 1,
  "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "routed_scaling_factor": 2.5,
  "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})";
const char* kCkptNvfp4Config = R"({"model_type": "qwen3_moe", "hidden_size": 256,
  "moe_intermediate_size": 64, "num_experts": 4, "num_experts_per_tok": 2,
  "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"}})";

// A model directory with `config` whose layer 1 holds seeded weights (in files split in 2 shards).
std::string write_checkpoint(const std::string& tag, const char* config) {
  const std::string dir = fusedmoe::test::st::temp_dir(tag);
  fusedmoe::test::st::write(dir + "/config.json", config);
  const fusedmoe::MoeConfig cfg = fusedmoe::config_from_hf_json_text(config, "test");
  const fusedmoe::ref::LayerWeights lw = fusedmoe::ref::make_random_layer(cfg, 21);
  fusedmoe::test::ckpt::Names n;
  n.block = "model.layers.1.mlp.";
  fusedmoe::test::ckpt::write_model(dir, fusedmoe::test::ckpt::per_expert(lw, n, 22), 2);
  return dir;
}

// The bits hash of the reference's output for layer 1 of `dir` at T tokens and `seed`, computed
// here from the loader, the same x and the layer's router: what `run --model` must print.
std::string expected_hash(const std::string& dir, int T, uint64_t seed) {
  using namespace fusedmoe;
  CheckpointLayer ck = load_moe_layer(dir, 1);
  const std::vector<float> x = ref::random_bf16(int64_t(T) * ck.config.hidden, seed, cli::kStreamX, 1.0f);
  const std::vector<float> logits = cli::router_logits(x, T, ck.router_weight);
  const ref::LayerWeights lw = ref::layer_from_checkpoint(std::move(ck));
  const ref::LayerResult r = ref::moe_layer(lw, x.data(), logits.data(), T);
  return fusedmoe::strf("bits hash %016llx", (unsigned long long)cli::bf16_hash(cli::to_bf16_bits(r.y)));
}

}  // namespace

TEST(Cli, RunModelReadsTheLayerAndRunsIt) {
  const std::string dir = write_checkpoint("cli_fp8", kCkptConfig);
  const Result r = run_cli("run --model " + dir + " --layer 1 --tokens 6 --seed 4 --backend cpu");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const std::string& s :
       {std::string("fusedmoe run --model"), "model    : \"" + dir + "\", layer 1",
        std::string("config   : deepseek_v3: H=256 I=128 E=4 top-2 shared=1x128"),
        std::string("backend  : cpu-reference (--backend cpu)"),
        std::string("weights  : \"model.layers.1.mlp.\", fp8_block per-expert (weight + weight_scale_inv 128x128)"),
        std::string("router logits = x . \"model.layers.1.mlp.gate.weight\"^T (the layer's own router, bf16"),
        std::string("output   : [6, 256] bf16"), expected_hash(dir, 6, 4)})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  EXPECT_FALSE(has(r.out, "% after ")) << "progress belongs on stderr:\n" << r.out;

  // auto: the GPU where one is usable (checked against this reference: PASS), else the reference.
  const Result a = run_cli("run --model " + dir + " --layer 1 --tokens 6 --seed 4");
  ASSERT_EQ(a.code, 0) << a.out;
  if (fusedmoe::gpu_usable()) {
    for (const char* s : {"backend  : gpu: ", "gpu mem  : peak ", "result   : PASS"})
      EXPECT_TRUE(has(a.out, s)) << s << "\n" << a.out;
  } else {
    EXPECT_TRUE(has(a.out, "backend  : cpu-reference (")) << a.out;
    EXPECT_TRUE(has(a.out, expected_hash(dir, 6, 4))) << a.out;
  }
  const Result z = run_cli("run --model " + dir + " --layer 1 --tokens 0 --backend cpu");
  EXPECT_EQ(z.code, 0) << z.out;
}

TEST(Cli, RunModelNvfp4RunsAsW4A16) {
  // A ModelOpt NVFP4 checkpoint, as W4A16 (bf16 activations, input_scale unused): on the GPU
  // where one is usable (checked: PASS), else the reference, whose output the test recomputes.
  const std::string dir = write_checkpoint("cli_nvfp4", kCkptNvfp4Config);
  const Result r = run_cli("run --model " + dir + " --layer 1 --tokens 3");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "weights  : \"model.layers.1.mlp.\", nvfp4 per-expert (ModelOpt")) << r.out;
  EXPECT_TRUE(has(r.out, "note     : NVFP4 checkpoint run as W4A16")) << r.out;
  if (fusedmoe::gpu_usable()) {
    for (const char* s : {"backend  : gpu: ", "result   : PASS"})
      EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  } else {
    EXPECT_TRUE(has(r.out, "backend  : cpu-reference (")) << r.out;
    EXPECT_TRUE(has(r.out, expected_hash(dir, 3, 1))) << r.out;
  }
  const Result c = run_cli("run --model " + dir + " --layer 1 --tokens 3 --backend cpu");
  ASSERT_EQ(c.code, 0) << c.out;
  EXPECT_TRUE(has(c.out, expected_hash(dir, 3, 1))) << c.out;
}

TEST(Cli, RunModelGptOssMxfp4) {
  // gpt-oss's MXFP4 release layout: on the GPU where one is usable (checked: PASS), else the
  // reference, whose output the test recomputes.
  const char* config = R"({"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 128,
    "num_local_experts": 8, "num_experts_per_tok": 2, "quantization_config": {"quant_method": "mxfp4"}})";
  const std::string dir = fusedmoe::test::st::temp_dir("cli_mxfp4");
  fusedmoe::test::st::write(dir + "/config.json", config);
  const fusedmoe::ref::LayerWeights lw =
      fusedmoe::ref::make_random_layer(fusedmoe::config_from_hf_json_text(config, "test"), 23);
  fusedmoe::test::ckpt::write_model(
      dir, fusedmoe::test::ckpt::fused(lw, fusedmoe::test::ckpt::Fused::gpt_oss, "model.layers.1.mlp.", 24));
  const Result r = run_cli("run --model " + dir + " --layer 1 --tokens 5 --seed 2");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "weights  : \"model.layers.1.mlp.\", mxfp4 gpt-oss fused")) << r.out;
  if (fusedmoe::gpu_usable()) {
    for (const char* s : {"backend  : gpu: ", "result   : PASS"}) EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  } else {
    EXPECT_TRUE(has(r.out, "backend  : cpu-reference (")) << r.out;
    EXPECT_TRUE(has(r.out, expected_hash(dir, 5, 2))) << r.out;
  }
}

TEST(Cli, RunModelMistakesAreOneLine) {
  const std::string dir = write_checkpoint("cli_bad", kCkptConfig);
  expect_usage_error("run --model " + dir, "--model needs --layer N", "usage: fusedmoe run");
  expect_usage_error("run --layer 2", "--layer needs --model DIR");
  expect_usage_error("run --model " + dir + " --layer 1 --preset qwen3-30b-a3b",
                     "--preset does not go with --model");
  expect_usage_error("run --model " + dir + " --layer 1 --precision bf16", "--precision does not go with --model");
  expect_usage_error("run --model " + dir + " --layer 1 --projection", "--projection runs on random weights");
  expect_usage_error("run --model " + dir + " --layer -1", "--layer must be in [0, 1048576], got \"-1\"");
  // Library errors: exit 1, one line naming the file or the tensor.
  Result r = run_cli("run --model " + dir + " --layer 5 --backend cpu");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "layer 5 has no MoE router: none of model.layers.5.mlp.gate.weight")) << r.out;
  EXPECT_TRUE(has(r.out, "(the checkpoint has layers 0..1 under model.layers.)")) << r.out;
  r = run_cli("run --model /nonexistent/model --layer 0");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_TRUE(has(r.out, "checkpoint /nonexistent/model has no config.json")) << r.out;
  std::remove((dir + "/model-00002-of-00002.safetensors").c_str());
  r = run_cli("run --model " + dir + " --layer 1 --backend cpu");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(has(r.out, "shard model-00002-of-00002.safetensors (listed by model.safetensors.index.json) is missing"))
      << r.out;
}

// Issue 13: `run --ep R` and `bench --op ep_layer --ep R` (R processes on one host). Argument
// mistakes are usage errors before anything else; the hidden rank option is checked too.
TEST(Cli, RunEpArgumentErrors) {
  expect_usage_error("run --ep 0", "fusedmoe run: --ep must be in [1, 1024], got \"0\"");
  expect_usage_error("run --ep two", "fusedmoe run: --ep expects an integer, got \"two\"");
  expect_usage_error("run --ep -1", "--ep must be in [1, 1024], got \"-1\"");
  expect_usage_error("run --ep", "--ep needs a value");
  expect_usage_error("run --ep --tokens 4", "--ep needs a value");
  expect_usage_error("run --ep 1 --ep 2", "--ep is given more than once");
  expect_usage_error("run --ep 1 --projection", "--ep runs the whole layer; it does not take --projection");
  expect_usage_error("run --ep 1 --backend cpu", "--ep 1 runs on GPUs; it does not take --backend cpu");
  expect_usage_error("run --ep 1 --model /nonexistent --layer 0", "it does not take --model yet");
  expect_usage_error("run --ep 1 --preset qwen9", "--preset: unknown preset \"qwen9\"");
  expect_usage_error("run --chunks 2", "--chunks needs --ep R");
  expect_usage_error("run --rows fp8", "--rows needs --ep R");
  expect_usage_error("run --ep 1 --chunks 9", "--chunks must be in [1, 8], got \"9\"");
  expect_usage_error("run --ep 1 --rows int8", "--rows must be one of bf16, fp8, got \"int8\"");
  expect_usage_error("run --ep-child 0,1,0,00", "--ep-child is internal");
  expect_usage_error("run --ep 2 --ep-child 0,1,0,00", "--ep-child says 1 ranks but --ep says 2");
  expect_usage_error("run --ep 2 --ep-child 2,2,0,00", "--ep-child must be in [0, 1], got \"2\"");
  expect_usage_error("run --ep 1 --ep-child 0,1,0", "--ep-child (internal: set by --ep's parent "
                     "process) expects RANK,RANKS,DEVICE,ID");
  expect_usage_error("run --ep 1 --ep-child 0,1,0,00", "the id must be 256 hex digits, got 2");
  expect_usage_error("run --ep 1 --ep-child 0,1,0," + std::string(256, 'g'),
                     "the id must be lower-case hex digits");
}

// More ranks than GPUs: one line naming both numbers (or, on a machine without a GPU, that it
// has none and why), exit 1, no crash and no rank started. A build without NCCL says that first.
TEST(Cli, RunEpMoreRanksThanGpusIsOneLine) {
  const fusedmoe::DeviceReport dev = fusedmoe::query_devices();
  const int gpus = int(dev.devices.size());
#if defined(FMOE_HAS_CUDA)
  const std::vector<std::string> cmds = {"run", "bench --op ep_layer"};
#else
  const std::vector<std::string> cmds = {"run"};  // (no bench without CUDA)
#endif
  for (const std::string& cmd : cmds) {
    const std::string args = cmd + " --ep " + std::to_string(gpus + 1);
    const Result r = run_cli(args);
    EXPECT_EQ(r.code, 1) << args << "\n" << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << args << "\n" << r.out;
    EXPECT_FALSE(has(r.out, "rank 0")) << args << ": no rank may start\n" << r.out;
#if !FMOE_CLI_HAS_NCCL
    EXPECT_TRUE(has(r.out, "--ep: this build has no")) << args << "\n" << r.out;
#else
    if (gpus == 0)
      EXPECT_TRUE(has(r.out, "--ep 1 needs 1 GPU (one per rank), but this machine has none: " + dev.why_none))
          << args << "\n" << r.out;
    else
      EXPECT_TRUE(has(r.out, fusedmoe::strf("--ep %d needs %d GPUs (one per rank), but %d %s visible",
                                            gpus + 1, gpus + 1, gpus, gpus == 1 ? "is" : "are")))
          << args << "\n" << r.out;
#endif
  }
}

// On a GPU: one rank over a real NCCL communicator in its own process, deterministic (choice-
// order combine, bitwise vs MoeLayer) and fast (rank order, relative L2); a preset the EP layer
// refuses fails in the parent with the layer's own sentence. Skips without an sm_90 GPU.
TEST(Cli, RunEpOneRankPassesOnAGpu) {
  if (!fusedmoe::gpu_usable()) GTEST_SKIP() << "needs an sm_90 GPU";
#if !FMOE_CLI_HAS_NCCL
  GTEST_SKIP() << "this build has no NCCL (no expert-parallel layer)";
#endif
  const std::string cfg = small_config();  // fp8, H=256, 16 experts, top-4
  Result r = run_cli("run --ep 1 --mode deterministic --tokens 64 --config " + cfg);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* s : {"fusedmoe run --ep 1", "  rank 0/1 : GPU 0 (", "experts [0, 16), 64 tokens",
                        "choice-order combine: 0 of 16384 elements differ from MoeLayer's bits; step ",
                        "over CUDA-graph replays, output after them bit-identical -> PASS",
                        "  result   : PASS"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  r = run_cli("run --ep 1 --tokens 64 --config " + cfg);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* s : {"rank-order combine: relative L2 ", "output after them within the bound -> PASS",
                        "  result   : PASS"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  r = run_cli("run --ep 1 --tokens 0 --mode deterministic --config " + cfg);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "0 tokens, 0 rows and 0 routes received")) << r.out;
  EXPECT_TRUE(has(r.out, "0 of 0 elements differ from MoeLayer's bits -> PASS")) << r.out;
  // Shared experts with Qwen's gate: every rank runs them on its own tokens.
  const std::string shared = write_file("ep_shared.json",
      R"({"model_type": "qwen2_moe", "hidden_size": 256, "moe_intermediate_size": 64,
          "num_experts": 16, "num_experts_per_tok": 4, "shared_expert_intermediate_size": 64,
          "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})");
  r = run_cli("run --ep 1 --mode deterministic --tokens 48 --config " + shared);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* s : {"shared=1x64(gated)", "choice-order combine: 0 of 12288 elements differ "
                        "from MoeLayer's bits", "  result   : PASS"})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  r = run_cli("run --ep 1 --tokens 48 --config " + shared);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(has(r.out, "  result   : PASS")) << r.out;
}

TEST(Cli, BenchEpLayerOneRankOnAGpu) {
  if (!fusedmoe::gpu_usable()) GTEST_SKIP() << "needs an sm_90 GPU";
#if !FMOE_CLI_HAS_NCCL
  GTEST_SKIP() << "this build has no NCCL (no expert-parallel layer)";
#endif
  const std::string json = testing::TempDir() + "ep_layer.json";
  std::remove(json.c_str());
  const Result r = run_cli("bench --op ep_layer --ep 1 --tokens 16 --mode both --json " + json);
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* s : {"ep_layer ", "ep_layer.dispatch", "ep_layer.local", "ep_layer.combine",
                        "qwen3-30b-a3b fp8_block R=1 rank 0", "bitwise = MoeLayer", "rel L2 "})
    EXPECT_TRUE(has(r.out, s)) << s << "\n" << r.out;
  std::ifstream in(json);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(has(text, "ep_layer.combine")) << json << "\n" << text;
}

// A rank process whose GPU cannot be used ends with one line that names its rank (what the
// parent's "rank r exited with status 1" line refers to). Without a GPU only: on a GPU machine
// the made-up NCCL id would send the rank looking for a parent that does not exist.
TEST(Cli, RunEpRankWithoutAGpuNamesItsRank) {
  if (fusedmoe::gpu_usable()) GTEST_SKIP() << "this machine has a usable GPU";
  const std::string child = " --ep 1 --ep-child 0,1,0," + std::string(256, 'a');
#if defined(FMOE_HAS_CUDA)
  const std::vector<std::string> cmds = {"run --config " + small_config(), "bench --op ep_layer"};
#else
  const std::vector<std::string> cmds = {"run --config " + small_config()};  // (no bench without CUDA)
#endif
  for (const std::string& cmd : cmds) {
    const Result r = run_cli(cmd + child);
    EXPECT_EQ(r.code, 1) << cmd << "\n" << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << cmd << "\n" << r.out;
#if FMOE_CLI_HAS_NCCL
    // run's rank names itself; bench's rank fails in bench's own GPU check, before the op.
    EXPECT_EQ(r.out.rfind(cmd[0] == 'r' ? "fusedmoe: rank 0 (GPU 0): " : "fusedmoe: bench needs an sm_90 GPU", 0), 0u)
        << cmd << "\n" << r.out;
#else
    EXPECT_TRUE(has(r.out, "--ep: this build has no")) << cmd << "\n" << r.out;
#endif
  }
}
