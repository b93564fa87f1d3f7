// The FP8 MoE projection's host side, without a GPU: its config family, workspace sizing, and the
// rejection of every class of bad argument (checked before anything touches a device).
#include <cmath>
#include <cstdlib>

#include "common/env.hpp"
#include "moe/moe_fp8_plan.hpp"
#include "tests/test_util.hpp"

using namespace fusedmoe;

namespace {

// A valid call on fake device pointers (never dereferenced: every test breaks one argument).
struct FakeCall {
  int T = 128, E = 256, k = 8, N = 512, K = 2048;
  MoeFp8ProjectionArgs a;
  size_t ws_bytes;
  FakeCall() {
    void* p = reinterpret_cast<void*>(uintptr_t(0x7f0000000000ull));  // 256-byte aligned
    a.x = TensorRef::contiguous(p, DType::bf16, {T, K}, Device::cuda);
    a.router_logits = TensorRef::contiguous(p, DType::f32, {T, E}, Device::cuda);
    a.w = TensorRef::contiguous(p, DType::e4m3, {E, N, K}, Device::cuda);
    a.w_scale = TensorRef::contiguous(p, DType::f32, {E, N / 128, K / 128}, Device::cuda);
    a.y = TensorRef::contiguous(p, DType::bf16, {T, N}, Device::cuda);
    a.top_k = k;
    ws_bytes = moe_fp8_projection_workspace_size(T, E, k, N, K, a.mode);
  }
  void call() { moe_fp8_projection(a, reinterpret_cast<void*>(uintptr_t(0x7f0000000000ull)), ws_bytes, nullptr); }
};

}  // namespace

TEST(MoeFp8Config, ProjectionPicksItsFamily) {
  detail::ScopedKnob<std::string> no_force(&detail::Knobs::force_config, "");
  for (int T : {1, 128, 512, 1024, 4096}) {
    std::string why;
    const detail::GemmConfigInfo c =
        detail::gemm_config_info(detail::select_projection_config(T, 8, 256, 512, 2048, &why));
    EXPECT_EQ(c.weights, detail::GemmWeights::fp8_block);
    EXPECT_EQ(c.rows, detail::GemmRows::gathered);
    EXPECT_EQ(c.epilogue, detail::GemmEpilogue::combine);
    EXPECT_FALSE(why.empty());
  }
  detail::ScopedKnob<std::string> force(&detail::Knobs::force_config, "down_fp8_bt32_s9");
  test::expect_error([] { detail::select_projection_config(7, 2, 8, 256, 256); },
                     "is a fp8 down (tma rows, combine) config; this call runs fp8 projection");
}

TEST(MoeFp8Config, WorkspaceGrowsWithTokensAndCoversEveryT) {
  for (ReductionMode m : {ReductionMode::fast, ReductionMode::deterministic}) {
    size_t prev = 0;
    for (int T : {0, 1, 2, 7, 128, 1000, 4096, 16384}) {
      const size_t b = moe_fp8_projection_workspace_size(T, 256, 8, 512, 2048, m);
      EXPECT_GE(b, prev) << "T=" << T;
      prev = b;
    }
  }
  EXPECT_GT(moe_fp8_projection_workspace_size(128, 256, 8, 512, 2048, ReductionMode::deterministic),
            moe_fp8_projection_workspace_size(128, 256, 8, 512, 2048, ReductionMode::fast));
  test::expect_error([] { moe_fp8_projection_workspace_size(16, 8, 9, 128, 128, ReductionMode::fast); },
                     "top_k must be in [1, min(E=8, 32)], got 9");
  test::expect_error([] { moe_fp8_projection_workspace_size(16, 1000, 8, 128, 128, ReductionMode::fast); },
                     "number of experts must be in [1, 512], got 1000");
  EXPECT_EQ(parse_reduction_mode("deterministic"), ReductionMode::deterministic);
  test::expect_error([] { parse_reduction_mode("quick"); }, "not one of fast, deterministic");
}

TEST(MoeFp8Validation, EveryClassOfBadArgumentIsNamed) {
  using test::expect_error;
  { FakeCall c; c.a.x.dtype = DType::f16; expect_error([&] { c.call(); }, "x must be bf16"); }
  { FakeCall c; c.a.w.dtype = DType::bf16; expect_error([&] { c.call(); }, "w must be e4m3"); }
  { FakeCall c; c.a.w_scale.shape[2] = 15; expect_error([&] { c.call(); }, "w_scale must have shape [256, 4, 16]"); }
  { FakeCall c; c.a.y.shape[0] = 127; expect_error([&] { c.call(); }, "y must have shape [128, 512]"); }
  { FakeCall c; c.a.router_logits.shape[1] = 255; expect_error([&] { c.call(); }, "router_logits must have shape [128, 256]"); }
  { FakeCall c; c.a.x.shape[1] = c.a.w.shape[2] = 2040; expect_error([&] { c.call(); }, "K (the reduction dimension) must be a positive multiple of 16, got 2040"); }
  { FakeCall c; c.a.w.shape[1] = 500; expect_error([&] { c.call(); }, "N (weight rows per expert) must be a positive multiple of 16, got 500"); }
  { FakeCall c; c.a.top_k = 300; expect_error([&] { c.call(); }, "top_k must be in [1, min(E=256, 32)], got 300"); }
  { FakeCall c; c.a.top_k = 0; expect_error([&] { c.call(); }, "top_k must be in"); }
  { FakeCall c; c.a.x.data = reinterpret_cast<uint8_t*>(c.a.x.data) + 8; expect_error([&] { c.call(); }, "x must be 16-byte aligned"); }
  { FakeCall c; c.a.x.stride[0] = 2044; expect_error([&] { c.call(); }, "x has a stride of 4088 bytes"); }
  { FakeCall c; c.a.x.stride[1] = 2; expect_error([&] { c.call(); }, "x must have unit stride in its last dimension"); }
  { FakeCall c; c.a.w.stride[0] = 1; expect_error([&] { c.call(); }, "w must be contiguous"); }
  { FakeCall c; c.a.y.device = Device::cpu; expect_error([&] { c.call(); }, "y must be in CUDA device memory"); }
  { FakeCall c; c.a.x.device_index = 1; expect_error([&] { c.call(); }, "x is on cuda:1 but the call runs on cuda:0"); }
  { FakeCall c; c.ws_bytes -= 256; expect_error([&] { c.call(); }, "workspace of"); }
  { FakeCall c; c.a.routing.fn = RoutingFn::sigmoid_top1_on_input; expect_error([&] { c.call(); }, "needs top_k=1, got 8"); }
  { FakeCall c; c.a.routing.fn = RoutingFn::sigmoid_grouped_topk; c.a.routing.num_groups = 7;
    expect_error([&] { c.call(); }, "routing.num_groups=7 must divide E=256"); }
  { FakeCall c; c.a.routing.fn = RoutingFn::sigmoid_grouped_topk; c.a.routing.num_groups = 8;
    c.a.routing.topk_groups = 4; c.a.routing.correction_bias = true;
    expect_error([&] { c.call(); }, "needs routing_bias [E] f32"); }
  { FakeCall c; c.a.routing_given = true; expect_error([&] { c.call(); }, "routing_given needs topk_ids"); }
  { FakeCall c; c.a.topk_ids = TensorRef::contiguous(c.a.x.data, DType::i32, {128, 7}, Device::cuda);
    c.a.topk_weights = TensorRef::contiguous(c.a.x.data, DType::f32, {128, 8}, Device::cuda);
    expect_error([&] { c.call(); }, "topk_ids must have shape [128, 8]"); }
  { FakeCall c; c.a.routing.routed_scaling_factor = NAN; expect_error([&] { c.call(); }, "routed_scaling_factor must be finite"); }
}
