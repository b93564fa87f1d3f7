// Shared test helpers: seeds, GPU skip, context strings.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "fusedmoe/device.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/types.hpp"
#include "ref/random.hpp"

namespace fusedmoe::test {

/// A view of device memory at `p` with explicit strides (elements), for GPU tests' arguments.
inline TensorRef dev_ref(void* p, DType t, std::initializer_list<int64_t> shape,
                         std::initializer_list<int64_t> stride) {
  TensorRef r = TensorRef::contiguous(p, t, shape, Device::cuda, 0);
  int i = 0;
  for (int64_t s : stride) r.stride[i++] = s;
  return r;
}

/// This run's seed: FMOE_SEED if set, else drawn from the clock. Printed once by test_main.
uint64_t run_seed();

/// Seeds for one case: two fixed ones (reproducible across runs) and one fresh per run, each
/// mixed with a hash of the case's parameters so cases do not share streams.
inline std::vector<uint64_t> seeds_for(uint64_t case_hash) {
  return {ref::splitmix64(1 ^ case_hash), ref::splitmix64(2 ^ case_hash),
          ref::splitmix64(run_seed() ^ case_hash)};
}

inline uint64_t hash_ints(std::initializer_list<long long> v) {
  uint64_t h = 0x1234567;
  for (long long x : v) h = ref::splitmix64(h ^ uint64_t(x));
  return h;
}

/// Expects `fn` to throw fusedmoe::Error whose message contains `needle`.
template <class Fn>
void expect_error(Fn&& fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "expected fusedmoe::Error containing \"" << needle << "\", nothing thrown";
  } catch (const fusedmoe::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

}  // namespace fusedmoe::test

/// GPU tests call this first: SKIPPED with the reason on machines without an sm_90 GPU. The
/// reason shows in the gtest output and in scripts/test.sh's summary after ctest
/// ("skipped: test_x_gpu: 12 of 12 cases: needs an sm_90 GPU: no NVIDIA driver / no GPU found ...").
#define FMOE_SKIP_WITHOUT_GPU()                                                          \
  do {                                                                                   \
    std::string why_;                                                                    \
    if (!::fusedmoe::gpu_usable(0, &why_)) GTEST_SKIP() << "needs an sm_90 GPU: " << why_; \
  } while (0)
