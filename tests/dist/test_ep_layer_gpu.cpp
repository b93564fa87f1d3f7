// The expert-parallel layer (include/fusedmoe/ep_layer.hpp) on one GPU through a real one-rank
// NCCL communicator (R = 1): dispatch, the count and row all-to-alls, the receive, the local
// MoeLayer, the return all-to-all and the combine all run, and the result must equal the
// single-GPU MoeLayer on the same caller-given routing bit for bit in deterministic mode (choice
// order always; rank order too, as at R = 1 every token's routes sit on one rank). Also: bad and
// repeated ids, spare capacity (max_tokens_per_rank > T), CUDA-graph replay, argument errors.
// R > 1 on one GPU: R layers, each with its slice of the experts, run the steps of a forward
// (src/dist/ep_layer_steps.hpp) with copies between their buffers in place of NCCL (which cannot put two
// ranks on one GPU); choice order must equal MoeLayer on all tokens bit for bit. The NCCL runs
// with R > 1 need a multi-GPU machine: EpLayerMultiGpu starts this binary again as one rank
// process per GPU (the launcher of `fusedmoe run --ep`), and skips with one GPU.
#include <cuda_runtime_api.h>

#include <nccl.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>

#include "common/device_buffer.hpp"
#include "dist/ep_layer_steps.hpp"
#include "dist/ep_plan.hpp"
#include "fusedmoe/ep_layer.hpp"
#include "tests/layer/layer_test_util.hpp"
#include "tools/ep_launch.hpp"

using namespace fusedmoe;
using namespace fusedmoe::test;

namespace {

// A preset shrunk to test size without its shared experts (the routed path alone).
MoeConfig routed_only(const char* preset, int H, int I, int E, Precision p) {
  MoeConfig c = find_preset(preset);
  c.num_shared_experts = 0;
  c.shared_intermediate = 0;
  c.shared_expert_gate = false;
  return scaled(c, H, I, E, p);
}

struct Inputs {
  DeviceBuffer x, ids, weights;
  int T = 0;
};

// The CUDA device this thread runs on (a rank process of EpLayerMultiGpu runs on GPU `rank`).
int current_device() {
  int dev = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  return dev;
}

Inputs upload(const LayerData& d, const std::vector<int32_t>& ids, int T) {
  return {DeviceBuffer::from(d.x_bits), DeviceBuffer::from(ids), DeviceBuffer::from(d.given.weights), T};
}

std::vector<uint16_t> run_single(const MoeLayer& layer, const Inputs& in, int H, int k,
                                 cudaStream_t stream) {
  const int dev = current_device();
  DeviceBuffer y(std::max<size_t>(size_t(in.T) * H * 2, 16));
  y.fill(0xFF);
  const size_t ws_bytes = layer.workspace_size(in.T, ReductionMode::deterministic);
  DeviceBuffer ws(ws_bytes);
  ws.fill(0xFF);
  MoeForwardArgs a;
  a.x = TensorRef::contiguous(in.x.get(), DType::bf16, {in.T, H}, Device::cuda, dev);
  a.routing_given = true;
  a.topk_ids = TensorRef::contiguous(in.ids.get(), DType::i32, {in.T, k}, Device::cuda, dev);
  a.topk_weights = TensorRef::contiguous(in.weights.get(), DType::f32, {in.T, k}, Device::cuda, dev);
  a.validate_routing = false;  // bad ids are part of the cases: dropped by both layers
  a.y = TensorRef::contiguous(y.get(), DType::bf16, {in.T, H}, Device::cuda, dev);
  a.mode = ReductionMode::deterministic;
  layer.forward(a, ws.get(), ws_bytes, reinterpret_cast<Stream>(stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  std::vector<uint16_t> out = y.to_host<uint16_t>();
  out.resize(size_t(in.T) * H);
  return out;
}

EpForwardArgs ep_args(const Inputs& in, DeviceBuffer& y, int H, int k, EpCombine combine) {
  const int dev = current_device();
  EpForwardArgs a;
  a.x = TensorRef::contiguous(in.x.get(), DType::bf16, {in.T, H}, Device::cuda, dev);
  a.topk_ids = TensorRef::contiguous(in.ids.get(), DType::i32, {in.T, k}, Device::cuda, dev);
  a.topk_weights = TensorRef::contiguous(in.weights.get(), DType::f32, {in.T, k}, Device::cuda, dev);
  a.y = TensorRef::contiguous(y.get(), DType::bf16, {in.T, H}, Device::cuda, dev);
  a.combine = combine;
  a.mode = ReductionMode::deterministic;
  return a;
}

std::vector<uint16_t> run_ep(const EpMoeLayer& layer, const Inputs& in, int H, int k,
                             EpCombine combine, cudaStream_t stream, EpStats* stats = nullptr,
                             bool fp8_rows = false, int chunks = 1) {
  DeviceBuffer y(std::max<size_t>(size_t(in.T) * H * 2, 16));
  y.fill(0xFF);  // NaN: every element must be written
  const size_t ws_bytes = layer.workspace_size(combine, ReductionMode::deterministic, chunks);
  DeviceBuffer ws(ws_bytes);
  ws.fill(0xFF);
  EpForwardArgs a = ep_args(in, y, H, k, combine);
  a.fp8_rows = fp8_rows;
  a.chunks = chunks;
  layer.forward(a, ws.get(), ws_bytes, reinterpret_cast<Stream>(stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  if (stats) *stats = layer.stats(ws.get(), combine, ReductionMode::deterministic, reinterpret_cast<Stream>(stream), chunks);
  std::vector<uint16_t> out = y.to_host<uint16_t>();
  out.resize(size_t(in.T) * H);
  return out;
}

// The step captured in a CUDA graph on `stream` (NCCL's calls and the layer's forks and joins
// included) and replayed `reps` times; synchronizes.
void replay_forward(const EpMoeLayer& ep, const EpForwardArgs& a, void* ws, size_t ws_bytes,
                    cudaStream_t stream, int reps) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  FMOE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  ep.forward(a, ws, ws_bytes, reinterpret_cast<Stream>(stream));
  FMOE_CUDA(cudaStreamEndCapture(stream, &graph));
  FMOE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < reps; ++rep) FMOE_CUDA(cudaGraphLaunch(exec, stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  FMOE_CUDA(cudaGraphExecDestroy(exec));
  FMOE_CUDA(cudaGraphDestroy(graph));
}

void expect_bitwise(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want, int H,
                    const std::string& ctx) {
  ASSERT_EQ(got.size(), want.size()) << ctx;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << ctx << ": y[" << i / size_t(H) << ", " << i % size_t(H)
                               << "] differs (bf16 bits 0x" << std::hex << got[i] << " vs 0x"
                               << want[i] << std::dec << ")";
}

void expect_rel_l2(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                   double bound, const std::string& ctx) {
  ASSERT_EQ(got.size(), want.size()) << ctx;
  double err2 = 0, ref2 = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = fmt::bf16_to_float(got[i]), b = fmt::bf16_to_float(want[i]);
    ASSERT_TRUE(std::isfinite(a)) << ctx << ": element " << i << " is not finite";
    err2 += (a - b) * (a - b);
    ref2 += b * b;
  }
  EXPECT_LE(std::sqrt(err2), bound * std::sqrt(ref2) + 1e-6) << ctx << ": relative L2";
}

// Bad ids and repeats mixed into the routing at `rate` (both layers drop them the same way).
std::vector<int32_t> with_bad_ids(std::vector<int32_t> ids, int T, int k, int E, uint64_t seed, float rate) {
  ref::Rng rng(seed);
  for (int t = 0; t < T; ++t)
    for (int j = 0; j < k; ++j)
      if (rng.uniform() < rate) {
        const int32_t bad[] = {-1, E, E + 7};
        ids[size_t(t) * k + j] = j > 0 && rng.below(2) ? ids[size_t(t) * k + size_t(rng.below(j))] : bad[rng.below(3)];
      }
  return ids;
}

// One rank over `comm`: the layer of `cfg` drawn from `seed` (whole, for MoeLayer; its EP layer
// with max_tokens_per_rank `cap`), T tokens routed as given with bad ids mixed in at `bad_rate`,
// and MoeLayer's deterministic y on them.
struct OneRank {
  LayerData d;
  cli::GpuLayer g;
  std::unique_ptr<EpMoeLayer> ep;
  std::vector<int32_t> ids;
  Inputs in;
  std::vector<uint16_t> want;
  OneRank(const EpCommunicator& comm, const MoeConfig& cfg, int T, int cap, uint64_t seed,
          float bad_rate = 0.0f) {
    LayerCase c;
    c.cfg = cfg;
    c.T = T;
    c.route = LayerRoute::given;
    d = make_layer_data(c, seed);
    g = cli::make_gpu_layer(d.lw, nullptr);
    MoeLayerWeights local = g.weights;
    local.routing_bias = {};  // the EP layer takes the caller's routing
    ep = std::make_unique<EpMoeLayer>(cfg, local, comm, cap);
    ids = with_bad_ids(d.given.ids, T, cfg.top_k, cfg.num_experts, seed, bad_rate);
    in = upload(d, ids, T);
    want = run_single(*g.layer, in, cfg.hidden, cfg.top_k, nullptr);
  }
};

// EP (R = 1) vs MoeLayer, both combines, on `cfg` at T tokens with capacity `cap`.
// fp8_rows: the rows travel quantized (the local layer reads them as they arrived): the same bits.
void compare_one_rank(const EpCommunicator& comm, const MoeConfig& cfg, int T, int cap, float bad_rate,
                      uint64_t seed, bool fp8_rows = false) {
  LayerCase c;
  c.cfg = cfg;
  c.T = T;
  c.mode = ReductionMode::deterministic;
  c.route = LayerRoute::given;
  const std::string ctx = c.describe() + strf(" cap=%d bad=%.2f fp8_rows=%d seed %llu", cap,
                                              double(bad_rate), int(fp8_rows), (unsigned long long)seed);
  const OneRank one(comm, cfg, T, cap, seed, bad_rate);
  const EpMoeLayer& ep = *one.ep;
  const std::vector<int32_t>& ids = one.ids;
  const Inputs& in = one.in;
  ASSERT_EQ(ep.first_expert(), 0) << ctx;
  ASSERT_EQ(ep.num_local_experts(), cfg.num_experts) << ctx;
  const std::vector<uint16_t>& want = one.want;
  for (EpCombine combine : {EpCombine::choice_order, EpCombine::rank_order}) {
    const std::string ctx2 = ctx + (combine == EpCombine::choice_order ? " choice_order" : " rank_order");
    EpStats st;
    const std::vector<uint16_t> got = run_ep(ep, in, cfg.hidden, cfg.top_k, combine, nullptr, &st, fp8_rows);
    if (combine == EpCombine::rank_order && cfg.num_shared_experts > 0) {
      // The routes' sum is rounded to bf16 before the shared row is added: one rounding more
      // than MoeLayer's, so close rather than bitwise.
      expect_rel_l2(got, want, 1e-2, ctx2);
    } else {
      expect_bitwise(got, want, cfg.hidden, ctx2);
    }
    if (testing::Test::HasFatalFailure()) return;
    EXPECT_EQ(st.overflow_rows, 0) << ctx2;
    EXPECT_EQ(st.received_bad_slots, 0) << ctx2;
    EXPECT_EQ(st.received_bad_counts, 0) << ctx2;
    // Every kept route ran on the one rank.
    int64_t kept = 0, rows = 0;
    for (int t = 0; t < T; ++t) {
      int n = 0;
      for (int j = 0; j < cfg.top_k; ++j) {
        const int32_t e = ids[size_t(t) * cfg.top_k + j];
        bool repeat = false;
        for (int i = 0; i < j; ++i) repeat |= ids[size_t(t) * cfg.top_k + i] == e;
        n += e >= 0 && e < cfg.num_experts && !repeat;
      }
      kept += n;
      rows += n > 0;
    }
    EXPECT_EQ(st.received_routes, kept) << ctx2;
    EXPECT_EQ(st.received_rows, rows) << ctx2;
    EXPECT_EQ(st.dropped_routes, int64_t(T) * cfg.top_k - kept) << ctx2;
  }
}

}  // namespace

TEST(EpLayerGpu, OneRankEqualsMoeLayerBitwise) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  ASSERT_EQ(comm.num_ranks(), 1);
  ASSERT_EQ(comm.rank(), 0);
  const MoeConfig cfgs[] = {
      routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block),
      routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::bf16),
      routed_only("deepseek-v3", 272, 128, 16, Precision::fp8_block),  // H % 128 = 16, grouped ids
      routed_only("gpt-oss-120b", 256, 128, 8, Precision::bf16),      // biases, clamped swiglu
      routed_only("mixtral-8x7b", 256, 128, 8, Precision::nvfp4),     // W4A16 (decode GEMVs at small T)
  };
  for (const MoeConfig& cfg : cfgs)
    for (int T : {1, 5, 40, 300}) {
      // cap = T: the local layer runs on exactly T rows, as MoeLayer does.
      for (uint64_t seed : seeds_for(hash_ints({cfg.hidden, cfg.num_experts, int(cfg.weight_precision), T}))) {
        compare_one_rank(comm, cfg, T, T, 0.0f, seed);
        if (cfg.activation_precision == Precision::fp8_block) compare_one_rank(comm, cfg, T, T, 0.0f, seed, true);
        if (testing::Test::HasFatalFailure()) return;
      }
    }
}

TEST(EpLayerGpu, OneRankBadIdsAndSpareCapacity) {
  FMOE_SKIP_WITHOUT_GPU();
  // max_tokens_per_rank > T: the local layer runs on cap rows, the spare ones without routes;
  // bad ids: a token whose routes are all dropped sends no row, so the compact rows shift. A
  // route's row depends only on its token, expert and weight (given the same config), so y is
  // still MoeLayer's.
  const EpCommunicator comm = EpCommunicator::single_rank();
  const MoeConfig cfg = routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block);
  // (T, cap) pairs where T k / E and cap k / E pick the same token tile (select_block_t): 16, 16, 64.
  const std::pair<int, int> t_cap[] = {{1, 10}, {7, 11}, {40, 49}};
  for (auto [T, cap] : t_cap)
    for (uint64_t seed : seeds_for(hash_ints({T, 17}))) {
      compare_one_rank(comm, cfg, T, cap, 0.0f, seed);
      compare_one_rank(comm, cfg, T, T, 0.3f, seed);
      if (testing::Test::HasFatalFailure()) return;
    }
}

TEST(EpLayerGpu, ZeroTokens) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  const MoeConfig cfg = routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::bf16);
  const ref::LayerWeights lw = ref::make_random_layer(cfg, 3);
  const cli::GpuLayer g = cli::make_gpu_layer(lw, nullptr);
  const EpMoeLayer ep(cfg, g.weights, comm, 8);
  Inputs in{DeviceBuffer(16), DeviceBuffer(16), DeviceBuffer(16), 0};
  EpStats st;
  const std::vector<uint16_t> y = run_ep(ep, in, cfg.hidden, cfg.top_k, EpCombine::choice_order, nullptr, &st);
  EXPECT_TRUE(y.empty());
  EXPECT_EQ(st.received_rows, 0);
  EXPECT_EQ(st.received_routes, 0);
}

TEST(EpLayerGpu, GraphReplayEqualsEager) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  const MoeConfig cfg = routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block);
  const int T = 24;
  const OneRank one(comm, cfg, T, 32, 99);
  const EpMoeLayer& ep = *one.ep;
  const Inputs& in = one.in;
  cudaStream_t stream;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const std::vector<uint16_t> eager = run_ep(ep, in, cfg.hidden, cfg.top_k, EpCombine::choice_order, stream);

  DeviceBuffer y(size_t(T) * cfg.hidden * 2);
  y.fill(0xFF);
  const size_t ws_bytes = ep.workspace_size(EpCombine::choice_order, ReductionMode::deterministic);
  DeviceBuffer ws(ws_bytes);
  ws.fill(0xFF);
  const EpForwardArgs a = ep_args(in, y, cfg.hidden, cfg.top_k, EpCombine::choice_order);
  replay_forward(ep, a, ws.get(), ws_bytes, stream, 3);
  expect_bitwise(y.to_host<uint16_t>(), eager, cfg.hidden, "graph replay");
  FMOE_CUDA(cudaStreamDestroy(stream));
}

TEST(EpLayerGpu, RejectsBadArguments) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  {
    // Shared experts: their weights must come with the config, and the gate with a gated one.
    const MoeConfig shared = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::fp8_block);
    const ref::LayerWeights lw = ref::make_random_layer(shared, 1);
    const cli::GpuLayer g = cli::make_gpu_layer(lw, nullptr);
    MoeLayerWeights w = g.weights;
    w.routing_bias = {};
    MoeLayerWeights no_mlp = w;
    no_mlp.shared_w2 = {};
    expect_error([&] { EpMoeLayer(shared, no_mlp, comm, 8); }, "shared_w13 / shared_w2 are missing");
    MoeLayerWeights no_gate = w;
    no_gate.shared_gate = {};
    expect_error([&] { EpMoeLayer(shared, no_gate, comm, 8); }, "shared_gate must hold H=256 values");
    MoeLayerWeights bad_scale = w;
    bad_scale.shared_w13_scale.shape[0] += 1;
    expect_error([&] { EpMoeLayer(shared, bad_scale, comm, 8); }, "the shared experts");
    const MoeConfig routed = routed_only("qwen3.5-35b-a3b", 256, 128, 16, Precision::fp8_block);
    MoeLayerWeights extra = w;
    for (TensorRef* t : {&extra.shared_w13_scale, &extra.shared_gate}) *t = {};
    expect_error([&] { EpMoeLayer(routed, extra, comm, 8); }, "the config has no shared experts");
  }
  const MoeConfig cfg = routed_only("deepseek-v3", 256, 128, 16, Precision::bf16);
  const ref::LayerWeights lw = ref::make_random_layer(cfg, 2);
  const cli::GpuLayer g = cli::make_gpu_layer(lw, nullptr);
  expect_error([&] { EpMoeLayer(cfg, g.weights, comm, 8); }, "routing_bias");
  MoeLayerWeights local = g.weights;
  local.routing_bias = {};
  expect_error([&] { EpMoeLayer(cfg, local, comm, 0); }, "max_tokens_per_rank=0");
  const EpMoeLayer ep(cfg, local, comm, 4);
  const int H = cfg.hidden, k = cfg.top_k, T = 5;
  DeviceBuffer x(size_t(T) * H * 2), ids(size_t(T) * k * 4), w(size_t(T) * k * 4), y(size_t(T) * H * 2);
  const size_t ws_bytes = ep.workspace_size(EpCombine::choice_order, ReductionMode::fast);
  DeviceBuffer ws(ws_bytes);
  EpForwardArgs a;
  a.x = TensorRef::contiguous(x.get(), DType::bf16, {T, H}, Device::cuda);
  a.topk_ids = TensorRef::contiguous(ids.get(), DType::i32, {T, k}, Device::cuda);
  a.topk_weights = TensorRef::contiguous(w.get(), DType::f32, {T, k}, Device::cuda);
  a.y = TensorRef::contiguous(y.get(), DType::bf16, {T, H}, Device::cuda);
  expect_error([&] { ep.forward(a, ws.get(), ws_bytes, nullptr); }, "max_tokens_per_rank=4");
  for (auto* t : {&a.x, &a.topk_ids, &a.topk_weights, &a.y}) t->shape[0] = 4;
  EpForwardArgs bad = a;
  bad.topk_ids.dtype = DType::f32;
  expect_error([&] { ep.forward(bad, ws.get(), ws_bytes, nullptr); }, "topk_ids");
  expect_error([&] { ep.forward(a, ws.get(), ws_bytes - 1, nullptr); }, "workspace");
  expect_error([&] { ep.forward(a, nullptr, ws_bytes, nullptr); }, "workspace is null");
  EpForwardArgs f8 = a;  // a bf16 layer has no fp8 rows to send
  f8.fp8_rows = true;
  expect_error([&] { ep.forward(f8, ws.get(), ws_bytes, nullptr); }, "fp8_rows needs fp8_block");
}

// A small whole step for compute-sanitizer (scripts/gpu_check.sh): NCCL's own kernels run too.
TEST(EpLayerSanitizerNccl, OneRankSmall) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  const MoeConfig cfg = routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block);
  compare_one_rank(comm, cfg, 5, 5, 0.2f, 5);  // cap = T: the bitwise claim holds as tested above
  compare_one_rank(comm, cfg, 5, 5, 0.2f, 6, /*fp8_rows=*/true);  // quantize in the pack, split in the receive
  // Shared experts on the side stream: its fork / join around NCCL's calls.
  const MoeConfig shared = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::fp8_block);
  compare_one_rank(comm, shared, 5, 5, 0.2f, 7);
  // Three pipelined chunks (the communication stream), the last one short.
  const int T = 7;
  const OneRank one(comm, shared, T, 9, 9);
  const EpMoeLayer& ep = *one.ep;
  DeviceBuffer y(size_t(T) * shared.hidden * 2),
      ws(ep.workspace_size(EpCombine::choice_order, ReductionMode::deterministic, 3));
  y.fill(0xFF);
  ws.fill(0xFF);  // poisoned, as in the other cases (NCCL also sends the chunks' unused rows)
  EpForwardArgs a = ep_args(one.in, y, shared.hidden, shared.top_k, EpCombine::choice_order);
  a.chunks = 3;
  ep.forward(a, ws.get(), ws.bytes(), nullptr);
  FMOE_CUDA(cudaDeviceSynchronize());
  expect_rel_l2(y.to_host<uint16_t>(), one.want, 1e-2, "sanitizer case, 3 chunks");
}

namespace {

// Experts [first, first + count) of a per-expert weight tensor [E, ...] (views, no copy).
TensorRef expert_slice(TensorRef t, int first, int count) {
  if (!t.data) return t;
  t.data = static_cast<uint8_t*>(t.data) + int64_t(first) * t.stride[0] * int64_t(dtype_bytes(t.dtype));
  t.shape[0] = count;
  return t;
}

MoeLayerWeights rank_weights(const MoeLayerWeights& w, int first, int count) {
  MoeLayerWeights s = w;
  for (TensorRef* t : {&s.w13, &s.w13_scale, &s.w13_scale_2, &s.w2, &s.w2_scale, &s.w2_scale_2, &s.b13, &s.b2})
    *t = expert_slice(*t, first, count);
  s.routing_bias = {};
  return s;
}

// R ranks with T_of[s] tokens each (the tokens of all ranks, concatenated, are one MoeLayer call).
// exact: choice order bit for bit (else, as for rank order, by relative L2: the sanitizer cases,
// which are there for memory errors, not for the bitwise claim).
void compare_simulated_ranks(const MoeConfig& cfg, const std::vector<int>& T_of, int cap,
                             float bad_rate, uint64_t seed, bool exact = true, bool fp8_rows = false) {
  const int R = int(T_of.size()), H = cfg.hidden, k = cfg.top_k;
  int T = 0;
  for (int t : T_of) T += t;
  LayerCase c;
  c.cfg = cfg;
  c.T = T;
  c.mode = ReductionMode::deterministic;
  c.route = LayerRoute::given;
  std::string ctx = c.describe() + strf(" R=%d cap=%d bad=%.2f seed %llu T_s =", R, cap,
                                        double(bad_rate), (unsigned long long)seed);
  for (int t : T_of) ctx += strf(" %d", t);
  const LayerData d = make_layer_data(c, seed);
  const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);
  const std::vector<int32_t> ids = with_bad_ids(d.given.ids, T, k, cfg.num_experts, seed, bad_rate);
  const Inputs all = upload(d, ids, T);
  const std::vector<uint16_t> want = run_single(*g.layer, all, H, k, nullptr);

  const detail::ExpertPartition part(cfg.num_experts, R);
  std::vector<EpCommunicator> comms;
  std::vector<std::unique_ptr<EpMoeLayer>> layers;
  for (int r = 0; r < R; ++r) {
    comms.push_back(detail::ep_simulated_communicator(R, r));
    layers.push_back(std::make_unique<EpMoeLayer>(
        cfg, rank_weights(g.weights, part.first(r), part.count(r)), comms.back(), cap));
    ASSERT_EQ(layers.back()->first_expert(), part.first(r)) << ctx;
  }
  for (EpCombine combine : {EpCombine::choice_order, EpCombine::rank_order}) {
    const bool choice = combine == EpCombine::choice_order;
    const std::string ctx2 = ctx + (choice ? " choice_order" : " rank_order");
    std::vector<DeviceBuffer> ws, y;
    std::vector<EpForwardArgs> args;
    std::vector<detail::EpExchanges> ex;
    int t0 = 0;
    for (int r = 0; r < R; ++r) {
      const size_t ws_bytes = layers[size_t(r)]->workspace_size(combine, ReductionMode::deterministic);
      ws.emplace_back(ws_bytes);
      ws.back().fill(0xFF);
      y.emplace_back(std::max<size_t>(size_t(T_of[size_t(r)]) * H * 2, 16));
      y.back().fill(0xFF);
      const int Tr = T_of[size_t(r)];
      EpForwardArgs a;
      a.x = TensorRef::contiguous(all.x.get<uint16_t>() + size_t(t0) * H, DType::bf16, {Tr, H}, Device::cuda);
      a.topk_ids = TensorRef::contiguous(all.ids.get<int32_t>() + size_t(t0) * k, DType::i32, {Tr, k}, Device::cuda);
      a.topk_weights = TensorRef::contiguous(all.weights.get<float>() + size_t(t0) * k, DType::f32, {Tr, k}, Device::cuda);
      a.y = TensorRef::contiguous(y.back().get(), DType::bf16, {Tr, H}, Device::cuda);
      a.combine = combine;
      a.mode = ReductionMode::deterministic;
      a.fp8_rows = fp8_rows;
      args.push_back(a);
      ex.push_back(detail::ep_check_forward(*layers[size_t(r)], a, ws.back().get(), ws_bytes));
      t0 += Tr;
    }
    // The all-to-all: chunk d of rank s's send -> chunk s of rank d's receive.
    auto exchange = [&](detail::EpExchange detail::EpExchanges::*which) {
      for (int s = 0; s < R; ++s)
        for (int dst = 0; dst < R; ++dst) {
          const detail::EpExchange& from = ex[size_t(s)].*which;
          const detail::EpExchange& to = ex[size_t(dst)].*which;
          const size_t b = from.bytes_per_peer;
          if (b == 0) continue;
          FMOE_CUDA(cudaMemcpyAsync(static_cast<uint8_t*>(to.recv) + size_t(s) * b,
                                    static_cast<const uint8_t*>(from.send) + size_t(dst) * b, b,
                                    cudaMemcpyDeviceToDevice, nullptr));
        }
    };
    for (int r = 0; r < R; ++r) detail::ep_dispatch(*layers[size_t(r)], args[size_t(r)], ws[size_t(r)].get(), nullptr);
    exchange(&detail::EpExchanges::counts);
    exchange(&detail::EpExchanges::rows);
    for (int r = 0; r < R; ++r) detail::ep_local(*layers[size_t(r)], args[size_t(r)], ws[size_t(r)].get(), nullptr);
    exchange(&detail::EpExchanges::results);
    for (int r = 0; r < R; ++r) detail::ep_shared(*layers[size_t(r)], args[size_t(r)], ws[size_t(r)].get(), nullptr);
    for (int r = 0; r < R; ++r) detail::ep_combine(*layers[size_t(r)], args[size_t(r)], ws[size_t(r)].get(), nullptr);
    FMOE_CUDA(cudaDeviceSynchronize());

    t0 = 0;
    double err2 = 0, ref2 = 0;
    for (int r = 0; r < R; ++r) {
      const int Tr = T_of[size_t(r)];
      std::vector<uint16_t> got = y[size_t(r)].to_host<uint16_t>();
      got.resize(size_t(Tr) * H);
      const std::vector<uint16_t> part_want(want.begin() + ptrdiff_t(size_t(t0) * H),
                                            want.begin() + ptrdiff_t(size_t(t0 + Tr) * H));
      if (choice && exact) {
        expect_bitwise(got, part_want, H, ctx2 + strf(" rank %d", r));
        if (testing::Test::HasFatalFailure()) return;
      } else {
        // Rank order: another association of the same route rows, each rank's sum rounded to
        // bf16 once: close, not bitwise, where a token's routes span ranks.
        for (size_t i = 0; i < got.size(); ++i) {
          const double a = fmt::bf16_to_float(got[i]), b = fmt::bf16_to_float(part_want[i]);
          ASSERT_TRUE(std::isfinite(a)) << ctx2 << " rank " << r << " element " << i;
          err2 += (a - b) * (a - b);
          ref2 += b * b;
        }
      }
      const EpStats st = layers[size_t(r)]->stats(ws[size_t(r)].get(), combine, ReductionMode::deterministic, nullptr);
      EXPECT_EQ(st.overflow_rows, 0) << ctx2 << " rank " << r;
      EXPECT_EQ(st.received_bad_slots, 0) << ctx2 << " rank " << r;
      EXPECT_EQ(st.received_bad_counts, 0) << ctx2 << " rank " << r;
      t0 += Tr;
    }
    if (!choice || !exact) {
      EXPECT_LE(std::sqrt(err2), 1e-2 * std::sqrt(ref2) + 1e-6) << ctx2 << ": relative L2";
    }
  }
}

}  // namespace

// The local layers run on R * cap rows over their E / R experts, MoeLayer on all tokens over E:
// the config choice sees different rows per expert. A route's row can be bitwise the same only
// where both pick the same token tile (select_block_t: T k / E rows per expert; the operand form
// and the waves follow from it), so the cases keep both sides in one bracket: > 40 rows per
// expert (BLOCK_T = 128) for prefill, <= 6 (BLOCK_T = 16) for decode.
TEST(EpLayerGpu, SimulatedRanksEqualMoeLayer) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Case { MoeConfig cfg; std::vector<int> T_of; };
  const Case cases[] = {
      {routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block), {60, 50}},        // 8 + 8 experts
      {routed_only("qwen3-30b-a3b", 256, 128, 32, Precision::bf16), {1, 0, 200, 9}},      // an empty rank
      {routed_only("deepseek-v3", 272, 128, 16, Precision::fp8_block), {30, 60}},
      {routed_only("mixtral-8x7b", 256, 128, 10, Precision::fp8_block), {150, 3, 120}},   // 4, 3, 3 experts
      {routed_only("gpt-oss-120b", 256, 128, 8, Precision::bf16), {50, 41}},               // biases
  };
  for (const Case& c : cases) {
    int max_t = 1, total = 0;
    for (int t : c.T_of) max_t = std::max(max_t, t), total += t;
    ASSERT_GT(double(total) * c.cfg.top_k / c.cfg.num_experts, 40.0) << "a prefill case";
    for (uint64_t seed : seeds_for(hash_ints({c.cfg.hidden, c.cfg.num_experts, int(c.T_of.size()), max_t}))) {
      compare_simulated_ranks(c.cfg, c.T_of, max_t, 0.0f, seed);
      if (c.cfg.activation_precision == Precision::fp8_block)
        compare_simulated_ranks(c.cfg, c.T_of, max_t, 0.0f, seed, true, true);
      compare_simulated_ranks(c.cfg, c.T_of, max_t + 5, 0.25f, seed);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(EpLayerGpu, SimulatedRanksAtDecode) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Case { MoeConfig cfg; std::vector<int> T_of; int cap; };
  const Case cases[] = {
      {routed_only("mixtral-8x7b", 256, 128, 10, Precision::fp8_block), {2, 0, 3}, 3},
      {routed_only("qwen3-30b-a3b", 256, 128, 32, Precision::bf16), {1, 1, 0, 1}, 1},
      {routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block), {3, 2}, 3},
  };
  for (const Case& c : cases) {
    const int R = int(c.T_of.size());
    const detail::ExpertPartition part(c.cfg.num_experts, R);
    ASSERT_LE(double(R) * c.cap * c.cfg.top_k / part.count(R - 1), 6.0) << "a decode case";
    for (uint64_t seed : seeds_for(hash_ints({c.cfg.hidden, c.cfg.num_experts, R, c.cap}))) {
      compare_simulated_ranks(c.cfg, c.T_of, c.cap, 0.0f, seed);
      compare_simulated_ranks(c.cfg, c.T_of, c.cap, 0.25f, seed);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

// Shared experts run on the token's own rank (a one-expert layer of the shared MLP) and their
// row is added after the routes', as MoeLayer's finalize adds its shared column: choice order is
// MoeLayer's sum term for term. DeepSeek-style (weight 1) and Qwen-style (sigmoid gate), fp8 and
// bf16, decode and prefill sizes.
TEST(EpLayerGpu, OneRankWithSharedExperts) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  const MoeConfig cfgs[] = {
      scaled(find_preset("deepseek-v3"), 256, 128, 16, Precision::fp8_block),
      scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::fp8_block),
      scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::bf16),
  };
  for (const MoeConfig& cfg : cfgs) {
    ASSERT_GT(cfg.num_shared_experts, 0) << cfg.summary();
    for (int T : {1, 5, 40, 300})
      for (uint64_t seed : seeds_for(hash_ints({cfg.hidden, int(cfg.shared_expert_gate), int(cfg.weight_precision), T}))) {
        compare_one_rank(comm, cfg, T, T, T > 5 ? 0.1f : 0.0f, seed);
        if (testing::Test::HasFatalFailure()) return;
      }
  }
}

// The shared experts on the side stream (the default) and on the caller's stream give the same
// bits, eagerly and replayed from a CUDA graph (the fork and join are captured with the step).
TEST(EpLayerGpu, SharedExpertsOverlapEqualsSerialAndReplays) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  const MoeConfig cfg = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::fp8_block);
  const int T = 37;
  const OneRank one(comm, cfg, T, 40, 71);
  const EpMoeLayer& ep = *one.ep;
  const Inputs& in = one.in;
  const std::vector<uint16_t>& want = one.want;
  cudaStream_t stream;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (EpCombine combine : {EpCombine::choice_order, EpCombine::rank_order}) {
    const size_t ws_bytes = ep.workspace_size(combine, ReductionMode::deterministic);
    std::vector<uint16_t> first;
    for (bool overlap : {true, false}) {
      const std::string ctx = strf("%s overlap_shared=%d",
                                   combine == EpCombine::choice_order ? "choice" : "rank", int(overlap));
      DeviceBuffer y(size_t(T) * cfg.hidden * 2), ws(ws_bytes);
      y.fill(0xFF);
      ws.fill(0xFF);
      EpForwardArgs a = ep_args(in, y, cfg.hidden, cfg.top_k, combine);
      a.overlap_shared = overlap;
      ep.forward(a, ws.get(), ws_bytes, reinterpret_cast<Stream>(stream));
      FMOE_CUDA(cudaStreamSynchronize(stream));
      std::vector<uint16_t> eager = y.to_host<uint16_t>();
      if (combine == EpCombine::choice_order) expect_bitwise(eager, want, cfg.hidden, ctx);
      else expect_rel_l2(eager, want, 1e-2, ctx);
      if (first.empty()) first = eager;
      else expect_bitwise(eager, first, cfg.hidden, ctx + " vs overlap_shared=1");
      // Replays of the captured step, y poisoned first.
      y.fill(0xFF);
      replay_forward(ep, a, ws.get(), ws_bytes, stream, 3);
      expect_bitwise(y.to_host<uint16_t>(), eager, cfg.hidden, ctx + " graph replay");
      if (testing::Test::HasFatalFailure()) break;
    }
  }
  FMOE_CUDA(cudaStreamDestroy(stream));
}

// A step split into pipelined chunks (the exchanges on the layer's communication stream beside
// the local layer on the caller's): each chunk's local layer sees fewer rows, so it is checked
// against MoeLayer by relative L2 and against the unchunked step's route counts; the GEMMs on
// fewer SMs (local_sms) give the chunked step's bits; graph replays give the eager bits.
TEST(EpLayerGpu, OneRankChunkedPipeline) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator comm = EpCommunicator::single_rank();
  const MoeConfig cfgs[] = {
      routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block),
      scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 16, Precision::bf16),
  };
  cudaStream_t stream;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (const MoeConfig& cfg : cfgs) {
    const int H = cfg.hidden, k = cfg.top_k;
    for (auto [T, cap] : {std::pair{300, 300}, std::pair{37, 40}}) {
      const OneRank one(comm, cfg, T, cap, uint64_t(T) * 7 + 1, 0.1f);
      const EpMoeLayer& ep = *one.ep;
      const Inputs& in = one.in;
      const std::vector<uint16_t>& want = one.want;
      for (EpCombine combine : {EpCombine::choice_order, EpCombine::rank_order}) {
        EpStats whole;
        run_ep(ep, in, H, k, combine, stream, &whole);
        for (int chunks : {2, 3, 8}) {
          const std::string ctx = cfg.summary() + strf(" T=%d cap=%d chunks=%d %s", T, cap, chunks,
                                                       combine == EpCombine::choice_order ? "choice" : "rank");
          const size_t ws_bytes = ep.workspace_size(combine, ReductionMode::deterministic, chunks);
          DeviceBuffer y(size_t(T) * H * 2), ws(ws_bytes);
          y.fill(0xFF);
          ws.fill(0xFF);
          EpForwardArgs a = ep_args(in, y, H, k, combine);
          a.chunks = chunks;
          expect_error([&] { ep.forward(a, ws.get(), ws_bytes - 1, stream); },
                       strf("chunks=%d need", chunks));
          ep.forward(a, ws.get(), ws_bytes, reinterpret_cast<Stream>(stream));
          FMOE_CUDA(cudaStreamSynchronize(stream));
          const std::vector<uint16_t> got = y.to_host<uint16_t>();
          expect_rel_l2(got, want, 1e-2, ctx);
          const EpStats st = ep.stats(ws.get(), combine, ReductionMode::deterministic,
                                      reinterpret_cast<Stream>(stream), chunks);
          EXPECT_EQ(st.received_routes, whole.received_routes) << ctx;
          EXPECT_EQ(st.dropped_routes, whole.dropped_routes) << ctx;
          EXPECT_EQ(st.overflow_rows, 0) << ctx;
          // The GEMMs on 24 SMs: the same bits (fp8 / bf16 configs do not split K).
          a.local_sms = 24;
          y.fill(0xFF);
          ep.forward(a, ws.get(), ws_bytes, reinterpret_cast<Stream>(stream));
          FMOE_CUDA(cudaStreamSynchronize(stream));
          expect_bitwise(y.to_host<uint16_t>(), got, H, ctx + " local_sms=24");
          // Captured (the communication stream forks and joins inside the capture) and replayed.
          y.fill(0xFF);
          replay_forward(ep, a, ws.get(), ws_bytes, stream, 2);
          expect_bitwise(y.to_host<uint16_t>(), got, H, ctx + " graph replay");
          if (testing::Test::HasFatalFailure()) break;
        }
      }
      if (testing::Test::HasFatalFailure()) break;
    }
  }
  FMOE_CUDA(cudaStreamDestroy(stream));
  // Out of range.
  const MoeConfig cfg = cfgs[0];
  const ref::LayerWeights lw = ref::make_random_layer(cfg, 8);
  const cli::GpuLayer g = cli::make_gpu_layer(lw, nullptr);
  const EpMoeLayer ep(cfg, g.weights, comm, 4);
  expect_error([&] { ep.workspace_size(EpCombine::rank_order, ReductionMode::fast, 9); }, "chunks=9 must be in [1, 8]");
  Inputs in{DeviceBuffer(4 * 256 * 2), DeviceBuffer(4 * 8 * 4), DeviceBuffer(4 * 8 * 4), 4};
  DeviceBuffer y(4 * 256 * 2), ws(ep.workspace_size(EpCombine::rank_order, ReductionMode::deterministic, 4));
  EpForwardArgs a = ep_args(in, y, cfg.hidden, cfg.top_k, EpCombine::rank_order);
  a.chunks = 5;
  expect_error([&] { ep.forward(a, ws.get(), ws.bytes(), nullptr); }, "chunks=5 must be in [1, min(8, max_tokens_per_rank=4)]");
  a.chunks = 2;
  a.local_sms = -1;
  expect_error([&] { ep.forward(a, ws.get(), ws.bytes(), nullptr); }, "local_sms=-1 must be >= 0");
}

TEST(EpLayerGpu, SimulatedRanksWithSharedExperts) {
  FMOE_SKIP_WITHOUT_GPU();
  struct Case { MoeConfig cfg; std::vector<int> T_of; };
  const Case cases[] = {
      {scaled(find_preset("deepseek-v3"), 272, 128, 16, Precision::fp8_block), {30, 60}},
      {scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 24, Precision::bf16), {70, 0, 90}},
  };
  for (const Case& c : cases) {
    int max_t = 1;
    for (int t : c.T_of) max_t = std::max(max_t, t);
    for (uint64_t seed : seeds_for(hash_ints({c.cfg.hidden, c.cfg.num_experts, int(c.T_of.size()), 31}))) {
      compare_simulated_ranks(c.cfg, c.T_of, max_t, 0.1f, seed);
      if (testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(EpLayerGpu, BorrowsACallersCommunicator) {
  FMOE_SKIP_WITHOUT_GPU();
  int dev = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  ncclComm_t raw = nullptr;
  ASSERT_EQ(ncclCommInitAll(&raw, 1, &dev), ncclSuccess);
  {
    const EpCommunicator comm = EpCommunicator::borrow(raw);
    EXPECT_EQ(comm.num_ranks(), 1);
    EXPECT_EQ(comm.rank(), 0);
    EXPECT_EQ(comm.nccl_comm(), static_cast<void*>(raw));
    compare_one_rank(comm, routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::bf16), 5, 5, 0.0f, 3);
  }
  EXPECT_EQ(ncclCommDestroy(raw), ncclSuccess);  // still the caller's: borrow did not destroy it
}

// The multi-process entry point (ncclGetUniqueId + ncclCommInitRank), with one rank.
TEST(EpLayerGpu, CreatesOneRankFromAUniqueId) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpUniqueId id = ep_unique_id();
  const EpCommunicator comm = EpCommunicator::create(1, 0, id);
  EXPECT_EQ(comm.num_ranks(), 1);
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_NE(comm.nccl_comm(), nullptr);
  compare_one_rank(comm, routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::fp8_block), 9, 9, 0.0f, 6);
  expect_error([&] { EpCommunicator::create(2, 2, id); }, "rank=2 must be in [0, 2)");
}

TEST(EpLayerGpu, ForwardRefusesASimulatedCommunicator) {
  FMOE_SKIP_WITHOUT_GPU();
  const EpCommunicator sim = detail::ep_simulated_communicator(1, 0);
  const MoeConfig cfg = routed_only("qwen3-30b-a3b", 256, 128, 16, Precision::bf16);
  const ref::LayerWeights lw = ref::make_random_layer(cfg, 4);
  const cli::GpuLayer g = cli::make_gpu_layer(lw, nullptr);
  const EpMoeLayer ep(cfg, g.weights, sim, 4);
  Inputs in{DeviceBuffer(16), DeviceBuffer(16), DeviceBuffer(16), 0};
  expect_error([&] { run_ep(ep, in, cfg.hidden, cfg.top_k, EpCombine::choice_order, nullptr); },
               "no NCCL communicator");
}

// R = 3 simulated on one GPU for compute-sanitizer: only fusedmoe's kernels and copies run.
TEST(EpLayerSanitizer, SimulatedThreeRanks) {
  FMOE_SKIP_WITHOUT_GPU();
  compare_simulated_ranks(routed_only("mixtral-8x7b", 256, 128, 10, Precision::fp8_block), {4, 0, 6}, 6,
                          0.2f, 21, /*exact=*/false);
}

namespace {

// The launcher's --ep-child value in this process's command line, or "" (not a rank process).
std::string ep_child_value() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t b = 0; b < all.size();) {
    const size_t e = std::min(all.find('\0', b), all.size());
    args.push_back(all.substr(b, e - b));
    b = e + 1;
  }
  for (size_t i = 0; i + 1 < args.size(); ++i)
    if (args[i] == std::string("--") + cli::kEpChildOption) return args[i + 1];
  return "";
}

// One rank of EpLayerMultiGpu (a process of its own on GPU `rank`, as `fusedmoe run --ep` runs
// them): every rank draws the same layer and tokens (the same seed), computes MoeLayer on all of
// them on its own GPU as the reference, and runs its share of the experts on its slice of the
// tokens over the real NCCL communicator. choice_order must equal MoeLayer bit for bit (unchunked);
// rank_order and chunked steps by relative L2. The tokens per rank keep both sides on
// BLOCK_T = 128 (see SimulatedRanksEqualMoeLayer).
void nccl_rank_case(const EpCommunicator& comm, const MoeConfig& cfg, int tokens_per_rank,
                    uint64_t seed, int chunks = 1) {
  const int R = comm.num_ranks(), r = comm.rank(), H = cfg.hidden, k = cfg.top_k;
  const int T = R * tokens_per_rank;
  LayerCase c;
  c.cfg = cfg;
  c.T = T;
  c.mode = ReductionMode::deterministic;
  c.route = LayerRoute::given;
  const std::string ctx = c.describe() + strf(" R=%d rank %d (GPU) chunks=%d seed %llu", R, r,
                                              chunks, (unsigned long long)seed);
  const LayerData d = make_layer_data(c, seed);
  const cli::GpuLayer g = cli::make_gpu_layer(d.lw, nullptr);  // all experts: the reference
  const std::vector<uint16_t> all_want = run_single(*g.layer, upload(d, d.given.ids, T), H, k, nullptr);
  const std::vector<uint16_t> want(all_want.begin() + ptrdiff_t(size_t(r) * tokens_per_rank * H),
                                   all_want.begin() + ptrdiff_t(size_t(r + 1) * tokens_per_rank * H));
  const detail::ExpertPartition part(cfg.num_experts, R);
  const EpMoeLayer ep(cfg, rank_weights(g.weights, part.first(r), part.count(r)), comm, tokens_per_rank);
  ASSERT_EQ(ep.first_expert(), part.first(r)) << ctx;
  LayerData mine;
  const size_t t0 = size_t(r) * tokens_per_rank;
  mine.x_bits.assign(d.x_bits.begin() + ptrdiff_t(t0 * H), d.x_bits.begin() + ptrdiff_t((t0 + tokens_per_rank) * H));
  mine.given.weights.assign(d.given.weights.begin() + ptrdiff_t(t0 * k),
                            d.given.weights.begin() + ptrdiff_t((t0 + tokens_per_rank) * k));
  const std::vector<int32_t> ids(d.given.ids.begin() + ptrdiff_t(t0 * k),
                                 d.given.ids.begin() + ptrdiff_t((t0 + tokens_per_rank) * k));
  const Inputs in = upload(mine, ids, tokens_per_rank);
  cudaStream_t stream;
  FMOE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (EpCombine combine : {EpCombine::choice_order, EpCombine::rank_order}) {
    const bool choice = combine == EpCombine::choice_order;
    const std::vector<uint16_t> got = run_ep(ep, in, H, k, combine, stream, nullptr, false, chunks);
    if (choice && chunks == 1) {
      expect_bitwise(got, want, H, ctx + " choice_order");
    } else {
      double err2 = 0, ref2 = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        const double x = fmt::bf16_to_float(got[i]), w = fmt::bf16_to_float(want[i]);
        ASSERT_TRUE(std::isfinite(x)) << ctx << (choice ? " choice_order" : " rank_order") << " element " << i;
        err2 += (x - w) * (x - w);
        ref2 += w * w;
      }
      EXPECT_LE(std::sqrt(err2), 1e-2 * std::sqrt(ref2) + 1e-6)
          << ctx << (choice ? " choice_order" : " rank_order") << " relative L2";
    }
    if (testing::Test::HasFatalFailure()) break;
  }
  FMOE_CUDA(cudaStreamDestroy(stream));
}

}  // namespace

// Needs two or more GPUs (a multi-GPU kind: nvidia-h100-x2 / -x4 / -x8); skips with one.
// The launcher's rank process model (tools/ep_launch.hpp, what `fusedmoe run --ep` and a serving
// engine use: one process per GPU): this binary again, R times, each running the case below as
// one rank. At R = 2 and, with more GPUs, at R = all of them (up to 8).
TEST(EpLayerMultiGpu, RanksOverNcclEqualMoeLayer) {
  FMOE_SKIP_WITHOUT_GPU();
  int gpus = 0;
  FMOE_CUDA(cudaGetDeviceCount(&gpus));
  if (gpus < 2) GTEST_SKIP() << "needs two or more GPUs (one rank process per GPU), found " << gpus;
  // The ranks draw the same layer and tokens: this run's seed.
  setenv("FMOE_SEED", strf("%llu", (unsigned long long)run_seed()).c_str(), 1);
  std::vector<int> ranks = {2};
  if (std::min(gpus, 8) > 2) ranks.push_back(std::min(gpus, 8));
  for (int R : ranks) {
    std::printf("[ EpLayerMultiGpu ] %d rank processes (rank r on GPU r)\n", R);
    std::fflush(stdout);
    EXPECT_EQ(cli::launch_ranks_of("EpLayerMultiGpu", "/proc/self/exe", R,
                                   {"--gtest_filter=EpLayerMultiGpuRank.*",
                                    "--gtest_also_run_disabled_tests"}), 0)
        << R << " rank processes: see each rank's output above";
  }
}

// One rank of the case above (disabled: only the launcher runs it, with --ep-child).
TEST(EpLayerMultiGpuRank, DISABLED_OneRank) {
  const std::string v = ep_child_value();
  if (v.empty()) GTEST_SKIP() << "a rank process of EpLayerMultiGpu (started by it, with --ep-child)";
  const int R = std::atoi(v.substr(v.find(',') + 1).c_str());
  const cli::EpChild ch = cli::parse_ep_child(v, R);
  FMOE_CUDA(cudaSetDevice(ch.device));
  EpUniqueId id;
  std::copy(ch.id.begin(), ch.id.end(), id.bytes);
  const EpCommunicator comm = EpCommunicator::create(ch.ranks, ch.rank, id);
  // E = 8 experts per rank >= top_k = 8; > 40 rows per expert on both sides.
  const MoeConfig cfg = routed_only("qwen3-30b-a3b", 256, 128, 8 * R, Precision::fp8_block);
  for (uint64_t seed : seeds_for(hash_ints({R, 29}))) {
    nccl_rank_case(comm, cfg, 48, seed);
    if (testing::Test::HasFatalFailure()) return;
  }
  // With a gated shared expert (every rank runs it on its tokens, on the side stream).
  const MoeConfig shared = scaled(find_preset("qwen3.5-35b-a3b"), 256, 128, 8 * R, Precision::fp8_block);
  nccl_rank_case(comm, shared, 48, hash_ints({R, 31}));
  if (testing::Test::HasFatalFailure()) return;
  // Pipelined in 3 chunks (checked by relative L2).
  nccl_rank_case(comm, shared, 48, hash_ints({R, 37}), 3);
}
