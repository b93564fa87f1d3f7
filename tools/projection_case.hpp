// One FP8 expert projection of a model (K = hidden, N = intermediate, the model's routing) on
// seeded random data, and the check of an output against the CPU reference. Shared by
// `fusedmoe run --projection` (tools/run.cpp) and `fusedmoe bench --op moe_fp8`
// (bench/moe_fp8.cpp). Header-only: the CLI links the bench sources only in CUDA builds, while
// the CPU path of `run` needs the same data and the same check.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/parallel.hpp"
#include "fusedmoe/config.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"

#if defined(FMOE_HAS_CUDA)
#include <cuda_runtime_api.h>

#include "common/cuda_check.hpp"
#include "fusedmoe/moe.hpp"
#include "tools/wait_or_die.hpp"
#endif

namespace fusedmoe::cli {

/// The projection of one model: w [E, N, K] e4m3 with [E, NB, KB] fp32 block scales.
struct ProjectionShape {
  int E = 0, N = 0, K = 0, k = 0;
  RoutingConfig routing;

  static ProjectionShape of(const MoeConfig& cfg) {
    return {cfg.num_experts, cfg.intermediate, cfg.hidden, cfg.top_k, cfg.routing};
  }
  int64_t n_blocks() const { return (N + 127) / 128; }
  int64_t k_blocks() const { return (K + 127) / 128; }
  /// Codes plus scales of one expert: what streaming it from memory costs.
  double expert_bytes() const { return double(N) * K + double(n_blocks() * k_blocks()) * 4.0; }
  double weight_bytes() const { return E * expert_bytes(); }
  /// The routing reads a bias [E] (as ref::route and the library require it).
  bool has_bias() const {
    return (routing.fn == RoutingFn::sigmoid_grouped_topk && routing.correction_bias) ||
           (routing.fn == RoutingFn::topk_softmax && routing.router_bias);
  }
};

/// Streams of the random tensors. x and logits use the streams of `fusedmoe run`'s layer inputs,
/// so a projection and a layer run with the same seed see the same tokens and routing.
enum ProjectionStream : uint64_t {
  kStreamCodes = 0x71, kStreamScales = 0x73, kStreamBias = 0x62, kStreamLogits = 0x6C,
  kStreamX = 0x78,
};

/// Random FP8 block-scaled weights: e4m3 codes uniform over the 254 codes that are not NaN, and
/// positive scales in [0.5, 1.5) * sqrt(3/K) / 448. Drawn as codes, not by quantizing floats:
/// the experts of the large presets (kimi-k2: 5.6 GB) then take about a second on 16 threads.
/// `progress`, if set, gets (codes drawn, in all) after each `codes_per_report` codes (a
/// multiple of 8).
inline ref::WeightSet random_fp8_weights(const ProjectionShape& s, uint64_t seed,
                                         const ref::ProgressFn& progress = {},
                                         int64_t codes_per_report = int64_t(1) << 27) {
  FMOE_REQUIRE(codes_per_report > 0 && codes_per_report % 8 == 0,
               "random_fp8_weights: codes_per_report=%lld must be a positive multiple of 8",
               (long long)codes_per_report);
  ref::WeightSet w;
  w.precision = Precision::fp8_block;
  w.E = s.E;
  w.N = s.N;
  w.K = s.K;
  w.q.resize(size_t(s.E) * size_t(s.N) * size_t(s.K));
  w.scale.resize(size_t(s.E) * size_t(s.n_blocks() * s.k_blocks()));
  uint8_t* q = w.q.data();
  const int64_t n = int64_t(w.q.size()), words = (n + 7) / 8;
  // Eight codes per 64-bit hash; codes depend only on (seed, index), not on the thread count or
  // the slabs (which only pace the progress reports).
  const int64_t slab_words = codes_per_report / 8;
  for (int64_t slab = 0; slab < words; slab += slab_words) {
    const int64_t slab_end = std::min(words, slab + slab_words);
    detail::parallel_for(slab_end - slab, [&](int64_t begin, int64_t end) {
      for (int64_t word = slab + begin; word < slab + end; ++word) {
        uint64_t bits = ref::hash3(seed, kStreamCodes, uint64_t(word));
        for (int64_t i = word * 8; i < std::min(n, word * 8 + 8); ++i, bits >>= 8) {
          const uint8_t code = uint8_t(bits);
          q[i] = (code & 0x7F) == 0x7F ? uint8_t(code ^ 1) : code;  // NaN -> +-448
        }
      }
    }, 1 << 16);
    if (progress) progress(std::min(n, slab_end * 8), n);
  }
  const float base = std::sqrt(3.0f / float(s.K)) / 448.0f;
  for (size_t i = 0; i < w.scale.size(); ++i)
    w.scale[i] = base * (1.0f + 0.5f * ref::uniform_pm1(seed, kStreamScales, i));
  return w;
}

/// Tokens x [T, K] ~ U(-1, 1) in bf16, router logits [T, E] ~ U(-3, 3), and the routing bias
/// [E] when the routing has one (empty otherwise; scales as in ref::make_random_layer).
struct ProjectionInputs {
  std::vector<float> x, logits, bias;
  const float* bias_or_null() const { return bias.empty() ? nullptr : bias.data(); }
};
inline ProjectionInputs random_projection_inputs(const ProjectionShape& s, int T, uint64_t seed) {
  ProjectionInputs in;
  in.x = ref::random_bf16(int64_t(T) * s.K, seed, kStreamX, 1.0f);
  in.logits.resize(size_t(T) * size_t(s.E));
  ref::fill_uniform(in.logits.data(), int64_t(in.logits.size()), seed, kStreamLogits, 3.0f);
  if (s.has_bias())
    in.bias = ref::random_bf16(s.E, seed, kStreamBias,
                               s.routing.fn == RoutingFn::topk_softmax ? 0.5f : 0.05f);
  return in;
}

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = fmt::bf16_from_float(v[i]);
  return bits;
}
inline std::vector<uint16_t> to_bf16_bits(const std::vector<double>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = fmt::bf16_from_float(float(v[i]));
  return bits;
}

/// Order-sensitive 64-bit FNV-1a over bf16 bits: equal hashes mean bit-identical outputs.
inline uint64_t bf16_hash(const std::vector<uint16_t>& bits) {
  uint64_t h = 1469598103934665603ull;
  for (const uint16_t b : bits) {
    h = (h ^ (b & 0xFF)) * 1099511628211ull;
    h = (h ^ (b >> 8)) * 1099511628211ull;
  }
  return h;
}

struct ExpertLoad {
  int hit = 0;         ///< experts with at least one route
  int max_routes = 0;  ///< routes on the busiest expert
};
inline ExpertLoad expert_load(const ref::Routing& r, int E) {
  std::vector<int> routes(size_t(E), 0);
  for (const int id : r.ids) ++routes[size_t(id)];
  ExpertLoad load;
  for (const int n : routes) {
    load.hit += n > 0;
    load.max_routes = std::max(load.max_routes, n);
  }
  return load;
}

/// An output y [T, N] (bf16 bits) against the reference (double, before the output rounding).
/// An element fails when it is not finite or |got - want| > 0.02 |want| + 0.01 max|want|: the
/// reference sees the same FP8 codes and scales, so only the bf16 rounding (2^-9 relative) and
/// the fp32 accumulation order separate them, far inside 2%; the absolute term keeps outputs
/// near zero (cancelling sums) from failing on accumulation noise. The relative error reported
/// is |got - want| / max(|want|, 0.01 max|want|), for the same reason.
struct ProjectionCheck {
  int64_t count = 0, bad = 0;
  int64_t worst = -1;  ///< the failing element furthest outside the tolerance (-1: none)
  double max_abs_err = 0, max_rel_err = 0, max_abs_want = 0;
  bool ok() const { return bad == 0; }
};
inline ProjectionCheck check_projection(const std::vector<uint16_t>& got,
                                        const std::vector<double>& want) {
  FMOE_REQUIRE(got.size() == want.size(), "check_projection: %zu outputs against %zu references",
               got.size(), want.size());
  ProjectionCheck c;
  c.count = int64_t(got.size());
  for (const double w : want) c.max_abs_want = std::max(c.max_abs_want, std::fabs(w));
  const double abs_floor = 0.01 * c.max_abs_want;
  double worst_excess = -1.0;
  for (int64_t i = 0; i < c.count; ++i) {
    const double g = fmt::bf16_to_float(got[size_t(i)]), w = want[size_t(i)];
    const double err = std::fabs(g - w), tol = 0.02 * std::fabs(w) + abs_floor;
    const bool finite = std::isfinite(g);
    if (finite) {
      c.max_abs_err = std::max(c.max_abs_err, err);
      const double denom = std::max(std::fabs(w), abs_floor);
      if (denom > 0) c.max_rel_err = std::max(c.max_rel_err, err / denom);
    }
    if (!finite || !(err <= tol)) {
      ++c.bad;
      const double excess = finite ? err - tol : INFINITY;
      if (excess > worst_excess) {
        worst_excess = excess;
        c.worst = i;
      }
    }
  }
  return c;
}

/// "3 of 65536 outputs outside |got - want| <= 0.02|want| + 0.01 max|want| (max|want| 1.2);
/// worst y[5, 17] = 0.5 (bf16), want 0.61" for failure messages.
inline std::string describe_failure(const ProjectionCheck& c, const std::vector<uint16_t>& got,
                                    const std::vector<double>& want, int N) {
  std::string s = strf("%lld of %lld outputs outside |got - want| <= 0.02|want| + 0.01 max|want| "
                       "(max|want| %.4g)", (long long)c.bad, (long long)c.count, c.max_abs_want);
  if (c.worst >= 0)
    s += strf("; worst y[%lld, %lld] = %.6g, want %.6g", (long long)(c.worst / N),
              (long long)(c.worst % N), double(fmt::bf16_to_float(got[size_t(c.worst)])),
              want[size_t(c.worst)]);
  return s;
}

/// Physical memory of this machine, for refusing weights that cannot fit before generating them.
inline double host_memory_bytes() {
  return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
}

#if defined(FMOE_HAS_CUDA)
/// Device memory of one input set (any pointer may be null only where its tensor is empty).
struct ProjectionPtrs {
  void* x = nullptr;        ///< [T, K] bf16
  void* logits = nullptr;   ///< [T, E] f32
  void* bias = nullptr;     ///< [E] f32 or nullptr (no bias)
  void* w = nullptr;        ///< [E, N, K] e4m3
  void* w_scale = nullptr;  ///< [E, NB, KB] f32
  void* y = nullptr;        ///< [T, N] bf16
};

/// The arguments of moe_fp8_projection for one input set on the current device, routed by the
/// model's routing function (computed inside the call).
inline MoeFp8ProjectionArgs projection_args(const ProjectionShape& s, int T, ReductionMode mode,
                                            const ProjectionPtrs& p) {
  int dev = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  auto on_gpu = [&](void* data, DType t, std::initializer_list<int64_t> shape) {
    return TensorRef::contiguous(data, t, shape, Device::cuda, dev);
  };
  MoeFp8ProjectionArgs a;
  a.x = on_gpu(p.x, DType::bf16, {T, s.K});
  a.router_logits = on_gpu(p.logits, DType::f32, {T, s.E});
  if (p.bias) a.routing_bias = on_gpu(p.bias, DType::f32, {s.E});
  a.w = on_gpu(p.w, DType::e4m3, {s.E, s.N, s.K});
  a.w_scale = on_gpu(p.w_scale, DType::f32, {s.E, s.n_blocks(), s.k_blocks()});
  a.y = on_gpu(p.y, DType::bf16, {T, s.N});
  a.routing = s.routing;
  a.top_k = s.k;
  a.mode = mode;
  return a;
}

#endif

}  // namespace fusedmoe::cli
