#include <cstdio>
#include <cstdlib>

#include "tests/test_util.hpp"

namespace fusedmoe::test {

uint64_t run_seed() {
  static const uint64_t seed = [] {
    if (const char* env = std::getenv("FMOE_SEED")) return uint64_t(std::strtoull(env, nullptr, 0));
    return ref::time_seed();
  }();
  return seed;
}

}  // namespace fusedmoe::test

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  std::printf("[fusedmoe] run seed %llu (set FMOE_SEED=%llu to repeat this run)\n",
              (unsigned long long)fusedmoe::test::run_seed(),
              (unsigned long long)fusedmoe::test::run_seed());
  return RUN_ALL_TESTS();
}
