// The fusedmoe CLI as a user meets it: exit codes, one-line errors, usage, and a small run.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/test_util.hpp"

namespace {

struct Result {
  int code;
  std::string out;  // stdout and stderr together
};

Result run_cli(const std::string& args) {
  const std::string cmd = std::string(FMOE_CLI_PATH) + " " + args + " 2>&1";
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
  EXPECT_NE(r.out.find("unknown option --bogus"), std::string::npos);
  r = run_cli("run --tokens -5");
  EXPECT_EQ(r.code, 2);
  r = run_cli("run --preset a --config b");
  EXPECT_EQ(r.code, 2);
}

TEST(Cli, WrongPresetMalformedConfigAndTopKAreOneLineErrors) {
  Result r = run_cli("run --preset qwen9");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("unknown preset \"qwen9\""), std::string::npos) << r.out;

  r = run_cli("run --config " + write_file("bad.json", "{\"model_type\": \"mixtral\",,}"));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("malformed JSON"), std::string::npos) << r.out;

  r = run_cli("run --config /nonexistent/config.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("cannot open config file"), std::string::npos) << r.out;

  r = run_cli("run --preset mixtral-8x7b --top-k 9");
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("top-k=9 is larger than the number of experts (8)"), std::string::npos) << r.out;

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

TEST(Cli, ProjectionBadModeAndBackendAreOneLineErrors) {
  Result r = run_cli("run --projection --mode turbo");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("--mode must be fast or deterministic, got \"turbo\""), std::string::npos)
      << r.out;

  r = run_cli("run --mode fast --tokens 1");  // --mode without --projection
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;

  r = run_cli("run --projection --precision nvfp4");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;

  if (!fusedmoe::gpu_usable()) {
    r = run_cli("run --projection --backend gpu --tokens 4");
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << r.out;
    EXPECT_NE(r.out.find("--backend gpu: "), std::string::npos) << r.out;
  }
}

TEST(Cli, BenchMoeFp8WithoutGpuFailsClearly) {
  std::string why;
  if (fusedmoe::gpu_usable(0, &why)) GTEST_SKIP() << "a GPU is usable here: the benchmark would run";
  const Result r = run_cli("bench --op moe_fp8 --tokens 1");
#if defined(FMOE_HAS_CUDA)
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_EQ(count_lines(r.out), 1) << r.out;
  EXPECT_NE(r.out.find("bench needs an sm_90 GPU: " + why), std::string::npos) << r.out;
#else
  EXPECT_EQ(r.code, 2) << r.out;  // CPU-only build: no bench command at all
  EXPECT_NE(r.out.find("unknown command \"bench\""), std::string::npos) << r.out;
#endif
}
