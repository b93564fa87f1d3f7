// The fused FP8 MoE projection on the GPU against the CPU reference (ref::moe_projection), fed
// the same FP8 codes and scales: every routing function, T from 0 to 4096, E up to 384, odd K/N,
// hot and all-to-one experts, both reduction modes, poisoned outputs, graph capture, bad ids.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/env.hpp"
#include "moe/moe_fp8_plan.hpp"
#include "tests/moe/moe_fp8_test_util.hpp"

using namespace fusedmoe;
using namespace fusedmoe::test;

namespace {

// The ids and weights the kernel wrote equal ref::route's on the same logits and bias.
void check_routing(const Problem& pb, const Inputs& in, const std::string& ctx) {
  const ref::Routing want = ref::route(pb.routing, in.logits.data(), pb.T, pb.E, pb.k,
                                       in.bias.empty() ? nullptr : in.bias.data());
  const std::vector<int32_t> ids = in.d_ids.to_host<int32_t>();
  const std::vector<float> w = in.d_weights.to_host<float>();
  for (size_t i = 0; i < want.ids.size(); ++i) {
    ASSERT_EQ(ids[i], want.ids[i]) << ctx << " route " << i;
    ASSERT_NEAR(w[i], want.weights[i], 2e-6 * std::fabs(want.weights[i]) + 1e-30) << ctx << " route " << i;
  }
}

// Runs one problem for each seed: poisoned y, the call, the reference check.
void run_and_check(const Problem& pb, int seeds = 3) {
  std::vector<uint64_t> seeds_all = seeds_for(hash_ints({pb.T, pb.E, pb.k, pb.N, pb.K,
                                                         int(pb.routing.fn), int(pb.mode),
                                                         int(pb.route)}));
  seeds_all.resize(size_t(std::min<int>(seeds, int(seeds_all.size()))));
  for (uint64_t seed : seeds_all) {
    Inputs in = make_inputs(pb, seed);
    in.d_y.fill(0xFF);  // NaN in bf16: an element the call does not write fails the check
    MoeFp8ProjectionArgs a = make_args(pb, in);
    moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = y_host(pb, in);
    check_against_ref(pb, in, got, pb.describe() + strf(" seed %llu", (unsigned long long)seed));
    EXPECT_EQ(moe_fp8_dropped_routes(in.d_ws.get(), pb.T, pb.E, pb.k, pb.N, pb.K, pb.mode, nullptr), 0);
    if (!a.routing_given && pb.ids_out && pb.T > 0)  // the kernel's routing equals the reference's exactly
    {
      check_routing(pb, in, pb.describe() + strf(" seed %llu", (unsigned long long)seed));
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

Problem base(int T, int E, int k, int N, int K, ReductionMode mode) {
  Problem pb;
  pb.T = T;
  pb.E = E;
  pb.k = k;
  pb.N = N;
  pb.K = K;
  pb.mode = mode;
  return pb;
}

void expect_same_bits(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                      const std::string& ctx) {
  ASSERT_EQ(got.size(), want.size());
  size_t diffs = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && diffs++ == 0) first = i;
  EXPECT_EQ(diffs, 0u) << ctx << ": " << diffs << " elements differ; first #" << first << " got 0x"
                       << std::hex << got[first] << " want 0x" << want[first] << std::dec;
}

const ReductionMode kModes[] = {ReductionMode::fast, ReductionMode::deterministic};

}  // namespace

TEST(MoeFp8Gpu, TokenCountsAndExpertCounts) {
  FMOE_SKIP_WITHOUT_GPU();
  struct S { int T, E, k, N, K; };
  for (const S s : {S{0, 8, 2, 128, 256}, S{1, 8, 2, 128, 256}, S{2, 128, 8, 256, 512},
                    S{7, 256, 8, 512, 2048}, S{128, 256, 8, 512, 2048}, S{1000, 128, 8, 256, 512},
                    S{4096, 384, 8, 128, 256}, S{333, 8, 2, 384, 384}})
    for (ReductionMode m : kModes) {
      Problem pb = base(s.T, s.E, s.k, s.N, s.K, m);
      pb.ids_out = s.T % 2 == 0;  // odd T: routing stays in the workspace
      run_and_check(pb, s.T >= 1000 ? 1 : 2);
    }
}

TEST(MoeFp8Gpu, OddShapesPadInsideTheKernels) {
  FMOE_SKIP_WITHOUT_GPU();
  struct S { int T, E, k, N, K; };
  // gpt-oss's 2880 (not a multiple of 128), the smallest legal sizes, and mixed remainders.
  for (const S s : {S{9, 16, 4, 2880, 2880}, S{5, 4, 2, 16, 16}, S{33, 32, 3, 48, 144},
                    S{17, 64, 8, 400, 1040}})
    for (ReductionMode m : kModes) run_and_check(base(s.T, s.E, s.k, s.N, s.K, m), 2);
}

TEST(MoeFp8Gpu, EveryRoutingFunction) {
  FMOE_SKIP_WITHOUT_GPU();
  for (ReductionMode m : kModes) {
    Problem pb = base(37, 64, 6, 256, 512, m);
    for (bool renorm : {true, false})
      for (float softcap : {0.0f, 30.0f}) {
        pb.routing = RoutingConfig{};
        pb.routing.renormalize = renorm;
        pb.routing.softcap = softcap;
        pb.routing.routed_scaling_factor = 1.25f;
        run_and_check(pb, 2);
      }
    // DeepSeek-V3: sigmoid + correction bias, 8 groups keep 4, scaling 2.5.
    Problem ds = base(29, 256, 8, 256, 512, m);
    ds.routing.fn = RoutingFn::sigmoid_grouped_topk;
    ds.routing.num_groups = 8;
    ds.routing.topk_groups = 4;
    ds.routing.correction_bias = true;
    ds.routing.routed_scaling_factor = 2.5f;
    run_and_check(ds, 2);
    // Kimi-K2: one group, 384 experts.
    Problem kimi = base(21, 384, 8, 128, 256, m);
    kimi.routing = ds.routing;
    kimi.routing.num_groups = 1;
    kimi.routing.topk_groups = 1;
    run_and_check(kimi, 2);
    // gpt-oss: router bias, top-k then softmax over the k.
    Problem oss = base(19, 128, 4, 2880, 2880, m);
    oss.routing.fn = RoutingFn::topk_softmax;
    oss.routing.router_bias = true;
    run_and_check(oss, 1);
    // Llama 4: top-1, sigmoid weight multiplied into the token before the expert.
    Problem l4 = base(23, 128, 1, 256, 512, m);
    l4.routing.fn = RoutingFn::sigmoid_top1_on_input;
    run_and_check(l4, 2);
  }
}

// The grouped top-k at every group width the kernel has a path for (groups of 32 M experts are
// lane slices, M = 1, 2, 4: all groups scored at once; 16 experts a group: one group at a time),
// on tie-free logits and on logits and biases rounded to a few values, so that experts tie within
// and across groups and groups tie on their scores: the ids must equal the reference's (ties to
// the lower expert, and to the lower group) in both cases.
TEST(MoeFp8Gpu, GroupedRoutingEveryGroupWidthAndTies) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Groups { int E, groups, keep; };
  for (const Groups g : {Groups{256, 8, 4}, Groups{256, 4, 2}, Groups{256, 2, 1}, Groups{128, 4, 3},
                         Groups{64, 4, 2}})
    for (bool ties : {false, true}) {
      Problem pb = base(37, g.E, 8, 256, 512, ReductionMode::fast);
      pb.routing.fn = RoutingFn::sigmoid_grouped_topk;
      pb.routing.num_groups = g.groups;
      pb.routing.topk_groups = g.keep;
      pb.routing.correction_bias = true;
      pb.routing.routed_scaling_factor = 2.5f;
      const uint64_t seed = seeds_for(hash_ints({g.E, g.groups, g.keep, ties}))[0];
      Inputs in = make_inputs(pb, seed);
      if (ties) {
        for (float& l : in.logits) l = std::round(l);             // 17 values in [-8, 8]
        for (float& b : in.bias) b = std::round(b * 40.0f) / 40.0f;  // -0.05, -0.025, 0, ...
        in.d_logits = DeviceBuffer::from(in.logits);
        in.d_bias = DeviceBuffer::from(in.bias);
      }
      in.d_y.fill(0xFF);
      const MoeFp8ProjectionArgs a = make_args(pb, in);
      moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
      FMOE_CUDA(cudaDeviceSynchronize());
      const std::string ctx = pb.describe() + strf(" groups %d keep %d%s seed %llu", g.groups, g.keep,
                                                   ties ? " ties" : "", (unsigned long long)seed);
      check_routing(pb, in, ctx);
      if (testing::Test::HasFatalFailure()) return;
      check_against_ref(pb, in, y_host(pb, in), ctx);
    }
}

// The plain top-k at every candidates-a-lane width the kernel compiles (4 for E <= 128, 8 for
// E <= 256, 16 above) with logits rounded to a few values, so that many experts tie: each lane's
// candidates are sorted once and popped (sort_best_first), which must rank ties to the lower
// expert as the reference does. Softmax on float, softcapped softmax on double. A fresh seed per
// run (printed with each failure).
TEST(MoeFp8Gpu, TopkTiesAtEveryLaneWidth) {
  FMOE_SKIP_WITHOUT_GPU();
  for (const int E : {32, 64, 128, 160, 256, 384})
    for (const float softcap : {0.0f, 30.0f}) {
      Problem pb = base(41, E, 8, 256, 512, ReductionMode::fast);
      pb.routing = RoutingConfig{};
      pb.routing.softcap = softcap;
      const uint64_t seed = seeds_for(hash_ints({E, int(softcap)})).back();
      Inputs in = make_inputs(pb, seed);
      for (float& l : in.logits) l = std::round(l * 0.5f);  // ~9 values: every token has ties
      in.d_logits = DeviceBuffer::from(in.logits);
      in.d_y.fill(0xFF);
      const MoeFp8ProjectionArgs a = make_args(pb, in);
      moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
      FMOE_CUDA(cudaDeviceSynchronize());
      const std::string ctx = pb.describe() + strf(" ties softcap %g seed %llu", softcap, (unsigned long long)seed);
      check_routing(pb, in, ctx);
      if (testing::Test::HasFatalFailure()) return;
      check_against_ref(pb, in, y_host(pb, in), ctx);
    }
}

// route_quant's block routing (all four warps of a token rank its sigmoid_grouped_topk experts:
// route_token_block, FMOE_ROUTE_BLOCK=2 so that one group takes it too) against the warp path
// (FMOE_ROUTE_BLOCK=0) and the reference: the ids
// and weights of both paths must be the same bits and equal the reference's, at every group
// width the block path takes (32, 64, 128 experts a group, and one group), partial last blocks
// (E = 100), k from 1 (a group still scores its two best) to 16 (the lists' size), T = 1 to 1023
// (the four-warp kernel's sizes), tie-free and tied logits; E = 320 in 8 groups of 40 takes the
// warp path either way. A fresh seed per case, printed with each failure.
TEST(MoeFp8Gpu, BlockRoutingMatchesWarpRouting) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Case { int T, E, k, groups, keep; };
  const Case cases[] = {{1, 256, 8, 8, 4},  {2, 256, 8, 8, 4},  {5, 256, 8, 8, 4},
                        {37, 256, 8, 8, 4}, {1023, 256, 8, 8, 4}, {1, 384, 8, 1, 1},
                        {37, 384, 8, 1, 1}, {3, 160, 8, 1, 1},  {9, 100, 6, 1, 1},
                        {7, 64, 1, 2, 1},   {300, 512, 16, 4, 2}, {6, 256, 3, 4, 2},
                        {11, 128, 8, 4, 3}, {4, 320, 8, 8, 4}};
  for (const Case c : cases)
    for (bool ties : {false, true}) {
      Problem pb = base(c.T, c.E, c.k, 256, 512, ReductionMode::fast);
      pb.routing.fn = RoutingFn::sigmoid_grouped_topk;
      pb.routing.num_groups = c.groups;
      pb.routing.topk_groups = c.keep;
      pb.routing.correction_bias = true;
      pb.routing.routed_scaling_factor = 2.5f;
      const uint64_t seed = seeds_for(hash_ints({c.T, c.E, c.k, c.groups, ties})).back();
      Inputs in = make_inputs(pb, seed);
      if (ties) {
        for (float& l : in.logits) l = std::round(l);                // 17 values in [-8, 8]
        for (float& b : in.bias) b = std::round(b * 40.0f) / 40.0f;  // a few values
        in.d_logits = DeviceBuffer::from(in.logits);
        in.d_bias = DeviceBuffer::from(in.bias);
      }
      const std::string ctx = pb.describe() + strf(" groups %d keep %d%s seed %llu", c.groups,
                                                   c.keep, ties ? " ties" : "",
                                                   (unsigned long long)seed);
      std::vector<int32_t> ids[2];
      std::vector<float> w[2];
      for (int path = 0; path < 2; ++path) {  // 0: the warp path, 1: the block path
        detail::ScopedKnob<int> knob(&detail::Knobs::route_block, path == 0 ? 0 : 2);
        in.d_y.fill(0xFF);
        in.d_ids.fill(0xFF);
        in.d_weights.fill(0xFF);
        const MoeFp8ProjectionArgs a = make_args(pb, in);
        moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
        FMOE_CUDA(cudaDeviceSynchronize());
        check_routing(pb, in, ctx + (path == 0 ? " warp path" : " block path"));
        if (testing::Test::HasFatalFailure()) return;
        ids[path] = in.d_ids.to_host<int32_t>();
        w[path] = in.d_weights.to_host<float>();
        if (path == 1) check_against_ref(pb, in, y_host(pb, in), ctx);
      }
      EXPECT_EQ(ids[0], ids[1]) << ctx;
      EXPECT_EQ(0, std::memcmp(w[0].data(), w[1].data(), w[0].size() * sizeof(float)))
          << ctx << ": the weights differ in their bits";
    }
}

TEST(MoeFp8Gpu, HotExpertAndAllTokensToOneExpert) {
  FMOE_SKIP_WITHOUT_GPU();
  for (ReductionMode m : kModes) {
    Problem hot = base(300, 128, 8, 256, 512, m);
    hot.route = RouteKind::hot;  // one expert gets all 300 tokens: several token tiles
    run_and_check(hot, 2);
    Problem one = base(1000, 64, 1, 256, 384, m);
    one.route = RouteKind::all_to_one;  // every row on expert 0, all others empty
    run_and_check(one, 1);
    Problem given = base(50, 32, 4, 128, 256, m);
    given.route = RouteKind::given;
    run_and_check(given, 2);
  }
}

TEST(MoeFp8Gpu, EveryCompiledConfigRuns) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int i = 0; i < int(detail::GemmConfigId::count); ++i) {
    const detail::GemmConfigInfo c = detail::gemm_config_info(detail::GemmConfigId(i));
    if (c.rows != detail::GemmRows::gathered || c.epilogue != detail::GemmEpilogue::combine)
      continue;  // the layer's configs: tests/layer
    detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, c.name);
    for (ReductionMode m : kModes) {
      run_and_check(base(150, 16, 4, 256, 640, m), 1);  // ~37 rows per expert: several tiles at 16
      run_and_check(base(3, 8, 2, c.waves * 128, 128, m), 1);  // two waves: two 128-row tiles
    }
  }
}

TEST(MoeFp8Gpu, ScheduleKernelPathAtDecodeSizes) {
  // Decode sizes normally fuse the schedule into the GEMM; the schedule kernel path must give
  // the same results there too (it is the path of every larger T).
  FMOE_SKIP_WITHOUT_GPU();
  detail::ScopedKnob<bool> unfused(&detail::Knobs::fused_schedule, false);
  for (ReductionMode m : kModes) {
    run_and_check(base(128, 256, 8, 512, 2048, m), 1);
    Problem hot = base(300, 128, 8, 256, 512, m);
    hot.route = RouteKind::hot;
    run_and_check(hot, 1);
    Problem given = base(50, 32, 4, 128, 256, m);
    given.route = RouteKind::given;
    run_and_check(given, 1);
  }
}

TEST(MoeFp8Gpu, DeterministicModeIsBitwiseReproducible) {
  FMOE_SKIP_WITHOUT_GPU();
  for (int T : {128, 1000}) {
    Problem pb = base(T, 256, 8, 512, 2048, ReductionMode::deterministic);
    Inputs in = make_inputs(pb, seeds_for(hash_ints({T, 0xdede}))[2]);
    MoeFp8ProjectionArgs a = make_args(pb, in);
    cudaStream_t s;
    FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, s);
    FMOE_CUDA(cudaStreamSynchronize(s));
    // y's buffer has a few padding elements past T*N: compare the T*N outputs only.
    auto y_bits = [&] {
      std::vector<uint16_t> v = in.d_y.to_host<uint16_t>();
      v.resize(size_t(pb.T) * pb.N);
      return v;
    };
    const std::vector<uint16_t> first = y_bits();
    // 10 direct calls and 10 replays of a captured graph: all bitwise equal to the first.
    for (int i = 0; i < 10; ++i) {
      in.d_y.fill(0xFF);
      moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, s);
      FMOE_CUDA(cudaStreamSynchronize(s));
      expect_same_bits(y_bits(), first, strf("direct call %d T=%d", i, T));
    }
    cudaGraph_t g;
    FMOE_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, s);
    FMOE_CUDA(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t ge;
    FMOE_CUDA(cudaGraphInstantiate(&ge, g, 0));
    for (int i = 0; i < 10; ++i) {
      in.d_y.fill(0xFF);
      FMOE_CUDA(cudaGraphLaunch(ge, s));
      FMOE_CUDA(cudaStreamSynchronize(s));
      expect_same_bits(y_bits(), first, strf("graph replay %d T=%d", i, T));
    }
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaStreamDestroy(s);
    check_against_ref(pb, in, y_host(pb, in), pb.describe());
  }
}

TEST(MoeFp8Gpu, GraphReplayMatchesDirectCallInFastMode) {
  FMOE_SKIP_WITHOUT_GPU();
  Problem pb = base(128, 256, 8, 512, 2048, ReductionMode::fast);
  Inputs in = make_inputs(pb, seeds_for(0xfa57)[2]);
  MoeFp8ProjectionArgs a = make_args(pb, in);
  cudaStream_t s;
  FMOE_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  FMOE_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, s);  // no host sync inside: capturable
  FMOE_CUDA(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  FMOE_CUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 5; ++i) {
    in.d_y.fill(0xFF);
    FMOE_CUDA(cudaGraphLaunch(ge, s));
    FMOE_CUDA(cudaStreamSynchronize(s));
    check_against_ref(pb, in, y_host(pb, in), pb.describe() + strf(" replay %d", i));
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
}

TEST(MoeFp8Gpu, NaNInputPoisonsOnlyItsToken) {
  FMOE_SKIP_WITHOUT_GPU();
  for (ReductionMode m : kModes) {
    Problem pb = base(8, 16, 2, 128, 256, m);
    Inputs in = make_inputs(pb, 77);
    in.x[3 * pb.K + 5] = std::nanf("");  // token 3, first 128-block
    in.x_bf16[3 * pb.K + 5] = fmt::bf16_from_float(in.x[3 * pb.K + 5]);
    in.d_x = DeviceBuffer::from(in.x_bf16);
    MoeFp8ProjectionArgs a = make_args(pb, in);
    moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
    const std::vector<float> got = y_host(pb, in);
    for (int t = 0; t < pb.T; ++t)
      for (int n = 0; n < pb.N; ++n)
        ASSERT_EQ(std::isnan(got[size_t(t) * pb.N + n]), t == 3) << "t=" << t << " n=" << n;
    check_against_ref(pb, in, got, pb.describe() + " NaN in token 3");
  }
}

TEST(MoeFp8Gpu, BadCallerIdsAreRejectedOrDropped) {
  FMOE_SKIP_WITHOUT_GPU();
  for (ReductionMode m : kModes) {
    Problem pb = base(12, 16, 2, 128, 256, m);
    pb.route = RouteKind::given;
    Inputs in = make_inputs(pb, 91);
    std::vector<int32_t> bad = in.given.ids;
    bad[5] = 16;   // out of range
    bad[8] = -1;   // negative
    in.d_ids = DeviceBuffer::from(bad);
    MoeFp8ProjectionArgs a = make_args(pb, in);
    expect_error([&] { moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr); },
                 "topk_ids[2, 1] = 16 is not an expert id in [0, 16)");
    // Unchecked (e.g. inside a graph): the bad routes are dropped and counted, nothing else moves.
    a.validate_routing = false;
    in.d_y.fill(0xFF);
    moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(moe_fp8_dropped_routes(in.d_ws.get(), pb.T, pb.E, pb.k, pb.N, pb.K, m, nullptr), 2);
    ref::Routing without = in.given;
    without.weights[5] = 0.0f;  // a dropped route contributes nothing
    without.weights[8] = 0.0f;
    without.ids[5] = 0;
    without.ids[8] = without.ids[9] == 0 ? 1 : 0;
    in.given = without;
    check_against_ref(pb, in, y_host(pb, in), pb.describe() + " dropped routes");
    // A repeated expert inside a token is refused when checked.
    std::vector<int32_t> dup = without.ids;
    dup[1] = dup[0];
    in.d_ids = DeviceBuffer::from(dup);
    a = make_args(pb, in);
    expect_error([&] { moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr); },
                 "repeats expert");
    // Unchecked, a repeat is dropped and counted, the same way by the fused schedule (decode
    // sizes) and the schedule kernel, so the result does not depend on T.
    a.validate_routing = false;
    int expect_dropped = 0;
    ref::Routing dedup = without;
    dedup.ids = dup;
    dedup.weights = in.d_weights.to_host<float>();  // what the device reads (routes 5, 8 valid now)
    for (int r = 0; r < pb.T * pb.k; ++r) {
      bool repeat = false;
      for (int j = r - r % pb.k; j < r; ++j) repeat = repeat || dup[size_t(j)] == dup[size_t(r)];
      if (repeat) {
        dedup.weights[size_t(r)] = 0.0f;
        ++expect_dropped;
      }
    }
    ASSERT_GE(expect_dropped, 1);
    in.given = dedup;
    for (bool fused : {true, false}) {
      detail::ScopedKnob<bool> path(&detail::Knobs::fused_schedule, fused);
      in.d_y.fill(0xFF);
      moe_fp8_projection(a, in.d_ws.get(), in.ws_bytes, nullptr);
      FMOE_CUDA(cudaDeviceSynchronize());
      EXPECT_EQ(moe_fp8_dropped_routes(in.d_ws.get(), pb.T, pb.E, pb.k, pb.N, pb.K, m, nullptr),
                expect_dropped) << (fused ? "fused schedule" : "schedule kernel");
      check_against_ref(pb, in, y_host(pb, in),
                        pb.describe() + (fused ? " repeat, fused schedule" : " repeat, schedule kernel"));
    }
  }
}

TEST(MoeFp8Gpu, SanitizerSmall) {
  // Shapes for compute-sanitizer (memcheck, racecheck, synccheck, initcheck: scripts/gpu_check.sh)
  // that are small but reach every ring and tile path: K=2880 has 23 k-blocks, so the k-stage
  // ring (<= 10 stages) and the meta ring wrap within one tile; forced BLOCK_T=128 with ~75 routes
  // per expert and the schedule kernel gives several token tiles per expert; T=5 runs the fused
  // schedule with static tiles. The grouped sigmoid routing below takes route_quant's block path
  // (four warps a token, shared lists between named barriers) with 2 blocks a group.
  FMOE_SKIP_WITHOUT_GPU();
  Problem grouped = base(6, 256, 8, 128, 256, ReductionMode::fast);
  grouped.routing.fn = RoutingFn::sigmoid_grouped_topk;
  grouped.routing.num_groups = 4;
  grouped.routing.topk_groups = 2;
  grouped.routing.correction_bias = true;
  run_and_check(grouped, 1);
  for (ReductionMode m : kModes) {
    run_and_check(base(5, 8, 2, 128, 256, m), 1);
    run_and_check(base(40, 16, 4, 144, 272, m), 1);
    run_and_check(base(9, 4, 2, 128, 2880, m), 1);
    for (const char* name : {"proj_fp8_bt128_s6", "proj_fp8_bt128_w2_s4", "proj_fp8_bt128_tm_s6"}) {
      detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, name);
      run_and_check(base(300, 8, 2, 256, 384, m), 1);
    }
  }
}
