// What `fusedmoe run` will hold in host memory, estimated before anything is allocated, and
// what this process may use. Every size is computed in double (products of three int sizes
// overflow 64-bit integers for absurd configs; a double only rounds). Header-only, with the rest
// of the CLI's shared code (projection_case.hpp).
#pragma once

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <string>

#include "fusedmoe/config.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe::cli {

/// Bytes of E matrices [N, K] stored as the reference stores them (ref::WeightSet).
inline double weight_set_bytes(Precision p, double E, double N, double K) {
  switch (p) {
    case Precision::bf16: return E * N * K * 2;
    case Precision::fp8_block:
      return E * (N * K + std::ceil(N / 128) * std::ceil(K / 128) * 4);
    case Precision::nvfp4: return E * (N * K / 2 + N * K / 16 + 4);
    case Precision::mxfp4: return E * (N * K / 2 + N * K / 32);
  }
  return 0;
}

/// Bytes of M activation rows of K values quantized as the reference does (ref::ActRows).
inline double act_rows_bytes(Precision p, double M, double K) {
  switch (p) {
    case Precision::bf16: return M * K * 2;
    case Precision::fp8_block: return M * K + M * std::ceil(K / 128) * 4;
    case Precision::nvfp4: return M * K / 2 + M * K / 16;
    case Precision::mxfp4: return 0;  // a weight format only
  }
  return 0;
}

/// The host memory of one run, by what holds it. Generation and the forward never overlap
/// beyond the weights: the staging buffer is freed before the inputs exist.
struct HostFootprint {
  double weights = 0;       ///< the quantized weights, from generation to exit
  double staging = 0;       ///< the float copy of the largest expert matrix while it is quantized
  double inputs = 0;        ///< x, router logits, routing bias
  double routing = 0;       ///< ids, weights and the permutation of the T*k routes
  double activations = 0;   ///< gathered rows [T*k, H] and their quantized copies
  double intermediate = 0;  ///< GEMM results (double), gate/up and activation outputs, scratch
  double outputs = 0;       ///< y (double, fp32, bf16) and per-route outputs
  double forward() const { return inputs + routing + activations + intermediate + outputs; }
  double peak() const { return weights + std::max(staging, forward()); }
  std::string describe() const {
    return strf("weights %s, float staging %s, inputs %s, routing %s, activations %s, "
                "intermediate %s, outputs %s", gb(weights).c_str(), gb(staging).c_str(),
                gb(inputs).c_str(), gb(routing).c_str(), gb(activations).c_str(),
                gb(intermediate).c_str(), gb(outputs).c_str());
  }
  static std::string gb(double bytes) { return strf("%.2f GB", bytes / 1e9); }
};

/// Scratch of ref::grouped_gemm: 65 rows of K doubles on each thread that has work, which is at
/// most one per (expert hit, block of 64 weight rows).
inline double gemm_scratch_bytes(int threads, double experts_hit, double N, double K) {
  return std::min(double(threads), experts_hit * std::ceil(N / 64)) * 65.0 * K * 8;
}

/// The whole-layer CPU reference (ref::make_random_layer + ref::moe_layer) for T tokens: the
/// sum of the routed and the shared expert's working sets (the shared one runs after the routed
/// one returns, so this bounds the peak from above).
inline HostFootprint layer_footprint(const MoeConfig& c, double T, int threads) {
  const double H = c.hidden, I = c.intermediate, E = c.num_experts, R = T * c.top_k;
  const double S = c.num_shared_experts > 0 ? c.shared_intermediate : 0;
  const Precision wp = c.weight_precision, ap = c.activation_precision;
  HostFootprint f;
  f.weights = weight_set_bytes(wp, E, 2 * I, H) + weight_set_bytes(wp, E, H, I) + 4 * E;
  if (c.expert_bias) f.weights += 4 * E * (2 * I + H);
  if (S > 0) f.weights += weight_set_bytes(wp, 1, 2 * S, H) + weight_set_bytes(wp, 1, H, S) + 4 * H;
  f.staging = 4 * H * std::max(2 * I, 2 * S);
  f.inputs = 4 * T * H + 4 * T * E + 4 * E;
  f.routing = 16 * R + 8 * (E + 1);
  f.activations = 4 * R * H + act_rows_bytes(ap, R, H) + act_rows_bytes(ap, R, I);
  // GEMM1 result (double), gate/up (fp32), activation output (fp32), GEMM2 result (double).
  const double hit = std::min(E, R), shared_hit = T > 0 ? 1 : 0;
  const double scratch = std::max({gemm_scratch_bytes(threads, hit, 2 * I, H),
                                   gemm_scratch_bytes(threads, hit, H, I),
                                   gemm_scratch_bytes(threads, shared_hit, 2 * S, H),
                                   gemm_scratch_bytes(threads, shared_hit, H, S)});
  f.intermediate = 8 * R * 2 * I + 4 * R * 2 * I + 4 * R * I + 8 * R * H + scratch;
  f.outputs = 8 * R * H /* per-route outputs */ + 8 * T * H + 4 * T * H + 2 * T * H;
  if (S > 0) {
    f.activations += 4 * T * H + act_rows_bytes(ap, T, H) + act_rows_bytes(ap, T, S);
    f.intermediate += 8 * T * 2 * S + 4 * T * 2 * S + 4 * T * S + 8 * T * H;
    f.outputs += 8 * T * H + 4 * T * H;
  }
  return f;
}

/// `run --model` for T tokens: the layer read from its files (held once: the reference takes the
/// loader's buffers, copying one bf16 tensor at a time), the router weights and their logits, and
/// the reference's forward as for random weights.
inline HostFootprint checkpoint_footprint(const MoeConfig& c, double T, int threads) {
  HostFootprint f = layer_footprint(c, T, threads);
  const double H = c.hidden, I = c.intermediate, E = c.num_experts;
  f.staging = c.weight_precision == Precision::bf16 ? E * 2 * I * H * 2 : 0.0;  // w13 converted
  f.inputs += E * H * (4 + 4);  // the router as stored (at most f32) and as floats
  return f;
}

/// `run --projection` (random_fp8_weights + ref::moe_projection, and the GPU's outputs read back
/// when `on_gpu`) for T tokens.
inline HostFootprint projection_footprint(const MoeConfig& c, double T, bool on_gpu, int threads) {
  const double K = c.hidden, N = c.intermediate, E = c.num_experts, R = T * c.top_k;
  HostFootprint f;
  f.weights = weight_set_bytes(Precision::fp8_block, E, N, K);  // drawn as codes: no staging
  f.inputs = 4 * T * K + 4 * T * E + 4 * E + (on_gpu ? 2 * T * K : 0);
  f.routing = 16 * R + 8 * (E + 1);
  f.activations = 4 * R * K + act_rows_bytes(Precision::fp8_block, R, K);
  // The GEMM's values and |a*w| sums, both double.
  f.intermediate = 16 * R * N + gemm_scratch_bytes(threads, std::min(E, R), N, K);
  f.outputs = 16 * T * N + 2 * T * N + (on_gpu ? 4 * T * N : 0);
  return f;
}

/// The host memory this process may still allocate, and which limit that is.
struct HostBudget {
  double bytes = 0;
  std::string what;
};

namespace host_memory_detail {

// A "Key: <n> kB" line of a /proc file, in bytes; -1 when absent.
inline double proc_kb(const char* file, const std::string& key) {
  std::ifstream f(file);
  std::string k;
  double kb = -1;
  while (f >> k) {
    if (k == key) {
      f >> kb;
      return kb * 1024;
    }
    f.ignore(1 << 16, '\n');
  }
  return -1;
}

// The first number in `file`; -1 when absent or not a number ("max").
inline double file_number(const char* file) {
  std::ifstream f(file);
  double v = -1;
  if (!(f >> v)) return -1;
  return v;
}

}  // namespace host_memory_detail

/// The smallest of: the memory available on the machine (MemAvailable), what the cgroup limit
/// leaves, and what the address-space and data limits (ulimit -v, -d) leave this process.
inline HostBudget host_memory_budget() {
  using namespace host_memory_detail;
  HostBudget b;
  b.bytes = proc_kb("/proc/meminfo", "MemAvailable:");
  b.what = "MemAvailable";
  if (b.bytes < 0) {
    b.bytes = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    b.what = "the machine's memory";
  }
  auto consider = [&](double limit, double used, const char* what) {
    if (limit < 0 || limit >= 1e18) return;  // unlimited
    const double left = std::max(0.0, limit - std::max(0.0, used));
    if (left < b.bytes) {
      b.bytes = left;
      b.what = what;
    }
  };
  consider(file_number("/sys/fs/cgroup/memory.max"), file_number("/sys/fs/cgroup/memory.current"),
           "the cgroup memory limit");
  consider(file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
           file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
           "the cgroup memory limit");
  rlimit lim{};
  if (getrlimit(RLIMIT_AS, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    consider(double(lim.rlim_cur), proc_kb("/proc/self/status", "VmSize:"),
             "the address-space limit, ulimit -v");
  if (getrlimit(RLIMIT_DATA, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
    consider(double(lim.rlim_cur), proc_kb("/proc/self/status", "VmData:"),
             "the data limit, ulimit -d");
  return b;
}

/// Refuses a run whose estimated peak is above 90% of the budget (the rest: allocator overhead,
/// thread stacks, what the estimate leaves out), with the sizes and what to reduce. `footprint`
/// gives the estimate for a token count; `T` is the one asked for (at most 2^20).
inline void require_host_memory(const std::string& what, int T,
                                const std::function<HostFootprint(double)>& footprint) {
  constexpr double kUsable = 0.9;
  const HostBudget budget = host_memory_budget();
  const HostFootprint need = footprint(T);
  if (need.peak() <= kUsable * budget.bytes) return;
  std::string advice;
  if (footprint(0).peak() > kUsable * budget.bytes) {
    advice = "even 0 tokens do not fit: choose a smaller preset, or a --config with fewer "
             "experts or smaller sizes";
  } else {
    int lo = 0, hi = T;  // lo fits, hi does not
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (footprint(mid).peak() <= kUsable * budget.bytes ? lo : hi) = mid;
    }
    advice = strf("reduce --tokens to at most %d, or choose a smaller model", lo);
  }
  FMOE_REQUIRE(false, "%s with %d tokens needs about %s of host memory (%s), more than %.0f%% of "
               "the %s this process can use (%s); %s", what.c_str(), T, HostFootprint::gb(need.peak()).c_str(),
               need.describe().c_str(), 100 * kUsable, HostFootprint::gb(budget.bytes).c_str(),
               budget.what.c_str(), advice.c_str());
}

}  // namespace fusedmoe::cli
