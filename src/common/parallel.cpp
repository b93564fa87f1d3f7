#include "common/parallel.hpp"

#include "common/env.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace fusedmoe::detail {

int host_threads() {
  if (const int n = knobs().threads; n > 0) return n;
  return std::max(1u, std::thread::hardware_concurrency());
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int workers = int(std::min<int64_t>(host_threads(), max_chunks));
  if (workers <= 1) {
    fn(0, n);
    return;
  }
  // Dynamic chunking: uneven per-item cost (experts with many or few tokens) balances itself.
  const int64_t chunk = std::max<int64_t>(grain, n / (int64_t(workers) * 8));
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (;;) {
      const int64_t begin = next.fetch_add(chunk);
      if (begin >= n) return;
      try {
        fn(begin, std::min(n, begin + chunk));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(workers - 1));
  for (int i = 1; i < workers; ++i) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace fusedmoe::detail
