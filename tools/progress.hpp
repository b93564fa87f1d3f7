// Progress of a long step on stderr, at a bounded rate: at most one line every `interval_s`
// seconds, none for a step that ends sooner. Generating the weights of deepseek-v3 or kimi-k2
// takes minutes on a few cores; without this the CLI would say nothing for all that time.
// Header-only so the tests can drive it with their own clock.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "fusedmoe/error.hpp"

namespace fusedmoe::cli {

class ProgressLine {
 public:
  using Clock = std::function<double()>;  ///< seconds, from any fixed origin

  /// Lines read "  <label>: 35% after 20 s, about 37 s left"; with in_bytes() (units are
  /// bytes) "  <label>: 1.20 GB of 3.40 GB (35%) after 2 s, 600.0 MB/s, about 4 s left".
  explicit ProgressLine(std::string label, double interval_s = 2.0, std::FILE* out = stderr,
                        Clock clock = steady_seconds)
      : label_(std::move(label)), interval_s_(interval_s), out_(out), clock_(std::move(clock)),
        start_(clock_()), last_(start_) {}

  /// Counts bytes: lines show the amounts and the rate.
  ProgressLine& in_bytes() {
    bytes_ = true;
    return *this;
  }

  /// "512.0 MB", "3.40 GB".
  static std::string amount(double bytes) {
    return bytes < 1e9 ? strf("%.1f MB", bytes / 1e6) : strf("%.2f GB", bytes / 1e9);
  }

  /// Called with the units done so far and in all (a ref::ProgressFn).
  void operator()(int64_t done, int64_t total) {
    const double now = clock_();
    if (first_done_ < 0) {  // the rate is measured from here: setup before it (one large
      first_done_ = done;   // allocation) would make the first estimates far too long
      first_time_ = now;
    }
    if (total <= 0 || done >= total || now - last_ < interval_s_) return;
    last_ = now;
    const double frac = double(done) / double(total), elapsed = now - start_;
    // Floored: a line while work remains never reads 100% (99.6% rounded did, on a fast machine).
    const double pct = std::floor(100.0 * frac);
    std::string line =
        bytes_ ? strf("  %s: %s of %s (%.0f%%) after %.0f s", label_.c_str(), amount(double(done)).c_str(),
                      amount(double(total)).c_str(), pct, elapsed)
               : strf("  %s: %.0f%% after %.0f s", label_.c_str(), pct, elapsed);
    if (done > first_done_ && now > first_time_) {
      const double rate = double(done - first_done_) / (now - first_time_);  // units per second
      if (bytes_) line += strf(", %s/s", amount(rate).c_str());
      line += strf(", about %.0f s left", double(total - done) / rate);
    }
    std::fprintf(out_, "%s\n", line.c_str());
    std::fflush(out_);
    ++lines_;
  }

  int lines() const { return lines_; }

  static double steady_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  std::string label_;
  double interval_s_;
  std::FILE* out_;
  Clock clock_;
  double start_, last_;
  int64_t first_done_ = -1;
  double first_time_ = 0;
  int lines_ = 0;
  bool bytes_ = false;
};

}  // namespace fusedmoe::cli
