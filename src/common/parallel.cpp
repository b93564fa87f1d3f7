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
  std::atomic<int> active{workers};  // threads with an id >= active take no more chunks
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&](int id) {
    for (;;) {
      if (id >= active.load(std::memory_order_relaxed)) return;
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
  int kept = workers;
  {
    const JoinAll join{threads};
    // The system may refuse a thread (EAGAIN under a thread or address-space limit, or
    // FMOE_THREADS far above the cores). Items are handed out dynamically, so the threads that
    // run, and this one, still cover them all. A refusal means the limit is reached: half of
    // the started threads are stopped and joined at once, so their stacks leave room for what
    // the remaining ones allocate.
    for (int id = 1; id < workers; ++id) {
      try {
        threads.emplace_back(work, id);
      } catch (...) {
        kept = std::max(1, id / 2);
        active.store(kept);
        for (size_t t = size_t(kept) - 1; t < threads.size(); ++t) threads[t].join();
        break;
      }
    }
    work(0);
  }
  if (error) std::rethrow_exception(error);
  return kept;
}

}  // namespace fusedmoe::detail
