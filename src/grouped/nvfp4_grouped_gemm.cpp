// The NVFP4 grouped GEMM op (include/fusedmoe/grouped_gemm.hpp): validation, the one-time re-layout
// of B into the engine's prepared 4-bit blocks, and per call the preparation kernel (A to bf16,
// the schedule from the group offsets: grouped_prep.hpp) followed by the grouped GEMM engine
// (src/gemm) with its e2m1 weights, TMA rows and the deterministic combine writing c's rows.
//
// Why this shape: the engine already streams prepared 4-bit weights and decodes them in registers
// into bf16 wgmma (the NVFP4 MoE layer's GEMMs). A group is an expert whose routes are A's rows
// in order, so route r is row r (k = 1, no sorted route table), its routing weight is A's global
// scale, and B's global scale sits in the per-row factor the engine already applies.
#include "fusedmoe/grouped_gemm.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <vector>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/device_state.hpp"
#include "common/env.hpp"
#include "common/tensor_check.hpp"
#include "common/tma.hpp"
#include "fusedmoe/error.hpp"
#include "gemm/e2m1_layout.hpp"
#include "gemm/gemm_config.hpp"
#include "gemm/grouped_gemm.hpp"
#include "grouped/grouped_prep.hpp"
#include "layer/prepare.hpp"

namespace fusedmoe {

namespace {

constexpr const char* kOp = "Nvfp4GroupedGemm";
constexpr size_t kAlign = 256;

static_assert(detail::kGroupedMaxGroups <= detail::kGemmMaxExperts,
              "the grouped GEMM's expert table is smaller than the op's group limit");

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
size_t align_up(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// The per-call workspace: A in bf16, each row's weight (A's global scale), the schedule.
struct Workspace {
  uint16_t* a_bf16 = nullptr;
  float* row_weight = nullptr;
  int32_t *counts = nullptr, *tile_offsets = nullptr, *route_offsets = nullptr, *status = nullptr;
};
size_t workspace_layout(int64_t M, int G, int K, void* base, Workspace* ws) {
  size_t at = 0;
  auto take = [&](size_t bytes) {
    void* p = base ? static_cast<uint8_t*>(base) + at : nullptr;
    at += align_up(bytes);
    return p;
  };
  // The status word first: offsets_clamped finds it without the shape.
  void* status = take(sizeof(int32_t));
  void* a_bf16 = take(size_t(M) * size_t(K) * 2);
  void* row_weight = take(size_t(M) * sizeof(float));
  void* counts = take(size_t(G) * sizeof(int32_t));
  void* tile_offsets = take(size_t(G + 1) * sizeof(int32_t));
  void* route_offsets = take(size_t(G + 1) * sizeof(int32_t));
  if (ws) {
    ws->status = static_cast<int32_t*>(status);
    ws->a_bf16 = static_cast<uint16_t*>(a_bf16);
    ws->row_weight = static_cast<float*>(row_weight);
    ws->counts = static_cast<int32_t*>(counts);
    ws->tile_offsets = static_cast<int32_t*>(tile_offsets);
    ws->route_offsets = static_cast<int32_t*>(route_offsets);
  }
  return at;
}

// The offsets against the contract, on the host (when the stream is not being captured).
void check_offsets(const TensorRef& offsets, int G, int64_t M, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FMOE_CUDA(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;
  std::vector<int32_t> o(size_t(G) + 1);
  FMOE_CUDA(cudaMemcpyAsync(o.data(), offsets.data, o.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                            stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  FMOE_REQUIRE(o[0] == 0, "%s: offsets[0] must be 0, got %d", kOp, o[0]);
  for (int g = 0; g < G; ++g)
    FMOE_REQUIRE(o[size_t(g) + 1] >= o[size_t(g)],
                 "%s: offsets must be non-decreasing, got offsets[%d] = %d after offsets[%d] = %d",
                 kOp, g + 1, o[size_t(g) + 1], g, o[size_t(g)]);
  FMOE_REQUIRE(o[size_t(G)] == M, "%s: offsets[%d] must be M = %lld (the rows of a), got %d", kOp,
               G, (long long)M, o[size_t(G)]);
}

}  // namespace

struct Nvfp4GroupedGemm::Impl {
  int G = 0, N = 0, K = 0;
  int KB = 0;        // 64-column k-blocks of the prepared B
  int NB = 0;        // 128-row tiles per group
  bool paired = false;  // prepared rows in adjacent-output pairs (grouped_gemm.hpp: N even)
  int device = 0;
  DeviceBuffer blocks;     // [G, NB, KB] prepared blocks
  DeviceBuffer row_scale;  // [G, NB * 128] b_global * 2^kProductShift
};

Nvfp4GroupedGemm::Nvfp4GroupedGemm(const TensorRef& b, const TensorRef& b_scale,
                                   const TensorRef& b_global, Stream stream_in)
    : impl_(std::make_unique<Impl>()) {
  using namespace detail;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_in);
  Impl& I = *impl_;
  check_dtype(kOp, "b", b, DType::e2m1x2);
  FMOE_REQUIRE(b.ndim == 3, "%s: b must be [G, N, K/2], got %s", kOp, b.describe().c_str());
  const int64_t G = b.shape[0], N = b.shape[1], K = 2 * b.shape[2];
  FMOE_REQUIRE(G >= 1 && G <= kGroupedMaxGroups, "%s: b holds %lld groups; between 1 and %d are "
               "supported", kOp, (long long)G, kGroupedMaxGroups);
  FMOE_REQUIRE(N >= 1 && N <= (1 << 20), "%s: N = %lld (b's second dimension) must be in [1, 2^20]",
               kOp, (long long)N);
  FMOE_REQUIRE(K >= 16 && K % 16 == 0 && K <= (1 << 20), "%s: K = %lld (twice b's last dimension) "
               "must be a positive multiple of 16 (the NVFP4 scale block), at most 2^20", kOp, (long long)K);
  check_on_device(kOp, "b", b);
  check_contiguous(kOp, "b", b);  // read byte by byte by the re-layout: no alignment needed
  check_dtype(kOp, "b_scale", b_scale, DType::e4m3);
  check_shape(kOp, "b_scale", b_scale, {G, N, K / 16});
  check_same_device(kOp, "b_scale", b_scale, b.device_index);
  check_contiguous(kOp, "b_scale", b_scale);
  check_dtype(kOp, "b_global", b_global, DType::f32);
  check_shape(kOp, "b_global", b_global, {G});
  check_same_device(kOp, "b_global", b_global, b.device_index);
  check_contiguous(kOp, "b_global", b_global);
  current_device_state(kOp, b.device_index);
  I.G = int(G);
  I.N = int(N);
  I.K = int(K);
  I.KB = int(cdiv(K, e2m1::kBlockK));
  I.NB = int(cdiv(N, 128));
  I.paired = N % 2 == 0;
  I.device = b.device_index;

  // The scales the decode refuses (e2m1_layout.hpp: finite, non-negative), found on the device.
  const int64_t n = b_scale.numel();
  DeviceBuffer first_bad = DeviceBuffer::from(std::vector<unsigned long long>{(unsigned long long)n}, stream);
  E2m1ScaleScanParams sp{static_cast<const uint8_t*>(b_scale.data), n,
                         first_bad.get<unsigned long long>(), false, nullptr, K / 16};
  launch_e2m1_scale_scan(sp, stream);
  unsigned long long bad = 0;
  FMOE_CUDA(cudaMemcpyAsync(&bad, first_bad.get(), sizeof(bad), cudaMemcpyDeviceToHost, stream));
  std::vector<float> global(static_cast<size_t>(G));
  FMOE_CUDA(cudaMemcpyAsync(global.data(), b_global.data, global.size() * sizeof(float),
                            cudaMemcpyDeviceToHost, stream));
  FMOE_CUDA(cudaStreamSynchronize(stream));
  if (int64_t(bad) < n) {
    uint8_t c = 0;
    FMOE_CUDA(cudaMemcpy(&c, static_cast<const uint8_t*>(b_scale.data) + bad, 1, cudaMemcpyDeviceToHost));
    const int64_t row = int64_t(bad) / (K / 16);
    FMOE_REQUIRE(false, "%s: b_scale holds %s block scale code 0x%02x at group %lld, row %lld, "
                 "column block %lld (NVFP4 block scales must be finite and non-negative)", kOp,
                 (c & 0x7F) == 0x7F ? "the NaN" : "a negative", c, (long long)(row / N),
                 (long long)(row % N), (long long)(int64_t(bad) % (K / 16)));
  }
  for (int64_t g = 0; g < G; ++g)
    FMOE_REQUIRE(std::isfinite(global[size_t(g)]), "%s: b_global[%lld] = %g must be finite", kOp,
                 (long long)g, double(global[size_t(g)]));

  // Prepared row pr of group g's tiles holds output paired_output(pr) (or pr), its factor the
  // group's global scale times 2^kProductShift (the decode's products carry 2^-kProductShift).
  const int rows = I.NB * 128;
  const float unit = std::ldexp(1.0f, e2m1::kProductShift);
  std::vector<E2m1RowRef> refs(size_t(G) * rows);
  std::vector<float> rs(size_t(G) * rows, 0.0f);
  for (int64_t g = 0; g < G; ++g)
    for (int pr = 0; pr < rows; ++pr) {
      const int out = I.paired ? paired_output(pr) : pr;
      if (out >= N) continue;
      refs[size_t(g * rows + pr)] = {g * N + out, 0, int32_t(K), 0, 0};
      rs[size_t(g * rows + pr)] = global[size_t(g)] * unit;
    }
  I.blocks = DeviceBuffer(size_t(G) * I.NB * I.KB * e2m1::kBlockBytes);
  const DeviceBuffer d_refs = DeviceBuffer::from(refs, stream);
  E2m1PrepareParams pp{I.blocks.get<uint8_t>(), G * I.NB, I.KB, d_refs.get<E2m1RowRef>(),
                       {E2m1Source{static_cast<const uint8_t*>(b.data),
                                   static_cast<const uint8_t*>(b_scale.data), nullptr, K},
                        E2m1Source{}},
                       false};
  launch_e2m1_prepare(pp, stream);
  I.row_scale = DeviceBuffer::from(rs, stream);
  FMOE_CUDA(cudaStreamSynchronize(stream));  // before the row table is freed
}

Nvfp4GroupedGemm::~Nvfp4GroupedGemm() = default;
Nvfp4GroupedGemm::Nvfp4GroupedGemm(Nvfp4GroupedGemm&&) noexcept = default;
Nvfp4GroupedGemm& Nvfp4GroupedGemm::operator=(Nvfp4GroupedGemm&&) noexcept = default;

int Nvfp4GroupedGemm::groups() const { return impl_->G; }
int Nvfp4GroupedGemm::n() const { return impl_->N; }
int Nvfp4GroupedGemm::k() const { return impl_->K; }
size_t Nvfp4GroupedGemm::prepared_bytes() const {
  return impl_->blocks.bytes() + impl_->row_scale.bytes();
}

size_t Nvfp4GroupedGemm::workspace_size(int max_rows) const {
  FMOE_REQUIRE(max_rows >= 0, "%s::workspace_size: max_rows must be >= 0, got %d", kOp, max_rows);
  return workspace_layout(max_rows, impl_->G, impl_->K, nullptr, nullptr);
}

void Nvfp4GroupedGemm::run(const Nvfp4GroupedGemmArgs& a, void* workspace, size_t workspace_bytes,
                           Stream stream_in) const {
  using namespace detail;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_in);
  const Impl& I = *impl_;
  const int G = I.G, N = I.N, K = I.K;
  check_dtype(kOp, "a", a.a, DType::e2m1x2);
  FMOE_REQUIRE(a.a.ndim == 2 && a.a.shape[1] == K / 2, "%s: a must be [M, %d] (K = %d values packed "
               "two per byte), got %s", kOp, K / 2, K, a.a.describe().c_str());
  const int64_t M = a.a.shape[0];
  FMOE_REQUIRE(M <= INT_MAX / 2, "%s: a has %lld rows; at most %d are supported", kOp,
               (long long)M, INT_MAX / 2);
  check_on_device(kOp, "a", a.a);
  check_same_device(kOp, "a", a.a, I.device);
  check_contiguous(kOp, "a", a.a);
  check_aligned(kOp, "a", a.a, 8);  // the decode reads one 16-value block as 8 bytes
  check_dtype(kOp, "a_scale", a.a_scale, DType::e4m3);
  check_shape(kOp, "a_scale", a.a_scale, {M, K / 16});
  check_same_device(kOp, "a_scale", a.a_scale, I.device);
  check_contiguous(kOp, "a_scale", a.a_scale);
  if (a.a_global.data) {
    check_dtype(kOp, "a_global", a.a_global, DType::f32);
    check_shape(kOp, "a_global", a.a_global, {G});
    check_same_device(kOp, "a_global", a.a_global, I.device);
    check_contiguous(kOp, "a_global", a.a_global);
  }
  check_dtype(kOp, "offsets", a.offsets, DType::i32);
  check_shape(kOp, "offsets", a.offsets, {G + 1});
  check_same_device(kOp, "offsets", a.offsets, I.device);
  check_contiguous(kOp, "offsets", a.offsets);
  FMOE_REQUIRE(a.c.dtype == DType::bf16 || a.c.dtype == DType::f16 || a.c.dtype == DType::f32,
               "%s: c must be bf16, f16 or f32, got %s", kOp, dtype_name(a.c.dtype));
  check_shape(kOp, "c", a.c, {M, N});
  check_same_device(kOp, "c", a.c, I.device);
  check_contiguous(kOp, "c", a.c);
  // A thread stores two adjacent outputs at once when N is even (paired rows).
  check_aligned(kOp, "c", a.c, int(dtype_bytes(a.c.dtype)) * (I.paired ? 2 : 1));
  const DeviceState& ds = current_device_state(kOp, I.device);
  const size_t need = workspace_layout(M, G, K, nullptr, nullptr);
  FMOE_REQUIRE(workspace != nullptr, "%s: workspace is null", kOp);
  FMOE_REQUIRE(reinterpret_cast<uintptr_t>(workspace) % kAlign == 0,
               "%s: workspace must be %zu-byte aligned, got %p", kOp, kAlign, workspace);
  FMOE_REQUIRE(workspace_bytes >= need, "%s: the workspace holds %zu bytes, "
               "%zu are needed for M = %lld rows (workspace_size)", kOp, workspace_bytes, need,
               (long long)M);
  Workspace ws;
  workspace_layout(M, G, K, workspace, &ws);
  if (M == 0) {  // c is empty; the status word still describes this call
    FMOE_CUDA(cudaMemsetAsync(ws.status, 0, sizeof(int32_t), stream));
    return;
  }
  if (a.validate_offsets) check_offsets(a.offsets, G, M, stream);

  // ---- config: the layer's down-GEMM family (TMA rows, combine) with e2m1 weights ----
  const GemmFamily fam{GemmWeights::e2m1, GemmRows::tma, GemmEpilogue::combine};
  std::string reason;
  const std::string& forced = knobs().force_config;
  const int bt = select_block_t(int(M), 1, G, forced, {fam}, &reason);
  int waves = select_waves(fam, bt, I.NB, K, forced, &reason);
  // Expected token tiles with evenly filled groups (the offsets stay on the device).
  const double token_tiles = G * std::max(1.0, std::ceil(double(M) / G / bt));
  // 256-row tiles halve the tile count: where that does not also cut the rounds of tiles the
  // SMs run, the last round is as long as two and the GEMM loses (measured on H100, contest
  // shapes A and C: 182 -> 153 us and 57 -> 35 us with one wave; shape B 88 -> 94 us).
  if (waves == 2 && forced.empty()) {
    auto rounds = [&](double tiles) { return std::ceil(tiles / ds.sms); };
    if (2 * rounds(token_tiles * I.NB / 2) >= rounds(token_tiles * I.NB)) {
      waves = 1;
      reason += "; one wave: 256-row tiles would not cut the rounds of tiles on the SMs";
    }
  }
  const double tiles = token_tiles * I.NB / waves;
  const int ctas = select_ctas(fam, bt, waves, GemmOperands::weights_m, tiles, ds.sms, forced, &reason);
  const GemmConfigId id = gemm_config_of(fam.weights, fam.rows, fam.epilogue, bt, waves,
                                         GemmOperands::weights_m, ctas);
  if (knobs().print_config)
    std::fprintf(stderr, "[fusedmoe] %s M=%lld G=%d N=%d K=%d: %s (%s)\n", kOp, (long long)M, G, N,
                 K, gemm_config_info(id).name, reason.c_str());

  GroupedPrepParams pp{};
  pp.a = static_cast<const uint8_t*>(a.a.data);
  pp.a_scale = static_cast<const uint8_t*>(a.a_scale.data);
  pp.a_global = static_cast<const float*>(a.a_global.data);
  pp.offsets = static_cast<const int32_t*>(a.offsets.data);
  pp.G = G;
  pp.M = int(M);
  pp.K = K;
  pp.block_t = bt;
  pp.a_bf16 = ws.a_bf16;
  pp.counts = ws.counts;
  pp.tile_offsets = ws.tile_offsets;
  pp.route_offsets = ws.route_offsets;
  pp.row_weight = ws.row_weight;
  pp.status = ws.status;
  pp.c = static_cast<uint8_t*>(a.c.data);
  pp.c_row_bytes = int64_t(N) * int64_t(dtype_bytes(a.c.dtype));

  GroupedGemmParams g{};
  g.narrow_tails = knobs().narrow_tails;
  g.w_blocks = I.blocks.get<uint8_t>();
  g.row_scale = I.row_scale.get<float>();
  g.n_rows = I.NB * 128;
  g.a_desc = make_tma_2d("Nvfp4GroupedGemm: a in bf16", ws.a_bf16, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                         uint64_t(M), uint64_t(K), uint64_t(K) * 2, uint32_t(bt), 64,
                         CU_TENSOR_MAP_SWIZZLE_128B);
  g.counts = ws.counts;
  g.tile_offsets = ws.tile_offsets;
  g.route_offsets = ws.route_offsets;
  g.sorted_route = nullptr;  // route r is row r
  g.topk_weights = ws.row_weight;
  g.T = int(M);
  g.E = G;
  g.k = 1;
  g.k_routed = 1;
  g.R = int(M);
  g.N = N;
  g.K = K;
  g.KB = I.KB;
  g.NB = I.NB;
  g.deterministic = 1;
  g.paired_rows = I.paired ? 1 : 0;
  g.split = 1;
  if (a.c.dtype == DType::f32) {
    g.out = static_cast<float*>(a.c.data);
  } else {
    g.out_type = a.c.dtype == DType::bf16 ? GemmOut::bf16 : GemmOut::f16;
    g.out_lowp = a.c.data;
  }
  launch_grouped_prep(pp, ds.sms, stream);
  launch_grouped_gemm(id, g, ds.sms, stream);
}

bool Nvfp4GroupedGemm::offsets_clamped(const void* workspace, Stream stream) const {
  FMOE_REQUIRE(workspace, "%s::offsets_clamped: workspace is null", kOp);
  int32_t status = 0;
  FMOE_CUDA(cudaMemcpyAsync(&status, workspace, sizeof(status), cudaMemcpyDeviceToHost,
                            reinterpret_cast<cudaStream_t>(stream)));
  FMOE_CUDA(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)));
  return status != 0;
}

}  // namespace fusedmoe
