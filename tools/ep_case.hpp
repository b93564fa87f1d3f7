// One rank of `fusedmoe run --ep R` and `fusedmoe bench --op ep_layer --ep R` (a process per
// rank, ep_launch.hpp): the whole random layer drawn from the seed on every rank (so all ranks
// hold the same layer), uploaded whole for the single-GPU MoeLayer the check runs, and this
// rank's experts given to the EP layer as views of it; this rank's tokens; the EP forward
// checked against MoeLayer on the same tokens and routing. Header-only; CUDA + NCCL builds.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "dist/ep_plan.hpp"
#include "fusedmoe/ep_layer.hpp"
#include "fusedmoe/layer.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tools/ep_launch.hpp"
#include "tools/layer_case.hpp"
#include "tools/projection_case.hpp"

namespace fusedmoe::cli {

/// Experts [first, first + count) of a per-expert tensor [E, ...]: a view, no copy.
inline TensorRef expert_slice(TensorRef t, int first, int count) {
  if (!t.data) return t;
  t.data = static_cast<uint8_t*>(t.data) + int64_t(first) * t.stride[0] * int64_t(dtype_bytes(t.dtype));
  t.shape[0] = count;
  return t;
}

/// The EP layer's share of `w` (the whole layer's uploaded weights): this rank's experts; no
/// routing bias (the EP layer takes the caller's routing).
inline MoeLayerWeights rank_weights(const MoeLayerWeights& w, int first, int count) {
  MoeLayerWeights s = w;
  for (TensorRef* t : {&s.w13, &s.w13_scale, &s.w13_scale_2, &s.w2, &s.w2_scale, &s.w2_scale_2,
                       &s.b13, &s.b2})
    *t = expert_slice(*t, first, count);
  s.routing_bias = {};
  return s;
}

/// The combine a mode is checked with: deterministic -> choice order (bitwise equal to MoeLayer's
/// deterministic forward), fast -> rank order (2H bytes back per row; checked by relative L2).
inline EpCombine ep_combine_for(ReductionMode mode) {
  return mode == ReductionMode::deterministic ? EpCombine::choice_order : EpCombine::rank_order;
}
inline const char* ep_combine_name(EpCombine c) {
  return c == EpCombine::choice_order ? "choice-order" : "rank-order";
}

/// This rank's process state: its GPU, the whole layer (for the check), the communicator, and
/// the EP layer with its experts (make_layer). Construction blocks until every rank has joined
/// the communicator.
struct EpRank {
  EpChild child;
  cudaStream_t stream = nullptr;
  MoeConfig cfg;
  ref::LayerWeights host;
  GpuLayer whole;  // all E experts on this GPU: the single-GPU MoeLayer of the check
  std::unique_ptr<EpCommunicator> comm;
  std::unique_ptr<EpMoeLayer> ep;
  int first = 0, count = 0;
  std::string device_name;

  EpRank(const EpChild& c, const MoeConfig& config, uint64_t seed, cudaStream_t s)
      : child(c), stream(s), cfg(config) {
    cudaDeviceProp prop{};
    FMOE_CUDA(cudaGetDeviceProperties(&prop, c.device));
    device_name = prop.name;
    host = random_layer_codes(cfg, seed);  // codes: seconds even for the largest presets
    whole = make_gpu_layer(host, stream);
    const detail::ExpertPartition part(cfg.num_experts, c.ranks);
    first = part.first(c.rank);
    count = part.count(c.rank);
    EpUniqueId id;
    FMOE_REQUIRE(c.id.size() == sizeof(id.bytes), "ep rank: the NCCL id has %zu bytes, want %zu",
                 c.id.size(), sizeof(id.bytes));
    std::memcpy(id.bytes, c.id.data(), sizeof(id.bytes));
    comm = std::make_unique<EpCommunicator>(EpCommunicator::create(c.ranks, c.rank, id));
  }

  /// (Re)builds the EP layer with max_tokens_per_rank = `cap` (at least 1). Every rank must call
  /// it with the same cap. cap = T keeps the local layer on R * T rows: at R = 1 exactly
  /// MoeLayer's rows, so the bitwise claim compares like with like (a larger cap can change the
  /// local layer's config choice: docs/status.md, issue 13).
  const EpMoeLayer& make_layer(int cap) {
    ep.reset();  // its prepared weights go before the next layer's
    ep = std::make_unique<EpMoeLayer>(cfg, rank_weights(whole.weights, first, count), *comm,
                                      std::max(cap, 1), reinterpret_cast<Stream>(stream));
    return *ep;
  }
};

/// This rank's T tokens on the device: x [T, H] bf16 and the routing [T, k] computed on the host
/// by the reference's router from random logits (with the layer's routing bias, if any). Rank 0
/// draws the tokens `fusedmoe run` draws for the seed; rank r > 0 from a seed hashed with r.
struct EpTokens {
  int T = 0;
  DeviceBuffer x, ids, weights;
  ref::Routing routing;
};

/// use_bias = false: routed without the layer's correction / router bias (the random bias of a
/// seeded layer makes some experts, and so some ranks, far busier than trained biases would).
inline EpTokens ep_tokens(const MoeConfig& cfg, const ref::LayerWeights& lw, int T, uint64_t seed,
                          int rank, bool use_bias = true) {
  const uint64_t token_seed = rank == 0 ? seed : ref::hash3(seed, 0xE9, uint64_t(rank));
  const ProjectionInputs in = random_projection_inputs(ProjectionShape::of(cfg), T, token_seed);
  EpTokens t;
  t.T = T;
  // A routing that needs a bias (DeepSeek's grouped top-k) gets zeros when it is not used.
  const std::vector<float> zeros(use_bias ? 0 : lw.route_bias.size(), 0.0f);
  const float* bias = lw.route_bias.empty() ? nullptr : use_bias ? lw.route_bias.data() : zeros.data();
  t.routing = ref::route(cfg.routing, in.logits.data(), T, cfg.num_experts, cfg.top_k, bias);
  // (at least 16 bytes each: T = 0 still gets valid, aligned pointers)
  std::vector<uint16_t> x_bits = to_bf16_bits(in.x);
  x_bits.resize(std::max<size_t>(x_bits.size(), 8));
  std::vector<int32_t> ids = t.routing.ids;
  ids.resize(std::max<size_t>(ids.size(), 4));
  std::vector<float> w = t.routing.weights;
  w.resize(std::max<size_t>(w.size(), 4));
  t.x = DeviceBuffer::from(x_bits);
  t.ids = DeviceBuffer::from(ids);
  t.weights = DeviceBuffer::from(w);
  return t;
}

inline EpForwardArgs ep_forward_args(const EpTokens& t, void* y, int H, int k, int device,
                                     ReductionMode mode) {
  EpForwardArgs a;
  a.x = TensorRef::contiguous(t.x.get(), DType::bf16, {t.T, H}, Device::cuda, device);
  a.topk_ids = TensorRef::contiguous(t.ids.get(), DType::i32, {t.T, k}, Device::cuda, device);
  a.topk_weights = TensorRef::contiguous(t.weights.get(), DType::f32, {t.T, k}, Device::cuda, device);
  a.y = TensorRef::contiguous(y, DType::bf16, {t.T, H}, Device::cuda, device);
  a.combine = ep_combine_for(mode);
  a.mode = mode;
  return a;
}

/// The single-GPU MoeLayer's arguments for the same tokens and routing, output into `y`.
inline MoeForwardArgs ep_single_args(const EpRank& r, const EpTokens& t, void* y, int H, int k,
                                     ReductionMode mode) {
  const int device = r.child.device;
  MoeForwardArgs a;
  a.x = TensorRef::contiguous(t.x.get(), DType::bf16, {t.T, H}, Device::cuda, device);
  a.routing_given = true;
  a.topk_ids = TensorRef::contiguous(t.ids.get(), DType::i32, {t.T, k}, Device::cuda, device);
  a.topk_weights = TensorRef::contiguous(t.weights.get(), DType::f32, {t.T, k}, Device::cuda, device);
  a.y = TensorRef::contiguous(y, DType::bf16, {t.T, H}, Device::cuda, device);
  a.mode = mode;
  a.intermediate_scale_block = 64;  // as the EP layer quantizes its intermediate (ep_layer.cpp)
  return a;
}

/// The single-GPU layer on the same tokens and routing, in `mode`: y as bf16 bits.
inline std::vector<uint16_t> ep_reference(const EpRank& r, const EpTokens& t, int H, int k,
                                          ReductionMode mode) {
  DeviceBuffer y(std::max<size_t>(size_t(t.T) * H * 2, 16));
  y.fill(0xFF);  // NaN: every element must be written
  const size_t ws_bytes = r.whole.layer->workspace_size(t.T, mode);
  DeviceBuffer ws(std::max<size_t>(ws_bytes, 256));
  const MoeForwardArgs a = ep_single_args(r, t, y.get(), H, k, mode);
  r.whole.layer->forward(a, ws.get(), ws.bytes(), reinterpret_cast<Stream>(r.stream));
  wait_or_die(r.stream, 60, "MoeLayer::forward (the single-GPU reference of --ep)");
  std::vector<uint16_t> out = y.to_host<uint16_t>();
  out.resize(size_t(t.T) * H);
  return out;
}

/// EP output against the single-GPU layer's: bitwise (choice order) or by relative L2 (rank
/// order: each rank's bf16 row sums, then an fp32 sum in rank order, vs fp32 atomics; a few bf16
/// roundings apart, where a wrong row or expert is off by order 1).
struct EpCheck {
  bool bitwise = false;
  int64_t differing = 0, nonfinite = 0, elements = 0, first_diff = -1;
  double rel_l2 = 0, bound = 0;
  bool ok() const { return nonfinite == 0 && (bitwise ? differing == 0 : rel_l2 <= bound); }
};

constexpr double kEpRankOrderL2Bound = 1e-2;

inline EpCheck check_ep_output(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                               bool bitwise) {
  EpCheck c;
  c.bitwise = bitwise;
  c.bound = kEpRankOrderL2Bound;
  c.elements = int64_t(want.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = fmt::bf16_to_float(got[i]), w = fmt::bf16_to_float(want[i]);
    if (got[i] != want[i] && c.differing++ == 0) c.first_diff = int64_t(i);
    if (!std::isfinite(g) || !std::isfinite(w)) {
      c.nonfinite += !(std::isnan(g) && std::isnan(w)) && !(g == w);
      continue;
    }
    num += (g - w) * (g - w);
    den += w * w;
  }
  c.rel_l2 = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1.0 : 0.0);
  return c;
}

inline std::string describe_ep_check(const EpCheck& c, const std::vector<uint16_t>& got,
                                     const std::vector<uint16_t>& want, int H) {
  std::string s = c.bitwise
      ? strf("%lld of %lld elements differ from MoeLayer's bits", (long long)c.differing,
             (long long)c.elements)
      : strf("relative L2 %.2e vs MoeLayer (bound %.0e), %lld of %lld elements differ in bits",
             c.rel_l2, c.bound, (long long)c.differing, (long long)c.elements);
  if (c.nonfinite) s += strf(", %lld NaN/Inf where MoeLayer has none", (long long)c.nonfinite);
  if (c.first_diff >= 0 && !c.ok())
    s += strf("; first at y[%lld, %lld]: 0x%04x vs 0x%04x", (long long)(c.first_diff / H),
              (long long)(c.first_diff % H), unsigned(got[size_t(c.first_diff)]),
              unsigned(want[size_t(c.first_diff)]));
  return s;
}

}  // namespace fusedmoe::cli
