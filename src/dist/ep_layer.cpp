// Host side of the expert-parallel layer (include/fusedmoe/ep_layer.hpp): validation, the
// workspace carve-up and one step as a chain of launches and NCCL calls on the caller's stream
// (the steps apart: ep_layer_steps.hpp):
//   dispatch kernels -> all-to-all of counts and rows -> receive kernel -> local MoeLayer (given
//   routing) -> return kernel -> all-to-all of results -> combine kernel.
// Every size is fixed by max_tokens_per_rank (cap): the local layer always runs on R * cap rows,
// the ones that did not arrive carrying no routes, so no count ever reaches the host.
// Shared experts run on the token's own rank, as a one-expert MoeLayer of the shared MLP on the
// rank's T tokens (deterministic: f32 rows the combine adds after the routes, as MoeLayer's
// finalize does), on a side stream forked from the caller's, so they overlap the exchanges.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/tensor_check.hpp"
#include "dist/ep_comm.hpp"
#include "dist/ep_kernels.hpp"
#include "dist/ep_layer_steps.hpp"
#include "dist/ep_plan.hpp"
#include "fusedmoe/layer.hpp"
#include "layer/layer_plan.hpp"

namespace fusedmoe {

struct EpMoeLayer::Impl {
  MoeConfig cfg;                    // the whole layer's
  const EpCommunicator::Impl* comm = nullptr;
  detail::EpPartitionArgs part;
  int rank = 0, R = 1, cap = 0, H = 0, k = 0;
  int first = 0, E_local = 0;
  detail::EpRowLayout row;          // payload: a bf16 row of x (the local layer quantizes it)
  detail::EpRowLayout row8;         // fp8 rows (EpForwardArgs::fp8_rows): codes + 1x128 scales
  bool fp8_ok = false;              // fp8 activations, the weight not on the input
  std::unique_ptr<MoeLayer> local;  // this rank's experts, caller-given routing
  // Shared experts: the shared MLP as one expert, routed by ep_shared_routing (every token, its
  // gate's weight or 1); the side stream and its fork / join events overlap it with the exchanges.
  std::unique_ptr<MoeLayer> shared;
  const __nv_bfloat16* shared_gate = nullptr;
  cudaStream_t side = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
  // Chunked steps: the communication stream and its events (arrived[c]: chunk c's rows are here;
  // computed[c]: its local layer is done).
  cudaStream_t comm_stream = nullptr;
  cudaEvent_t comm_fork = nullptr, comm_join = nullptr;
  cudaEvent_t arrived[kEpMaxChunks] = {}, computed[kEpMaxChunks] = {};
  std::mutex side_mutex;  // one forward at a time records and waits on these events
  ~Impl() {
    for (cudaEvent_t e : {fork, join, comm_fork, comm_join})
      if (e) cudaEventDestroy(e);
    for (int c = 0; c < kEpMaxChunks; ++c) {
      if (arrived[c]) cudaEventDestroy(arrived[c]);
      if (computed[c]) cudaEventDestroy(computed[c]);
    }
    if (side) cudaStreamDestroy(side);
    if (comm_stream) cudaStreamDestroy(comm_stream);
  }
};

namespace {

constexpr const char* kOp = "EpMoeLayer";
constexpr size_t kAlign = 256;

size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The workspace: the shared experts' part (all T tokens), then `chunks` copies of one chunk's
// arrays (cap rows per peer each), so every chunk of a pipelined step has buffers of its own.
// Scratch of one step; nothing needs initialization.
struct EpWorkspace {
  int cap = 0;                       // this chunk's rows per peer
  bool fp8 = false;                  // rows travel as fp8 (row8), x_local holds codes + scales
  detail::EpRowLayout row;           // the rows' layout this step (sizes: the bf16 one, larger)
  float* x_scales = nullptr;         // fp8: [R * cap, ceil(H/128)] after the codes in x_local
  detail::EpCounters* counters = nullptr;
  int32_t* route_dest = nullptr;     // [cap * k]
  int32_t* goes_to = nullptr;        // [R * cap]
  int32_t* token_row = nullptr;      // [cap * R]
  int32_t* route_row = nullptr;      // [cap * k]
  int32_t* row_token = nullptr;      // [R * cap]
  int32_t* send_counts = nullptr;    // [R]
  int32_t* recv_counts = nullptr;    // [R]
  int32_t* recv_offsets = nullptr;   // [R + 1]
  int32_t* row_slot = nullptr;       // [R * cap]
  int32_t* expert_counts = nullptr;  // [E_local]
  uint8_t* send = nullptr;           // [R * cap, row_bytes]
  uint8_t* recv = nullptr;           // [R * cap, row_bytes]
  uint8_t* x_local = nullptr;        // [R * cap, H] bf16: the local layer's x
  int32_t* local_ids = nullptr;      // [R * cap, k]
  float* local_weights = nullptr;    // [R * cap, k]
  uint8_t* y_local = nullptr;        // [R * cap, H] bf16: the local layer's y
  uint8_t* ret_send = nullptr;       // choice: f32 [R * cap * k, H]; rank: bf16 [R * cap, H]
  uint8_t* ret_recv = nullptr;       // the same
  uint8_t* local_ws = nullptr;       // the local layer's workspace
  size_t local_ws_bytes = 0;
  // shared experts only (all T <= max_tokens_per_rank tokens, not chunked)
  int32_t* shared_ids = nullptr;     // [max_tokens_per_rank]
  float* shared_weights = nullptr;   // [max_tokens_per_rank]
  uint8_t* shared_y = nullptr;       // [max_tokens_per_rank, H] bf16 (the one-expert layer's own
                                     // output, unused)
  uint8_t* shared_ws = nullptr;      // the one-expert layer's workspace, deterministic
  size_t shared_ws_bytes = 0;
};

ReductionMode local_mode(EpCombine combine, ReductionMode mode) {
  return combine == EpCombine::choice_order ? ReductionMode::deterministic : mode;
}

// Lays out from `base` (nullptr: sizes only) with a bump allocator; returns the bytes taken.
struct Bump {
  uint8_t* base;
  size_t off = 0;
  template <typename T_>
  void take(T_*& ptr, int64_t bytes) {
    if (base) ptr = reinterpret_cast<T_*>(base + off);
    off = align_up(off + size_t(bytes));
  }
};

size_t shared_layout(const EpMoeLayer::Impl& L, uint8_t* base, EpWorkspace& w) {
  if (!L.shared) return 0;
  Bump b{base};
  b.take(w.shared_ids, int64_t(L.cap) * 4);
  b.take(w.shared_weights, int64_t(L.cap) * 4);
  b.take(w.shared_y, int64_t(L.cap) * L.H * 2);
  w.shared_ws_bytes = L.shared->workspace_size(L.cap, ReductionMode::deterministic);
  b.take(w.shared_ws, int64_t(w.shared_ws_bytes));
  return b.off;
}

size_t chunk_layout(const EpMoeLayer::Impl& L, EpCombine combine, ReductionMode mode, int cap,
                    uint8_t* base, EpWorkspace& w) {
  const int64_t rows = int64_t(L.R) * cap, k = L.k, H = L.H;
  const int64_t ret_row_bytes = combine == EpCombine::choice_order ? k * H * 4 : H * 2;
  Bump b{base};
  w.cap = cap;
  b.take(w.counters, sizeof(detail::EpCounters));
  b.take(w.route_dest, int64_t(cap) * k * 4);
  b.take(w.goes_to, rows * 4);
  b.take(w.token_row, rows * 4);
  b.take(w.route_row, int64_t(cap) * k * 4);
  b.take(w.row_token, rows * 4);
  b.take(w.send_counts, int64_t(L.R) * 4);
  b.take(w.recv_counts, int64_t(L.R) * 4);
  b.take(w.recv_offsets, int64_t(L.R + 1) * 4);
  b.take(w.row_slot, rows * 4);
  b.take(w.expert_counts, int64_t(L.E_local) * 4);
  b.take(w.send, rows * L.row.row_bytes);
  b.take(w.recv, rows * L.row.row_bytes);
  b.take(w.x_local, rows * H * 2);
  b.take(w.local_ids, rows * k * 4);
  b.take(w.local_weights, rows * k * 4);
  b.take(w.y_local, rows * H * 2);
  b.take(w.ret_send, rows * ret_row_bytes);
  b.take(w.ret_recv, rows * ret_row_bytes);
  w.local_ws_bytes = L.local->workspace_size(int(rows), local_mode(combine, mode));
  b.take(w.local_ws, int64_t(w.local_ws_bytes));
  return b.off;
}

// Where each part sits for a step split into `chunks` chunks of at most `cap` tokens.
struct EpLayout {
  int chunks = 1, cap = 0;
  size_t shared_bytes = 0, chunk_bytes = 0, total = 0;
};

int chunk_cap(int cap, int chunks) { return (cap + chunks - 1) / chunks; }

EpLayout ep_layout(const EpMoeLayer::Impl& L, EpCombine combine, ReductionMode mode, int chunks) {
  EpLayout l;
  EpWorkspace w;
  l.chunks = chunks;
  l.cap = chunk_cap(L.cap, chunks);
  l.shared_bytes = shared_layout(L, nullptr, w);
  l.chunk_bytes = chunk_layout(L, combine, mode, l.cap, nullptr, w);
  l.total = l.shared_bytes + size_t(chunks) * l.chunk_bytes;
  return l;
}

// Chunk c's arrays (and the shared part) in `base`.
EpWorkspace workspace_of(const EpMoeLayer::Impl& L, EpCombine combine, ReductionMode mode,
                         bool fp8, const EpLayout& l, void* base, int c) {
  EpWorkspace w;
  uint8_t* b = static_cast<uint8_t*>(base);
  shared_layout(L, b, w);
  chunk_layout(L, combine, mode, l.cap, b + l.shared_bytes + size_t(c) * l.chunk_bytes, w);
  w.fp8 = fp8;
  w.row = fp8 ? L.row8 : L.row;
  // fp8: the codes [R * cap, H] then the scales fill x_local's bf16 room (H + 4 H / 128 <= 2H
  // bytes a row; H % 16 == 0 keeps the scales 16-byte aligned).
  if (fp8 && w.x_local) w.x_scales = reinterpret_cast<float*>(w.x_local + int64_t(L.R) * l.cap * L.H);
  return w;
}

// Tokens [c0, c0 + n) of the step: a chunk's view of x, the routing and y.
EpForwardArgs slice(const EpForwardArgs& a, int c0, int n) {
  EpForwardArgs s = a;
  auto cut = [&](TensorRef& t, int64_t elem_bytes) {
    t.data = static_cast<uint8_t*>(t.data) + int64_t(c0) * t.stride[0] * elem_bytes;
    t.shape[0] = n;
  };
  cut(s.x, 2);
  cut(s.topk_ids, 4);
  cut(s.topk_weights, 4);
  cut(s.y, 2);
  s.chunks = 1;
  return s;
}

// A shared-MLP tensor as expert 0 of a one-expert layer: [a, b] -> [1, a, b]; the 4-bit global
// scales [2] -> [1, 2] and [1] (already [E] with E = 1) as they are.
TensorRef one_expert(TensorRef t, bool matrix) {
  if (!t.data || (!matrix && !(t.ndim == 1 && t.shape[0] == 2))) return t;
  FMOE_REQUIRE(t.ndim < TensorRef::kMaxDims, "%s: a shared-expert tensor has %d dimensions: %s",
               kOp, t.ndim, t.describe().c_str());
  for (int d = t.ndim; d > 0; --d) {
    t.shape[d] = t.shape[d - 1];
    t.stride[d] = t.stride[d - 1];
  }
  t.stride[0] = t.ndim > 0 ? t.shape[1] * t.stride[1] : 1;
  t.shape[0] = 1;
  ++t.ndim;
  return t;
}

void check_bf16_rows(const char* name, const TensorRef& t, int T, int H, int device) {
  using namespace detail;
  check_rows(kOp, name, t, DType::bf16, T, H, 16);  // rows move as 16-byte vectors
  check_on_device(kOp, name, t);
  check_same_device(kOp, name, t, device);
}

void check_routing(const char* name, const TensorRef& t, DType dtype, int T, int k, int device) {
  using namespace detail;
  check_dtype(kOp, name, t, dtype);
  check_shape(kOp, name, t, {T, k});
  check_contiguous(kOp, name, t);
  check_aligned(kOp, name, t, 4);
  check_data(kOp, name, t);
  check_on_device(kOp, name, t);
  check_same_device(kOp, name, t, device);
}

}  // namespace

EpMoeLayer::EpMoeLayer(const MoeConfig& cfg, const MoeLayerWeights& local_weights,
                       const EpCommunicator& comm, int max_tokens_per_rank, Stream stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& L = *impl_;
  cfg.validate();
  L.cfg = cfg;
  L.comm = &comm.impl();
  L.R = comm.num_ranks();
  L.rank = comm.rank();
  L.cap = max_tokens_per_rank;
  L.H = cfg.hidden;
  L.k = cfg.top_k;
  detail::ep_check_config(cfg, L.R);  // R <= E, top_k experts per rank
  const detail::ExpertPartition part(cfg.num_experts, L.R);
  L.part = {cfg.num_experts, L.R, cfg.num_experts / L.R, cfg.num_experts % L.R};
  L.first = part.first(L.rank);
  L.E_local = part.count(L.rank);
  FMOE_REQUIRE(max_tokens_per_rank >= 1, "%s: max_tokens_per_rank=%d must be at least 1", kOp,
               max_tokens_per_rank);
  FMOE_REQUIRE(int64_t(L.R) * L.cap * L.k <= INT32_MAX,
               "%s: %d ranks x max_tokens_per_rank %d x top_k %d exceed the int32 indices of the "
               "dispatch buffers", kOp, L.R, L.cap, L.k);
  FMOE_REQUIRE(local_weights.routing_bias.data == nullptr,
               "%s: routing_bias was given, but the EP layer takes the caller's routing "
               "(route on the token's rank, pass topk_ids / topk_weights)", kOp);
  int device = 0;
  FMOE_CUDA(cudaGetDevice(&device));
  FMOE_REQUIRE(device == L.comm->device,
               "%s: the current CUDA device is %d but the communicator's is %d", kOp, device,
               L.comm->device);

  // The local layer: this rank's experts, no routing of its own (its ids and weights are what
  // arrived). Llama 4's weight on the input is a property of the experts' input, so it stays.
  MoeConfig local = cfg;
  local.num_experts = L.E_local;
  local.num_shared_experts = 0;
  local.shared_intermediate = 0;
  local.shared_expert_gate = false;
  if (cfg.routing.fn != RoutingFn::sigmoid_top1_on_input) local.routing = RoutingConfig{};
  else local.routing = RoutingConfig{RoutingFn::sigmoid_top1_on_input};
  L.local = std::make_unique<MoeLayer>(local, detail::ep_routed_weights(local_weights), stream);
  L.row = detail::ep_row_layout(int64_t(L.H) * 2, L.k);
  L.fp8_ok = cfg.activation_precision == Precision::fp8_block &&
             cfg.weight_precision == Precision::fp8_block &&
             cfg.routing.fn != RoutingFn::sigmoid_top1_on_input;
  L.row8 = detail::ep_row_layout(L.H + (4 * int64_t((L.H + 127) / 128) + 15) / 16 * 16, L.k);
  FMOE_CUDA(cudaStreamCreateWithFlags(&L.comm_stream, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&L.comm_fork, &L.comm_join}) FMOE_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  for (int c = 0; c < kEpMaxChunks; ++c) {
    FMOE_CUDA(cudaEventCreateWithFlags(&L.arrived[c], cudaEventDisableTiming));
    FMOE_CUDA(cudaEventCreateWithFlags(&L.computed[c], cudaEventDisableTiming));
  }

  if (cfg.num_shared_experts > 0) {
    // The shared MLP as expert 0 of a one-expert layer (top_k 1, the caller-given routing of
    // ep_shared_routing); its weights are views of the caller's shared tensors.
    MoeConfig sc = cfg;
    sc.num_experts = 1;
    sc.top_k = 1;
    sc.intermediate = cfg.shared_intermediate;
    sc.num_shared_experts = 0;
    sc.shared_intermediate = 0;
    sc.shared_expert_gate = false;
    sc.expert_bias = false;
    sc.routing = RoutingConfig{};
    MoeLayerWeights sw;
    sw.w13 = one_expert(local_weights.shared_w13, true);
    sw.w13_scale = one_expert(local_weights.shared_w13_scale, true);
    sw.w13_scale_2 = one_expert(local_weights.shared_w13_scale_2, false);
    sw.w2 = one_expert(local_weights.shared_w2, true);
    sw.w2_scale = one_expert(local_weights.shared_w2_scale, true);
    sw.w2_scale_2 = one_expert(local_weights.shared_w2_scale_2, false);
    FMOE_REQUIRE(sw.w13.data && sw.w2.data,
                 "%s: the config has %d shared experts but local_weights.shared_w13 / shared_w2 "
                 "are missing (every rank runs the shared MLP on its own tokens)", kOp,
                 cfg.num_shared_experts);
    try {
      L.shared = std::make_unique<MoeLayer>(sc, sw, stream);
    } catch (const Error& e) {
      throw Error(strf("%s: the shared experts (their weights as one expert: w13 is shared_w13, "
                       "w2 is shared_w2): %s", kOp, e.what()));
    }
    if (cfg.shared_expert_gate) {
      const TensorRef& g = local_weights.shared_gate;
      FMOE_REQUIRE(g.data && g.numel() == L.H,
                   "%s: shared_gate must hold H=%d values ([H] or [1, H]), got %s", kOp, L.H,
                   g.describe().c_str());
      using namespace detail;
      check_dtype(kOp, "shared_gate", g, DType::bf16);
      check_contiguous(kOp, "shared_gate", g);
      check_aligned(kOp, "shared_gate", g, 16);
      check_on_device(kOp, "shared_gate", g);
      check_same_device(kOp, "shared_gate", g, device);
      L.shared_gate = static_cast<const __nv_bfloat16*>(g.data);
    }
    FMOE_CUDA(cudaStreamCreateWithFlags(&L.side, cudaStreamNonBlocking));
    FMOE_CUDA(cudaEventCreateWithFlags(&L.fork, cudaEventDisableTiming));
    FMOE_CUDA(cudaEventCreateWithFlags(&L.join, cudaEventDisableTiming));
  } else {
    FMOE_REQUIRE(!local_weights.shared_w13.data && !local_weights.shared_w2.data,
                 "%s: shared_w13 / shared_w2 were given, but the config has no shared experts", kOp);
  }
}

EpMoeLayer::~EpMoeLayer() = default;
EpMoeLayer::EpMoeLayer(EpMoeLayer&&) noexcept = default;
EpMoeLayer& EpMoeLayer::operator=(EpMoeLayer&&) noexcept = default;

int EpMoeLayer::first_expert() const { return impl_->first; }
int EpMoeLayer::num_local_experts() const { return impl_->E_local; }
int EpMoeLayer::max_tokens_per_rank() const { return impl_->cap; }

size_t EpMoeLayer::workspace_size(EpCombine combine, ReductionMode mode, int chunks) const {
  FMOE_REQUIRE(chunks >= 1 && chunks <= kEpMaxChunks, "%s: chunks=%d must be in [1, %d]", kOp,
               chunks, kEpMaxChunks);
  return ep_layout(*impl_, combine, mode, chunks).total;
}

namespace {

using detail::EpExchanges;

EpExchanges exchanges_of(const EpMoeLayer::Impl& L, EpCombine combine, const EpWorkspace& w) {
  // Fixed chunks whatever the counts say: the receiver reads only the rows below them.
  const size_t ret_row_bytes = combine == EpCombine::choice_order ? size_t(L.k) * L.H * 4
                                                                  : size_t(L.H) * 2;
  EpExchanges x;
  x.counts = {w.send_counts, w.recv_counts, sizeof(int32_t)};
  x.rows = {w.send, w.recv, size_t(w.cap) * size_t(w.row.row_bytes)};
  x.results = {w.ret_send, w.ret_recv, size_t(w.cap) * ret_row_bytes};
  return x;
}

void dispatch_chunk(const EpMoeLayer::Impl& L, const EpForwardArgs& a, const EpWorkspace& w,
                    cudaStream_t stream) {
  detail::EpDispatchParams dp;
  dp.part = L.part;
  dp.T = int(a.x.shape[0]);
  dp.k = L.k;
  dp.cap = w.cap;
  dp.source_rank = L.rank;
  dp.topk_ids = static_cast<const int32_t*>(a.topk_ids.data);
  dp.topk_weights = static_cast<const float*>(a.topk_weights.data);
  dp.x = static_cast<const uint8_t*>(a.x.data);
  dp.x_ld_bytes = a.x.stride[0] * 2;
  dp.row = w.row;
  dp.fp8_rows = w.fp8;
  dp.H = L.H;
  dp.route_dest = w.route_dest;
  dp.goes_to = w.goes_to;
  dp.token_row = w.token_row;
  dp.route_row = w.route_row;
  dp.row_token = w.row_token;
  dp.send_counts = w.send_counts;
  dp.send = w.send;
  dp.counters = w.counters;
  detail::launch_ep_dispatch(dp, stream);
}

// The local layer's arguments on chunk `w`: all R * cap rows as they arrived (rows that did not
// arrive carry only -1 ids, which its drop rule skips; ids are not checked on the host, that would
// synchronize), into y_local.
MoeForwardArgs local_args(const EpMoeLayer::Impl& L, const EpForwardArgs& a, const EpWorkspace& w) {
  const int rows = L.R * w.cap, device = L.comm->device;
  MoeForwardArgs la;
  if (w.fp8) {  // the rows arrived quantized: the local layer reads them as they are
    la.x_fp8 = TensorRef::contiguous(w.x_local, DType::e4m3, {rows, L.H}, Device::cuda, device);
    la.x_fp8_scales = TensorRef::contiguous(w.x_scales, DType::f32, {rows, (L.H + 127) / 128},
                                            Device::cuda, device);
  } else {
    la.x = TensorRef::contiguous(w.x_local, DType::bf16, {rows, L.H}, Device::cuda, device);
  }
  la.routing_given = true;
  la.topk_ids = TensorRef::contiguous(w.local_ids, DType::i32, {rows, L.k}, Device::cuda, device);
  la.topk_weights = TensorRef::contiguous(w.local_weights, DType::f32, {rows, L.k}, Device::cuda, device);
  la.validate_routing = false;
  la.y = TensorRef::contiguous(w.y_local, DType::bf16, {rows, L.H}, Device::cuda, device);
  la.mode = local_mode(a.combine, a.mode);
  // The intermediate per 64 at every size: this local layer runs on R * cap rows of every rank's
  // tokens, so a size-dependent choice (MoeForwardArgs::intermediate_scale_block) could not match
  // what a single-GPU layer picks for each rank's T.
  la.intermediate_scale_block = 64;
  return la;
}

void local_chunk(const EpMoeLayer::Impl& L, const EpForwardArgs& a, const EpWorkspace& w,
                 cudaStream_t stream) {
  using namespace detail;
  const bool choice = a.combine == EpCombine::choice_order;
  const int rows = L.R * w.cap;

  // Receive: the local layer's rows and routing, source-major.
  EpReceiveParams rp;
  rp.part = L.part;
  rp.dest_rank = L.rank;
  rp.k = L.k;
  rp.cap = w.cap;
  rp.row = w.row;
  rp.fp8_rows = w.fp8;
  rp.H = L.H;
  rp.x_scales = w.x_scales;
  rp.x_scales_ld = (L.H + 127) / 128;
  rp.recv_counts = w.recv_counts;
  rp.recv = w.recv;
  rp.recv_offsets = w.recv_offsets;
  rp.row_slot = w.row_slot;
  rp.local_ids = w.local_ids;
  rp.local_weights = w.local_weights;
  rp.x = w.x_local;
  rp.x_ld_bytes = int64_t(L.H) * (w.fp8 ? 1 : 2);
  rp.expert_counts = w.expert_counts;
  rp.counters = w.counters;
  launch_ep_receive(rp, stream);

  // The local layer on all R * cap rows.
  MoeForwardArgs la = local_args(L, a, w);
  la.max_sms = a.local_sms;
  L.local->forward(la, w.local_ws, w.local_ws_bytes, reinterpret_cast<Stream>(stream));

  // Results to the rows' slots: each route's fp32 row (the local layer's deterministic rows,
  // where its finalize reads them) or each row's bf16 sum (its y).
  LayerWorkspace lws;
  layer_workspace_layout(L.local->impl(), rows, la.mode, w.local_ws, &lws);
  EpReturnParams ret;
  ret.R = L.R;
  ret.k = L.k;
  ret.cap = w.cap;
  ret.H = L.H;
  ret.choice_order = choice;
  ret.recv_offsets = w.recv_offsets;
  ret.row_slot = w.row_slot;
  ret.local_ids = w.local_ids;
  ret.local = choice ? static_cast<const void*>(lws.acc) : static_cast<const void*>(w.y_local);
  ret.ld_local = L.H;
  ret.ret = w.ret_send;
  launch_ep_return(ret, stream);
}

// The shared experts' f32 rows of tokens [0, T) (the one-expert layer's deterministic rows: one
// per route, route t * 1 + 0 = token t), or nullptr.
const float* shared_rows(const EpMoeLayer::Impl& L, int T, const EpWorkspace& w) {
  if (!L.shared || T == 0) return nullptr;
  detail::LayerWorkspace sws;
  detail::layer_workspace_layout(L.shared->impl(), T, ReductionMode::deterministic, w.shared_ws, &sws);
  return sws.acc;
}

// `a` is the chunk's slice; `shared` its tokens' shared rows (or nullptr).
void combine_chunk(const EpMoeLayer::Impl& L, const EpForwardArgs& a, const EpWorkspace& w,
                   const float* shared, cudaStream_t stream) {
  detail::EpCombineParams cp;
  cp.T = int(a.x.shape[0]);
  cp.R = L.R;
  cp.k = L.k;
  cp.cap = w.cap;
  cp.H = L.H;
  cp.choice_order = a.combine == EpCombine::choice_order;
  cp.token_row = w.token_row;
  cp.route_row = w.route_row;
  cp.ret = w.ret_recv;
  cp.shared = shared;
  cp.y = static_cast<__nv_bfloat16*>(a.y.data);
  cp.ldy = a.y.stride[0];
  detail::launch_ep_combine(cp, stream);
}

void shared_step(const EpMoeLayer::Impl& L, const EpForwardArgs& a, const EpWorkspace& w,
                 cudaStream_t stream) {
  using namespace detail;
  const int T = int(a.x.shape[0]), device = L.comm->device;
  if (!L.shared || T == 0) return;
  EpSharedRoutingParams sp;
  sp.T = T;
  sp.H = L.H;
  sp.x = static_cast<const __nv_bfloat16*>(a.x.data);
  sp.ldx = a.x.stride[0];
  sp.gate = L.shared_gate;
  sp.ids = w.shared_ids;
  sp.weights = w.shared_weights;
  launch_ep_shared_routing(sp, stream);
  MoeForwardArgs sa;
  sa.x = a.x;
  sa.routing_given = true;
  sa.topk_ids = TensorRef::contiguous(w.shared_ids, DType::i32, {T, 1}, Device::cuda, device);
  sa.topk_weights = TensorRef::contiguous(w.shared_weights, DType::f32, {T, 1}, Device::cuda, device);
  sa.validate_routing = false;
  sa.y = TensorRef::contiguous(w.shared_y, DType::bf16, {T, L.H}, Device::cuda, device);
  sa.mode = ReductionMode::deterministic;
  sa.intermediate_scale_block = 64;  // as the local layer's (local_args)
  sa.max_sms = a.shared_sms;
  L.shared->forward(sa, w.shared_ws, w.shared_ws_bytes, reinterpret_cast<Stream>(stream));
}

// The steps apart (ep_layer_steps.hpp) run an unchunked step.
EpWorkspace single_chunk(const EpMoeLayer::Impl& L, const EpForwardArgs& a, void* workspace) {
  FMOE_REQUIRE(a.chunks == 1, "%s: the steps apart run unchunked steps (chunks=%d)", kOp, a.chunks);
  return workspace_of(L, a.combine, a.mode, a.fp8_rows, ep_layout(L, a.combine, a.mode, 1),
                      workspace, 0);
}

}  // namespace

namespace detail {

EpExchanges ep_check_forward(const EpMoeLayer& layer, const EpForwardArgs& a, void* workspace,
                             size_t workspace_bytes) {
  const EpMoeLayer::Impl& L = layer.impl();
  FMOE_REQUIRE(a.x.ndim == 2, "%s: x must be [T, H=%d] bf16, got %s", kOp, L.H,
               a.x.describe().c_str());
  FMOE_REQUIRE(a.x.shape[0] >= 0 && a.x.shape[0] <= L.cap,
               "%s: x has T=%lld rows; this layer takes at most max_tokens_per_rank=%d", kOp,
               (long long)a.x.shape[0], L.cap);
  const int T = int(a.x.shape[0]), device = L.comm->device;
  check_bf16_rows("x", a.x, T, L.H, device);
  check_bf16_rows("y", a.y, T, L.H, device);
  check_routing("topk_ids", a.topk_ids, DType::i32, T, L.k, device);
  check_routing("topk_weights", a.topk_weights, DType::f32, T, L.k, device);
  FMOE_REQUIRE(a.chunks >= 1 && a.chunks <= kEpMaxChunks && a.chunks <= L.cap,
               "%s: chunks=%d must be in [1, min(%d, max_tokens_per_rank=%d)]", kOp, a.chunks,
               kEpMaxChunks, L.cap);
  FMOE_REQUIRE(a.local_sms >= 0, "%s: local_sms=%d must be >= 0 (0: every SM)", kOp, a.local_sms);
  FMOE_REQUIRE(a.shared_sms >= 0, "%s: shared_sms=%d must be >= 0 (0: every SM)", kOp, a.shared_sms);
  const EpLayout l = ep_layout(L, a.combine, a.mode, a.chunks);
  FMOE_REQUIRE(workspace != nullptr, "%s: workspace is null", kOp);
  FMOE_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % kAlign == 0,
               "%s: workspace must be %zu-byte aligned, got %p", kOp, kAlign, workspace);
  FMOE_REQUIRE(workspace_bytes >= l.total,
               "%s: workspace of %zu bytes is smaller than the %zu bytes this combine, mode and "
               "chunks=%d need (size it with workspace_size)", kOp, workspace_bytes, l.total,
               a.chunks);
  FMOE_REQUIRE(!a.fp8_rows || L.fp8_ok, "%s: fp8_rows needs fp8_block weights and activations "
               "and a routing that does not weight the input; this layer is %s", kOp,
               L.cfg.summary().c_str());
  const EpWorkspace w = workspace_of(L, a.combine, a.mode, a.fp8_rows, l, workspace, 0);
  FMOE_REQUIRE(!L.shared || L.shared->workspace_size(T, ReductionMode::deterministic) <= w.shared_ws_bytes,
               "%s: internal: the shared experts' workspace for T=%d exceeds the one sized for "
               "max_tokens_per_rank=%d", kOp, T, L.cap);
  return exchanges_of(L, a.combine, w);
}

MoeLayerWeights ep_routed_weights(const MoeLayerWeights& local_weights) {
  MoeLayerWeights routed = local_weights;
  for (TensorRef* t : {&routed.shared_w13, &routed.shared_w13_scale, &routed.shared_w13_scale_2,
                       &routed.shared_w2, &routed.shared_w2_scale, &routed.shared_w2_scale_2,
                       &routed.shared_gate})
    *t = TensorRef{};
  return routed;
}

EpStepViews ep_step_views(const EpMoeLayer& layer, const EpForwardArgs& a, void* workspace) {
  const EpMoeLayer::Impl& L = layer.impl();
  const EpWorkspace w = single_chunk(L, a, workspace);
  EpStepViews v;
  v.rows = L.R * w.cap;
  v.recv_counts = w.recv_counts;
  v.row_slot = w.row_slot;
  v.local_args = local_args(L, a, w);
  v.local = L.local.get();
  return v;
}

void ep_dispatch(const EpMoeLayer& layer, const EpForwardArgs& a, void* workspace,
                 cudaStream_t stream) {
  dispatch_chunk(layer.impl(), a, single_chunk(layer.impl(), a, workspace), stream);
}

void ep_local(const EpMoeLayer& layer, const EpForwardArgs& a, void* workspace,
              cudaStream_t stream) {
  local_chunk(layer.impl(), a, single_chunk(layer.impl(), a, workspace), stream);
}

void ep_shared(const EpMoeLayer& layer, const EpForwardArgs& a, void* workspace,
               cudaStream_t stream) {
  shared_step(layer.impl(), a, single_chunk(layer.impl(), a, workspace), stream);
}

void ep_combine(const EpMoeLayer& layer, const EpForwardArgs& a, void* workspace,
                cudaStream_t stream) {
  const EpMoeLayer::Impl& L = layer.impl();
  const EpWorkspace w = single_chunk(L, a, workspace);
  combine_chunk(L, a, w, shared_rows(L, int(a.x.shape[0]), w), stream);
}

}  // namespace detail

// One step. Unchunked: dispatch -> counts and rows all-to-alls -> local -> results all-to-all
// -> combine, on the caller's stream. Chunked (C > 1): tokens [c cap_c, (c + 1) cap_c) are chunk
// c, each with buffers of its own; the exchanges and the dispatch / combine kernels go on the
// communication stream (all dispatches first, then each chunk's return once its local layer is
// done), the local layers on the caller's stream in chunk order, so chunk c + 1's dispatch and
// chunk c - 1's return move while chunk c's GEMMs run. Every rank enqueues the same NCCL calls in
// the same order. The shared experts go on the side stream from the start, joined before the
// first combine. Forks and joins are events: the step captures into a CUDA graph.
void EpMoeLayer::forward(const EpForwardArgs& a, void* workspace, size_t workspace_bytes,
                         Stream stream_in) const {
  using namespace detail;
  Impl& L = *impl_;
  const EpCommunicator::Impl& comm = *L.comm;
  FMOE_REQUIRE(comm.comm != nullptr, "%s: the communicator has no NCCL communicator (a "
               "simulated one, for tests)", kOp);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_in);
  ep_check_forward(*this, a, workspace, workspace_bytes);
  const int T = int(a.x.shape[0]), C = a.chunks;
  const EpLayout l = ep_layout(L, a.combine, a.mode, C);
  const EpWorkspace w0 = workspace_of(L, a.combine, a.mode, a.fp8_rows, l, workspace, 0);
  const float* shared = shared_rows(L, T, w0);
  const bool side = L.shared && a.overlap_shared && T > 0;
  std::lock_guard<std::mutex> lock(L.side_mutex);  // the streams and events below are the layer's
  if (side) {
    // Fork: the shared experts on the side stream, while the exchanges go on.
    FMOE_CUDA(cudaEventRecord(L.fork, stream));
    FMOE_CUDA(cudaStreamWaitEvent(L.side, L.fork, 0));
    shared_step(L, a, w0, L.side);
    FMOE_CUDA(cudaEventRecord(L.join, L.side));
  } else {
    shared_step(L, a, w0, stream);
  }
  if (C == 1) {
    const EpForwardArgs a1 = slice(a, 0, T);
    const EpExchanges x = exchanges_of(L, a.combine, w0);
    dispatch_chunk(L, a1, w0, stream);
    ep_all_to_all(comm, x.counts.send, x.counts.recv, x.counts.bytes_per_peer, stream);
    ep_all_to_all(comm, x.rows.send, x.rows.recv, x.rows.bytes_per_peer, stream);
    local_chunk(L, a1, w0, stream);
    ep_all_to_all(comm, x.results.send, x.results.recv, x.results.bytes_per_peer, stream);
    if (side) FMOE_CUDA(cudaStreamWaitEvent(stream, L.join, 0));  // join before the combine
    combine_chunk(L, a1, w0, shared, stream);
    return;
  }
  cudaStream_t cs = L.comm_stream;
  FMOE_CUDA(cudaEventRecord(L.comm_fork, stream));
  FMOE_CUDA(cudaStreamWaitEvent(cs, L.comm_fork, 0));
  std::vector<EpForwardArgs> ac;
  std::vector<EpWorkspace> wc;
  for (int c = 0; c < C; ++c) {
    const int c0 = std::min(T, c * l.cap), c1 = std::min(T, (c + 1) * l.cap);
    ac.push_back(slice(a, c0, c1 - c0));
    wc.push_back(workspace_of(L, a.combine, a.mode, a.fp8_rows, l, workspace, c));
  }
  for (int c = 0; c < C; ++c) {
    const EpExchanges x = exchanges_of(L, a.combine, wc[size_t(c)]);
    dispatch_chunk(L, ac[size_t(c)], wc[size_t(c)], cs);
    ep_all_to_all(comm, x.counts.send, x.counts.recv, x.counts.bytes_per_peer, cs);
    ep_all_to_all(comm, x.rows.send, x.rows.recv, x.rows.bytes_per_peer, cs);
    FMOE_CUDA(cudaEventRecord(L.arrived[c], cs));
  }
  for (int c = 0; c < C; ++c) {
    const EpExchanges x = exchanges_of(L, a.combine, wc[size_t(c)]);
    FMOE_CUDA(cudaStreamWaitEvent(stream, L.arrived[c], 0));
    local_chunk(L, ac[size_t(c)], wc[size_t(c)], stream);
    FMOE_CUDA(cudaEventRecord(L.computed[c], stream));
    FMOE_CUDA(cudaStreamWaitEvent(cs, L.computed[c], 0));
    ep_all_to_all(comm, x.results.send, x.results.recv, x.results.bytes_per_peer, cs);
    // The shared rows join before the first combine (not before the first return's exchange).
    if (side && c == 0) FMOE_CUDA(cudaStreamWaitEvent(cs, L.join, 0));
    const int c0 = std::min(T, c * l.cap);
    combine_chunk(L, ac[size_t(c)], wc[size_t(c)], shared ? shared + size_t(c0) * L.H : nullptr, cs);
  }
  FMOE_CUDA(cudaEventRecord(L.comm_join, cs));
  FMOE_CUDA(cudaStreamWaitEvent(stream, L.comm_join, 0));
}

EpStats EpMoeLayer::stats(const void* workspace, EpCombine combine, ReductionMode mode,
                          Stream stream_in, int chunks) const {
  FMOE_REQUIRE(workspace, "%s::stats: workspace is null", kOp);
  FMOE_REQUIRE(chunks >= 1 && chunks <= kEpMaxChunks, "%s::stats: chunks=%d must be in [1, %d]",
               kOp, chunks, kEpMaxChunks);
  const Impl& L = *impl_;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_in);
  const EpLayout l = ep_layout(L, combine, mode, chunks);
  EpStats s;
  for (int c = 0; c < chunks; ++c) {
    const EpWorkspace w = workspace_of(L, combine, mode, false, l, const_cast<void*>(workspace), c);
    detail::EpCounters k{};
    int32_t received = 0;
    FMOE_CUDA(cudaMemcpyAsync(&k, w.counters, sizeof(k), cudaMemcpyDeviceToHost, stream));
    FMOE_CUDA(cudaMemcpyAsync(&received, w.recv_offsets + L.R, sizeof(received),
                              cudaMemcpyDeviceToHost, stream));
    FMOE_CUDA(cudaStreamSynchronize(stream));
    s.dropped_routes += int64_t(k.dropped_routes);
    s.overflow_rows += int64_t(k.overflow_rows);
    s.received_rows += received;
    s.received_routes += int64_t(k.recv_routes);
    s.received_bad_slots += int64_t(k.recv_dropped);
    s.received_bad_counts += int64_t(k.recv_clamped);
  }
  return s;
}

}  // namespace fusedmoe
