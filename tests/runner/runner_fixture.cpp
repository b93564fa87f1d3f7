// Planted cases for tests/runner/check_runner.cmake, which runs them under ctest with the suite's
// own test main and ctest properties. Not a test of the suite: nothing registers this binary with
// ctest, and the failing case is DISABLED_ so that running the binary by hand passes.
#include "tests/test_util.hpp"

TEST(RunnerFixture, Passes) { EXPECT_EQ(2 + 2, 4); }

TEST(RunnerFixture, Skips) { GTEST_SKIP() << "planted skip: the runner fixture's reason"; }

TEST(RunnerFixture, DISABLED_Fails) { ADD_FAILURE() << "planted failure: ctest must report it"; }

