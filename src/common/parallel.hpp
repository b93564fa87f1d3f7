// Host-side parallel loop for the CPU reference and weight preparation (plain std::thread).
#pragma once

#include <cstdint>
#include <functional>

namespace fusedmoe::detail {

/// Worker count: FMOE_THREADS if set, else std::thread::hardware_concurrency().
int host_threads();

/// Calls fn(begin, end) on disjoint chunks covering [0, n), at least `grain` items each, on up to
/// host_threads() threads. Chunk boundaries depend only on n, grain and the thread count, and
/// each item is computed by one call, so results never depend on scheduling. When the system
/// refuses a thread, the loop goes on with half of those that started (the loop still covers
/// [0, n)); the first exception fn throws is rethrown here after every thread has been joined.
/// Returns the number of threads that ran the loop to its end, this one included (0 when
/// n <= 0).
int parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 1);

}  // namespace fusedmoe::detail
