// The stages of the FP8 MoE projection one by one: route_quant's codes and scales bit for bit
// against the host quantizer (and its ids exactly against the reference router), the schedule by
// its invariants (counts, each expert's slots hold exactly its routes, tile table).
#include <cuda_runtime_api.h>

#include <algorithm>

#include "common/env.hpp"
#include "moe/moe_fp8_plan.hpp"
#include "tests/moe/moe_fp8_test_util.hpp"

using namespace fusedmoe;
using namespace fusedmoe::test;

namespace {

template <class T>
std::vector<T> copy_back(const T* dev, size_t n) {
  std::vector<T> h(n);
  if (n) FMOE_CUDA(cudaMemcpy(h.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

TEST(MoeFp8Stages, RouteQuantMatchesHostQuantizerBitForBit) {
  FMOE_SKIP_WITHOUT_GPU();
  struct S { int T, E, k, K; };
  // T >= 1024 takes the two-warps-per-token launch shape.
  for (const S s : {S{1, 8, 2, 128}, S{37, 256, 8, 2048}, S{130, 128, 4, 2880}, S{9, 16, 1, 48},
                    S{1100, 64, 4, 384}, S{1030, 16, 1, 272}})
    for (uint64_t seed : seeds_for(hash_ints({s.T, s.E, s.k, s.K}))) {
      Problem pb;
      pb.T = s.T;
      pb.E = s.E;
      pb.k = s.k;
      pb.N = 128;
      pb.K = s.K;
      if (s.k == 1) pb.routing.fn = RoutingFn::sigmoid_top1_on_input;
      Inputs in = make_inputs(pb, seed);
      // Scale a few blocks to exercise saturation-free extremes, zero one block (scale 0).
      for (int c = 0; c < std::min(128, s.K); ++c) in.x[size_t(c)] = 0.0f;
      for (size_t i = 0; i < in.x.size(); ++i) in.x_bf16[i] = fmt::bf16_from_float(in.x[i]);
      in.d_x = DeviceBuffer::from(in.x_bf16);
      const MoeFp8ProjectionArgs a = make_args(pb, in);
      const detail::MoeFp8Plan plan = detail::plan_moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
      detail::run_moe_fp8_stage(plan, detail::MoeFp8Stage::route_quant, nullptr);
      FMOE_CUDA(cudaDeviceSynchronize());

      const ref::Routing r = ref::route(pb.routing, in.logits.data(), pb.T, pb.E, pb.k, nullptr);
      const std::vector<int32_t> ids = in.d_ids.to_host<int32_t>();
      const std::vector<float> w = in.d_weights.to_host<float>();
      ASSERT_EQ(std::vector<int32_t>(ids.begin(), ids.begin() + r.ids.size()), r.ids);
      // The quantized rows: x, or bf16(x * w) with the weight on the input.
      std::vector<float> a_rows(in.x);
      if (pb.routing.fn == RoutingFn::sigmoid_top1_on_input)
        for (int t = 0; t < pb.T; ++t)
          for (int c = 0; c < pb.K; ++c)
            a_rows[size_t(t) * pb.K + c] = fmt::round_to_bf16(in.x[size_t(t) * pb.K + c] * w[size_t(t)]);
      const int KB = (pb.K + 127) / 128;
      std::vector<uint8_t> q(a_rows.size());
      std::vector<float> sa(size_t(pb.T) * KB);
      fmt::quantize_fp8_per_token_128(a_rows.data(), pb.T, pb.K, q.data(), sa.data());
      const std::vector<uint8_t> got_q = copy_back(plan.ws.xq, q.size());
      const std::vector<float> got_sa = copy_back(plan.ws.sa, sa.size());
      for (size_t i = 0; i < q.size(); ++i)
        ASSERT_EQ(int(got_q[i]), int(q[i])) << "code " << i << " (x=" << a_rows[i] << ") seed " << seed;
      for (size_t i = 0; i < sa.size(); ++i)
        ASSERT_EQ(got_sa[i], sa[i]) << "scale " << i << " seed " << seed;
    }
}

TEST(MoeFp8Stages, ScheduleInvariants) {
  FMOE_SKIP_WITHOUT_GPU();
  // The schedule kernel (decode sizes fuse it into the GEMM).
  detail::ScopedKnob<bool> unfused(&detail::Knobs::fused_schedule, false);  // (decode sizes fuse it into the GEMM)
  struct S { int T, E, k; RouteKind route; };
  // Every compiled routes-per-thread value (FMOE_SCHEDULE_ROUTES; 0: the rule) on every case: 1, 2
  // and 4 split T = 5000 over 79, 40 and 20 CTAs, 8 over 10; T = 40000 (320000 routes) takes 4 by
  // the rule on an H100 / H200 and 157 CTAs.
  for (const S s : {S{1, 8, 2, RouteKind::computed}, S{128, 256, 8, RouteKind::computed},
                    S{700, 64, 6, RouteKind::hot}, S{5000, 128, 8, RouteKind::computed},
                    S{600, 32, 1, RouteKind::all_to_one}, S{40000, 256, 8, RouteKind::computed}})
    for (uint64_t seed : seeds_for(hash_ints({s.T, s.E, s.k, int(s.route)})))
    for (const int per_thread : {0, 1, 2, 4, 8}) {
      detail::ScopedKnob<int> routes(&detail::Knobs::schedule_routes, per_thread);
      Problem pb;
      pb.T = s.T;
      pb.E = s.E;
      pb.k = s.k;
      pb.N = 256;
      pb.K = 128;
      pb.route = s.route;
      Inputs in = make_inputs(pb, seed);
      const MoeFp8ProjectionArgs a = make_args(pb, in);
      const detail::MoeFp8Plan plan = detail::plan_moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
      detail::run_moe_fp8_stage(plan, detail::MoeFp8Stage::route_quant, nullptr);
      detail::run_moe_fp8_stage(plan, detail::MoeFp8Stage::schedule, nullptr);
      FMOE_CUDA(cudaDeviceSynchronize());
      const std::vector<int32_t> ids = copy_back(plan.schedule.topk_ids, size_t(pb.T) * pb.k);
      const ref::Permutation want = ref::permute(ids.data(), pb.T, pb.k, pb.E);
      const std::vector<int32_t> counts = copy_back(plan.ws.counts, size_t(pb.E));
      const std::vector<int32_t> tiles = copy_back(plan.ws.tile_offsets, size_t(pb.E) + 1);
      const std::vector<int32_t> route_offsets = copy_back(plan.ws.route_offsets, size_t(pb.E) + 1);
      const std::vector<int32_t> sorted = copy_back(plan.ws.sorted_route, size_t(pb.E) * pb.T);
      const std::vector<int32_t> slot = copy_back(plan.ws.route_slot, size_t(pb.T) * pb.k);
      ASSERT_EQ(counts, want.counts) << "seed " << seed << ", routes per thread " << per_thread;
      const int bt = detail::gemm_config_info(plan.config).block_t;
      int expect_tiles = 0;
      for (int e = 0; e < pb.E; ++e) {
        ASSERT_EQ(tiles[size_t(e)], expect_tiles) << "expert " << e;
        ASSERT_EQ(route_offsets[size_t(e)], want.offsets[size_t(e)]) << "expert " << e;
        // Token tiles; static numbering (decode): the GEMM numbers every expert's first itself.
        const int first = plan.schedule.static_tiles ? 1 : 0;
        expect_tiles += std::max((counts[size_t(e)] + bt - 1) / bt - first, 0);
        std::vector<int32_t> got(sorted.begin() + int64_t(e) * pb.T,
                                 sorted.begin() + int64_t(e) * pb.T + counts[size_t(e)]);
        std::vector<int32_t> exp(want.sorted_route_ids.begin() + want.offsets[size_t(e)],
                                 want.sorted_route_ids.begin() + want.offsets[size_t(e) + 1]);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(slot[size_t(got[i])], e * pb.T + int(i)) << "route -> slot -> route round trip";
        std::sort(got.begin(), got.end());
        ASSERT_EQ(got, exp) << "expert " << e << " holds other routes, seed " << seed << ", routes per thread "
                            << per_thread;
      }
      ASSERT_EQ(tiles[size_t(pb.E)], expect_tiles);
      ASSERT_EQ(route_offsets[size_t(pb.E)], pb.T * pb.k);
    }
}
