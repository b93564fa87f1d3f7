// The main of every test binary (tests/CMakeLists.txt links it into each one).
//
// The exit status is what ctest reads (there is no output regex):
//   0                    every case that ran passed; some may have been skipped
//   FMOE_TEST_SKIP_CODE  every case that ran was skipped and none failed (ctest SKIP_RETURN_CODE)
//   1                    anything failed: a case, an environment, a check outside any case
// It is decided from gtest's UnitTest counters after RUN_ALL_TESTS, never from printed output,
// so a skipped case cannot hide a failed one. tests/runner checks this through ctest.
//
// The reasons of the skipped cases go to the file named by FMOE_SKIP_REPORT (ctest sets it per
// test; scripts/test.sh prints the files after ctest, which itself shows only "***Skipped"), one
// line per distinct reason:
//   skipped: <binary>: <Suite.Case, or "N of M cases">: <reason>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/test_util.hpp"

#ifndef FMOE_TEST_SKIP_CODE
#error "FMOE_TEST_SKIP_CODE (the ctest SKIP_RETURN_CODE) comes from tests/CMakeLists.txt"
#endif

namespace fusedmoe::test {

uint64_t run_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("FMOE_SEED")) return uint64_t(std::strtoull(env, nullptr, 0));
    return ref::time_seed();
  }();
  return seed;
}

}  // namespace fusedmoe::test

namespace {

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  const size_t b = s.find_first_not_of(' ');
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

// The message of the first skip recorded in `r`, or "" when there is none.
std::string skip_message(const testing::TestResult& r) {
  for (int i = 0; i < r.total_part_count(); ++i) {
    const testing::TestPartResult& part = r.GetTestPartResult(i);
    if (part.skipped()) return one_line(part.message());
  }
  return "";
}

struct SkipGroup {
  std::string reason;
  std::vector<std::string> cases;
};

// Skipped cases grouped by reason. A skip in SetUpTestSuite or in a global environment is
// recorded on the suite or on the whole run; the case inherits that reason.
std::vector<SkipGroup> skipped_cases(const testing::UnitTest& u) {
  std::vector<SkipGroup> groups;
  const std::string global_reason = skip_message(u.ad_hoc_test_result());
  for (int i = 0; i < u.total_test_suite_count(); ++i) {
    const testing::TestSuite* suite = u.GetTestSuite(i);
    const std::string suite_reason = skip_message(suite->ad_hoc_test_result());
    for (int j = 0; j < suite->total_test_count(); ++j) {
      const testing::TestInfo* t = suite->GetTestInfo(j);
      if (!t->should_run() || !t->result()->Skipped()) continue;
      std::string why = skip_message(*t->result());
      if (why.empty()) why = suite_reason;
      if (why.empty()) why = global_reason;
      if (why.empty()) why = "(no reason given)";
      auto g = std::find_if(groups.begin(), groups.end(), [&](const SkipGroup& x) { return x.reason == why; });
      if (g == groups.end()) g = groups.insert(groups.end(), SkipGroup{why, {}});
      g->cases.push_back(std::string(t->test_suite_name()) + "." + t->name());
    }
  }
  return groups;
}

void write_skip_report(const char* path, const std::string& binary, const testing::UnitTest& u) {
  const std::vector<SkipGroup> groups = skipped_cases(u);
  if (groups.empty()) {
    std::remove(path);  // no stale reasons from an earlier run
    return;
  }
  std::error_code ec;
  if (const std::filesystem::path dir = std::filesystem::path(path).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir, ec);
  FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "[fusedmoe] cannot write the skip report FMOE_SKIP_REPORT=\"%s\"\n", path);
    return;
  }
  for (const SkipGroup& g : groups) {
    const std::string which = g.cases.size() == 1 ? g.cases[0]
                                                  : std::to_string(g.cases.size()) + " of " +
                                                        std::to_string(u.test_to_run_count()) + " cases";
    std::fprintf(f, "skipped: %s: %s: %s\n", binary.c_str(), which.c_str(), g.reason.c_str());
  }
  std::fclose(f);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string argv0 = argc > 0 ? argv[0] : "test";
  const std::string binary = argv0.substr(argv0.find_last_of('/') + 1);
  testing::InitGoogleTest(&argc, argv);
  std::printf("[fusedmoe] run seed %llu (set FMOE_SEED=%llu to repeat this run)\n",
              (unsigned long long)fusedmoe::test::run_seed(),
              (unsigned long long)fusedmoe::test::run_seed());
  const int gtest_status = RUN_ALL_TESTS();

  const testing::UnitTest& u = *testing::UnitTest::GetInstance();
  if (const char* report = std::getenv("FMOE_SKIP_REPORT"); report && *report)
    write_skip_report(report, binary, u);
  if (gtest_status != 0 || u.Failed()) return 1;
  const int ran = u.test_to_run_count();
  if (ran > 0 && u.skipped_test_count() == ran) {
    std::printf("[fusedmoe] every case was skipped: exit status %d (ctest: Skipped)\n", FMOE_TEST_SKIP_CODE);
    return FMOE_TEST_SKIP_CODE;
  }
  return 0;
}
