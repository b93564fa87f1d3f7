// cuBLASLt is the benchmark ceilings' business only: the fusedmoe binary must not link it (it
// then failed to start without the CUDA toolkit, and loading it cost every command 214 MB and
// 0.1 s), and the ceilings must still find it when they need it.
#include <cstdio>
#include <string>

#include "bench/cublaslt.hpp"
#include "tests/test_util.hpp"

namespace {

std::string run(const std::string& cmd, int* code) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
  const int status = pclose(p);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

}  // namespace

TEST(CublasLt, TheCliDoesNotLinkIt) {
  int code = 0;
  const std::string deps = run(std::string("ldd ") + FMOE_CLI_PATH, &code);
  if (code != 0) GTEST_SKIP() << "ldd is not available here: " << deps;
  EXPECT_EQ(deps.find("cublas"), std::string::npos) << deps;
}

TEST(CublasLt, TheCliStartsWithAnEmptyEnvironment) {
  // No LD_LIBRARY_PATH, no CUDA folders on the path: `info` still runs and says what it found.
  int code = 0;
  const std::string out = run(std::string("env -i PATH=/usr/bin:/bin ") + FMOE_CLI_PATH + " info", &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("build    :"), std::string::npos) << out;
  EXPECT_NE(out.find("GPU"), std::string::npos) << out;  // "GPU 0 : ..." or "GPUs : none (...)"
}

TEST(CublasLt, LoadsOnFirstUse) {
  const fusedmoe::bench::CublasLt& lt = fusedmoe::bench::cublaslt();
  EXPECT_NE(lt.create, nullptr);
  EXPECT_NE(lt.matmul, nullptr);
  EXPECT_NE(lt.algo_get_heuristic, nullptr);
  EXPECT_EQ(&fusedmoe::bench::cublaslt(), &lt) << "loaded once";
}
