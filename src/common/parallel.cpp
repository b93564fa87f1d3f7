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

namespace {

// Joins every started thread on the way out, also when an exception leaves the scope: a
// std::thread destroyed while joinable calls std::terminate.
struct JoinAll {
  std::vector<std::thread>& threads;
  ~JoinAll() {
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
};

}  // namespace

int parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain) {
  if (n <= 0) return 0;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int workers = int(std::min<int64_t>(host_threads(), max_chunks));
  if (workers <= 1) {
    fn(0, n);
    return 1;
  }
  // Dynamic chunking: uneven per-item cost (experts with many or few tokens) balances itself.
  // The chunk size depends on the requested worker count only, never on how many threads did
  // start, so a shortfall below changes the speed and nothing else.
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
        next.store(n);  // the loop has failed: the other threads stop at their next chunk
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(workers - 1));
  {
    const JoinAll join{threads};
    // The system may refuse a thread (EAGAIN under a thread or address-space limit, or
    // FMOE_THREADS far above the cores): the items are handed out dynamically, so the threads
    // that did start, and this one, cover them all.
    for (int i = 1; i < workers; ++i) {
      try {
        threads.emplace_back(work);
      } catch (...) {
        break;
      }
    }
    work();
  }
  if (error) std::rethrow_exception(error);
  return int(threads.size()) + 1;
}

}  // namespace fusedmoe::detail
