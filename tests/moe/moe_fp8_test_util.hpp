// Shared by the FP8 MoE projection tests: random problems, device copies, the reference check.
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/device_buffer.hpp"
#include "fusedmoe/formats.hpp"
#include "fusedmoe/moe.hpp"
#include "ref/random.hpp"
#include "ref/ref.hpp"
#include "tests/test_util.hpp"
#include "tests/tolerance.hpp"

namespace fusedmoe::test {

enum class RouteKind {
  computed,    ///< the kernel routes tie-free logits
  hot,         ///< the kernel routes; one expert is every token's first choice
  given,       ///< caller-given ids/weights from the reference router
  all_to_one,  ///< caller-given: every token's first choice is expert 0 (k=1: all rows on one)
};

struct Problem {
  int T = 16, E = 8, k = 2, N = 128, K = 256;
  RoutingConfig routing;
  ReductionMode mode = ReductionMode::fast;
  RouteKind route = RouteKind::computed;
  bool ids_out = true;  ///< computed routing: also write ids/weights to caller tensors
  std::string describe() const {
    return strf("T=%d E=%d k=%d N=%d K=%d routing=%s mode=%s route=%d", T, E, k, N, K,
                routing_fn_name(routing.fn), reduction_mode_name(mode), int(route));
  }
};

/// Random FP8 expert weights straight as codes and scales (what the kernel reads): random e4m3
/// codes without the NaN codes, random positive block scales around 2^-6.
inline ref::WeightSet random_fp8_weights(int E, int N, int K, uint64_t seed) {
  ref::WeightSet w;
  w.precision = Precision::fp8_block;
  w.E = E;
  w.N = N;
  w.K = K;
  w.q.resize(size_t(E) * N * K);
  const int NB = (N + 127) / 128, KB = (K + 127) / 128;
  w.scale.resize(size_t(E) * NB * KB);
  for (size_t i = 0; i < w.q.size(); ++i) {
    uint8_t c = uint8_t(ref::hash3(seed, 0x57, i));
    if ((c & 0x7F) == 0x7F) c ^= 0x01;  // 0x7F/0xFF are NaN
    w.q[i] = c;
  }
  for (size_t i = 0; i < w.scale.size(); ++i)
    w.scale[i] = std::ldexp(1.0f + 0.5f * ref::uniform_pm1(seed, 0x53, i), -14);
  return w;
}

/// Host inputs of one problem and their device copies.
struct Inputs {
  std::vector<float> x;       ///< [T, K] bf16-valued
  std::vector<uint16_t> x_bf16;
  std::vector<float> logits;  ///< [T, E]
  std::vector<float> bias;    ///< [E] (routing with a bias) or empty
  ref::WeightSet w;
  ref::Routing given;         ///< caller-given routing (RouteKind::given / all_to_one)

  DeviceBuffer d_x, d_logits, d_bias, d_w, d_scale, d_ids, d_weights, d_y, d_ws;
  size_t ws_bytes = 0;
};

inline Inputs make_inputs(const Problem& pb, uint64_t seed) {
  Inputs in;
  in.x = ref::random_bf16(int64_t(pb.T) * pb.K, seed, 0x78, 1.0f);
  in.x_bf16.resize(in.x.size());
  for (size_t i = 0; i < in.x.size(); ++i) in.x_bf16[i] = fmt::bf16_from_float(in.x[i]);
  const int hot = pb.route == RouteKind::hot ? int(seed % uint64_t(pb.E)) : -1;
  in.logits = ref::tie_free_logits(pb.T, pb.E, seed, 8.0f, hot);
  const bool bias = (pb.routing.fn == RoutingFn::sigmoid_grouped_topk && pb.routing.correction_bias) ||
                    (pb.routing.fn == RoutingFn::topk_softmax && pb.routing.router_bias);
  if (bias) in.bias = ref::random_bf16(pb.E, seed, 0x62, 0.05f);
  in.w = random_fp8_weights(pb.E, pb.N, pb.K, seed);
  if (pb.route == RouteKind::given || pb.route == RouteKind::all_to_one) {
    in.given = ref::route(pb.routing, in.logits.data(), pb.T, pb.E, pb.k,
                          in.bias.empty() ? nullptr : in.bias.data());
    if (pb.route == RouteKind::all_to_one) {
      // Expert 0 first for every token; the other choices keep the router's order, minus 0.
      for (int t = 0; t < pb.T; ++t) {
        int* ids = in.given.ids.data() + size_t(t) * pb.k;
        int pos = -1;
        for (int j = 0; j < pb.k; ++j)
          if (ids[j] == 0) pos = j;
        if (pos < 0) pos = pb.k - 1;  // drop the last choice to make room
        for (int j = pos; j > 0; --j) ids[j] = ids[j - 1];
        ids[0] = 0;
      }
    }
  }
  in.d_x = DeviceBuffer::from(in.x_bf16);
  in.d_logits = DeviceBuffer::from(in.logits);
  if (!in.bias.empty()) in.d_bias = DeviceBuffer::from(in.bias);
  in.d_w = DeviceBuffer::from(in.w.q);
  in.d_scale = DeviceBuffer::from(in.w.scale);
  if (!in.given.ids.empty()) {
    in.d_ids = DeviceBuffer::from(in.given.ids);
    in.d_weights = DeviceBuffer::from(in.given.weights);
  } else {
    in.d_ids.resize(size_t(pb.T) * pb.k * 4 + 4);
    in.d_weights.resize(size_t(pb.T) * pb.k * 4 + 4);
    in.d_ids.fill(0xFF);  // every id must be written (and initcheck sees the guard word set)
    in.d_weights.fill(0xFF);
  }
  in.d_y.resize(size_t(pb.T) * pb.N * 2 + 16);
  in.ws_bytes = moe_fp8_projection_workspace_size(pb.T, pb.E, pb.k, pb.N, pb.K, pb.mode);
  in.d_ws.resize(in.ws_bytes);
  in.d_ws.fill(0xAB);  // the workspace needs no initialization: start it dirty
  return in;
}

inline MoeFp8ProjectionArgs make_args(const Problem& pb, Inputs& in) {
  MoeFp8ProjectionArgs a;
  a.x = TensorRef::contiguous(in.d_x.get(), DType::bf16, {pb.T, pb.K}, Device::cuda);
  a.router_logits = TensorRef::contiguous(in.d_logits.get(), DType::f32, {pb.T, pb.E}, Device::cuda);
  if (!in.bias.empty())
    a.routing_bias = TensorRef::contiguous(in.d_bias.get(), DType::f32, {pb.E}, Device::cuda);
  a.routing_given = pb.route == RouteKind::given || pb.route == RouteKind::all_to_one;
  if (a.routing_given || pb.ids_out) {
    a.topk_ids = TensorRef::contiguous(in.d_ids.get(), DType::i32, {pb.T, pb.k}, Device::cuda);
    a.topk_weights = TensorRef::contiguous(in.d_weights.get(), DType::f32, {pb.T, pb.k}, Device::cuda);
  }
  a.w = TensorRef::contiguous(in.d_w.get(), DType::e4m3, {pb.E, pb.N, pb.K}, Device::cuda);
  a.w_scale = TensorRef::contiguous(in.d_scale.get(), DType::f32,
                                    {pb.E, (pb.N + 127) / 128, (pb.K + 127) / 128}, Device::cuda);
  a.y = TensorRef::contiguous(in.d_y.get(), DType::bf16, {pb.T, pb.N}, Device::cuda);
  a.routing = pb.routing;
  a.top_k = pb.k;
  a.mode = pb.mode;
  return a;
}

/// y copied back as floats.
inline std::vector<float> y_host(const Problem& pb, const Inputs& in) {
  std::vector<uint16_t> bits(size_t(pb.T) * pb.N);
  if (!bits.empty())
    FMOE_CUDA(cudaMemcpy(bits.data(), in.d_y.get(), bits.size() * 2, cudaMemcpyDeviceToHost));
  std::vector<float> y(bits.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = fmt::bf16_to_float(bits[i]);
  return y;
}

/// FP8 wgmma accumulates each 128-K block with about 14 bits of precision (DeepSeek-V3 report):
/// the per-element bound allows 2^-12 of sum |a*b| on top of the output rounding.
inline Tol tol_fp8_gemm() { return tol_bf16_out(4096.0); }

inline void check_against_ref(const Problem& pb, const Inputs& in, const std::vector<float>& got,
                              const std::string& ctx) {
  const ref::ProjectionResult want =
      ref::moe_projection(pb.routing, in.x.data(), in.logits.data(),
                          in.bias.empty() ? nullptr : in.bias.data(), pb.T, pb.k, in.w,
                          in.given.ids.empty() ? nullptr : &in.given);
  check_close([&](size_t i) { return got[i]; }, want.y.data(), want.abs_sum.data(), got.size(),
              tol_fp8_gemm(), ctx);
}

}  // namespace fusedmoe::test
