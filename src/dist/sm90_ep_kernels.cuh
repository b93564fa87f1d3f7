// The expert-parallel plan on the device (contract: ep_kernels.hpp; the host twin, step for step:
// ep_plan.cpp). Every count is a sum of per-thread counts and every position an exclusive scan in
// token order (the dispatch) or source order (the receive), so the results do not depend on thread
// timing and equal the host plan bit for bit. Design: small memory-bound kernels, a thread per
// token, a CTA per destination for the scan (cub::BlockScan over tiles of tokens with a running
// prefix), a warp per row for the byte moves (16-byte vectors), a thread per 8 output columns for
// the combine (the layout of the deterministic finalize, src/finalize/).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include "dist/ep_kernels.hpp"
#include "route/sm90_quantize_row.cuh"
#include "route/sm90_shared_gate.cuh"
#include "schedule/sm90_route_drop.cuh"

namespace fusedmoe::detail {

struct EpKernelConfig {
  static constexpr int kOwnerThreads = 256;   // thread per token
  static constexpr int kScanThreads = 256;    // tokens per scan tile, one CTA per destination
  static constexpr int kRowThreads = 128;     // 4 warps, a warp per row
  static constexpr int kRowsPerCta = kRowThreads / 32;
  static constexpr int kMoveThreads = 128;    // a CTA per returned row (rows of up to 7168 f32)
  static constexpr int kCombineThreads = 256;
  static constexpr int kCombineCols = 8;      // per thread: two 16-byte f32 loads, one bf16 store
  static_assert(kRowThreads % 32 == 0, "a row is a warp");
};

// ExpertPartition::owner and ::first (ep_plan.hpp), the same integer formulas.
__device__ __forceinline__ int ep_owner(const EpPartitionArgs& p, int expert) {
  const int split = p.extra * (p.base + 1);
  return expert < split ? expert / (p.base + 1) : p.extra + (expert - split) / p.base;
}
__device__ __forceinline__ int ep_first(const EpPartitionArgs& p, int rank) {
  return rank * p.base + min(rank, p.extra);
}

// `bytes` (a multiple of 16, both ends 16-byte aligned) from src to dst by one warp.
__device__ __forceinline__ void warp_copy16(uint8_t* dst, const uint8_t* src, int64_t bytes, int lane) {
  for (int64_t o = int64_t(lane) * 16; o < bytes; o += 32 * 16)
    *reinterpret_cast<uint4*>(dst + o) = *reinterpret_cast<const uint4*>(src + o);
}
__device__ __forceinline__ void warp_zero16(uint8_t* dst, int64_t bytes, int lane) {
  for (int64_t o = int64_t(lane) * 16; o < bytes; o += 32 * 16)
    *reinterpret_cast<uint4*>(dst + o) = make_uint4(0, 0, 0, 0);
}

// ---- dispatch, step 1 (plan_dispatch step 1): per token, the owner of each kept route --------
__global__ void __launch_bounds__(EpKernelConfig::kOwnerThreads)
ep_route_owner_kernel(const __grid_constant__ EpDispatchParams p) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.T) return;
  const int R = p.part.num_ranks;
  for (int d = 0; d < R; ++d) p.goes_to[int64_t(d) * p.T + t] = 0;
  unsigned long long dropped = 0;
  for (int j = 0; j < p.k; ++j) {
    const int64_t route = int64_t(t) * p.k + j;
    p.route_row[route] = -1;  // the pack overwrites it for routes whose row is sent
    if (route_dropped(p.topk_ids, route, p.k, p.part.num_experts)) {
      p.route_dest[route] = -1;
      ++dropped;
      continue;
    }
    const int d = ep_owner(p.part, p.topk_ids[route]);
    p.route_dest[route] = d;
    p.goes_to[int64_t(d) * p.T + t] = 1;
  }
  if (dropped) atomicAdd(&p.counters->dropped_routes, dropped);
}

// ---- dispatch, steps 2 and 3: per destination, rows in token order (an exclusive scan) -------
__global__ void __launch_bounds__(EpKernelConfig::kScanThreads)
ep_dispatch_scan_kernel(const __grid_constant__ EpDispatchParams p) {
  using Scan = cub::BlockScan<int32_t, EpKernelConfig::kScanThreads>;
  __shared__ typename Scan::TempStorage s_scan;
  const int d = blockIdx.x, R = p.part.num_ranks;
  int32_t running = 0;  // rows wanted by tokens of earlier tiles (the same in every thread)
  unsigned long long overflow_rows = 0, overflow_routes = 0;
  for (int t0 = 0; t0 < p.T; t0 += EpKernelConfig::kScanThreads) {
    const int t = t0 + int(threadIdx.x);
    const int32_t goes = t < p.T ? p.goes_to[int64_t(d) * p.T + t] : 0;
    int32_t i = 0, tile_total = 0;
    Scan(s_scan).ExclusiveSum(goes, i, tile_total);
    i += running;
    if (t < p.T) {
      int32_t row = -1;
      if (goes && i < p.cap) {
        row = i;
        p.row_token[int64_t(d) * p.cap + i] = t;
      } else if (goes) {  // past the chunk: dropped with its routes, nothing written
        ++overflow_rows;
        for (int j = 0; j < p.k; ++j) overflow_routes += p.route_dest[int64_t(t) * p.k + j] == d;
      }
      p.token_row[int64_t(t) * R + d] = row;
    }
    running += tile_total;
    __syncthreads();  // s_scan is reused by the next tile's scan
  }
  if (overflow_rows) {
    atomicAdd(&p.counters->overflow_rows, overflow_rows);
    atomicAdd(&p.counters->overflow_routes, overflow_routes);
  }
  if (threadIdx.x == 0) p.send_counts[d] = min(running, p.cap);
}

// ---- dispatch, the pack: a warp per (token, destination) row below cap ------------------------
__global__ void __launch_bounds__(EpKernelConfig::kRowThreads)
ep_dispatch_pack_kernel(const __grid_constant__ EpDispatchParams p) {
  const int lane = threadIdx.x % 32, R = p.part.num_ranks;
  // 32-bit: the launcher checks T * R < 2^31 (a 64-bit division is a slow call that spills).
  const int pair = int(blockIdx.x) * EpKernelConfig::kRowsPerCta + int(threadIdx.x) / 32;
  if (pair >= p.T * R) return;
  const int t = pair / R, d = pair % R;
  const int32_t i = p.token_row[pair];  // [T, R]: pair = t * R + d
  if (i < 0) return;
  const int64_t slot = int64_t(d) * p.cap + i;
  uint8_t* row = p.send + slot * p.row.row_bytes;
  if (p.fp8_rows)  // one warp quantizes the row it sends (at most min(k, R) times per token)
    quantize_row<false>(reinterpret_cast<const __nv_bfloat16*>(p.x + int64_t(t) * p.x_ld_bytes), p.H,
                        1.0f, false, row, reinterpret_cast<float*>(row + p.H), 0, 1, lane);
  else
    warp_copy16(row, p.x + int64_t(t) * p.x_ld_bytes, p.row.payload_bytes, lane);
  int32_t* ids = reinterpret_cast<int32_t*>(row + p.row.ids_offset);
  float* weights = reinterpret_cast<float*>(row + p.row.weights_offset);
  const int first = ep_first(p.part, d);
  for (int j = lane; j < p.k; j += 32) {  // the slots in choice order
    const int64_t route = int64_t(t) * p.k + j;
    const bool here = p.route_dest[route] == d;
    ids[j] = here ? p.topk_ids[route] - first : -1;
    weights[j] = here ? p.topk_weights[route] : 0.0f;
    if (here) p.route_row[route] = int32_t(slot);
  }
  // The row's tail padding, so every byte a chunk sends is written.
  const int64_t used = p.row.weights_offset + 4 * int64_t(p.k);
  for (int64_t o = used + lane; o < p.row.row_bytes; o += 32) row[o] = 0;
}

// ---- receive (plan_receive): a warp per compact row, source-major -----------------------------
__global__ void __launch_bounds__(EpKernelConfig::kRowThreads)
ep_receive_kernel(const __grid_constant__ EpReceiveParams p) {
  const int lane = threadIdx.x % 32, R = p.part.num_ranks, k = p.k;
  const int64_t r = int64_t(blockIdx.x) * EpKernelConfig::kRowsPerCta + threadIdx.x / 32;
  if (r == 0 && lane == 0) {  // one thread writes the offsets and counts the clamped values
    int32_t o = 0;
    unsigned long long clamped = 0;
    for (int s = 0; s < R; ++s) {
      p.recv_offsets[s] = o;
      const int32_t c = min(max(p.recv_counts[s], 0), p.cap);
      clamped += c != p.recv_counts[s];
      o += c;
    }
    p.recv_offsets[R] = o;
    if (clamped) atomicAdd(&p.counters->recv_clamped, clamped);
  }
  if (r >= int64_t(R) * p.cap) return;  // (the grid has at least one warp, for the offsets)
  const int E_local = p.part.base + (p.dest_rank < p.part.extra ? 1 : 0);
  // The exclusive scan of the clamped counts, walked until the source that holds row r (the
  // counts come over the wire: a value outside [0, cap] is clamped, so no chunk is over-read).
  int32_t offset = 0, source = -1;
  for (int s = 0; s < R; ++s) {
    const int32_t c = min(max(p.recv_counts[s], 0), p.cap);
    if (source < 0 && r < offset + c) source = s;
    if (source < 0) offset += c;
  }
  uint8_t* x = p.x + r * p.x_ld_bytes;
  int32_t* out_ids = p.local_ids + r * k;
  float* out_weights = p.local_weights + r * k;
  if (source < 0) {  // past the rows that arrived: routes the local layer drops, zero activations
    if (lane == 0) p.row_slot[r] = -1;
    warp_zero16(x, p.fp8_rows ? int64_t(p.H) : p.row.payload_bytes, lane);
    if (p.fp8_rows)
      for (int b = lane; b < (p.H + 127) / 128; b += 32) p.x_scales[r * p.x_scales_ld + b] = 0.0f;
    for (int j = lane; j < k; j += 32) {
      out_ids[j] = -1;
      out_weights[j] = 0.0f;
    }
    return;
  }
  const int64_t slot = int64_t(source) * p.cap + (r - offset);
  if (lane == 0) p.row_slot[r] = int32_t(slot);
  const uint8_t* row = p.recv + slot * p.row.row_bytes;
  if (p.fp8_rows) {  // codes to x, scales to x_scales
    warp_copy16(x, row, p.H, lane);
    const float* scales = reinterpret_cast<const float*>(row + p.H);
    for (int b = lane; b < (p.H + 127) / 128; b += 32) p.x_scales[r * p.x_scales_ld + b] = scales[b];
  } else {
    warp_copy16(x, row, p.row.payload_bytes, lane);
  }
  const int32_t* ids = reinterpret_cast<const int32_t*>(row + p.row.ids_offset);
  const float* weights = reinterpret_cast<const float*>(row + p.row.weights_offset);
  unsigned dropped = 0, routes = 0;
  for (int j = lane; j < k; j += 32) {
    const int32_t id = ids[j];
    bool keep = false;
    if (id != -1) {  // -1: the choice went to another rank
      keep = !route_dropped(ids, j, k, E_local);  // a bad or repeated slot: the layer's rule
      dropped += !keep;
    }
    out_ids[j] = keep ? id : -1;
    out_weights[j] = keep ? weights[j] : 0.0f;
    if (keep) {
      atomicAdd(&p.expert_counts[id], 1);
      ++routes;
    }
  }
  dropped = __reduce_add_sync(0xffffffffu, dropped);
  routes = __reduce_add_sync(0xffffffffu, routes);
  if (lane == 0 && dropped) atomicAdd(&p.counters->recv_dropped, (unsigned long long)dropped);
  if (lane == 0 && routes) atomicAdd(&p.counters->recv_routes, (unsigned long long)routes);
}

// ---- return: the local layer's output to the row's slot, a CTA per (row, choice) or row ------
__global__ void __launch_bounds__(EpKernelConfig::kMoveThreads)
ep_return_kernel(const __grid_constant__ EpReturnParams p) {
  const int per_row = p.choice_order ? p.k : 1;
  const int64_t r = blockIdx.x / unsigned(per_row);  // R * cap * k < 2^31 (ep_plan's int32 rule)
  const int j = int(blockIdx.x % unsigned(per_row));
  if (r >= p.recv_offsets[p.R]) return;  // past the rows that arrived: nothing goes back
  const int64_t slot = p.row_slot[r];
  if (p.choice_order) {
    if (p.local_ids[r * p.k + j] < 0) return;  // not a route of this rank: no row was computed
    const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(p.local) +
                                                        (r * p.k + j) * p.H);
    float4* dst = reinterpret_cast<float4*>(static_cast<float*>(p.ret) + (slot * p.k + j) * p.H);
    for (int c = threadIdx.x; c < p.H / 4; c += blockDim.x) dst[c] = src[c];
  } else {
    const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p.local) +
                                                      r * p.ld_local);
    uint4* dst = reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.ret) + slot * p.H);
    for (int c = threadIdx.x; c < p.H / 8; c += blockDim.x) dst[c] = src[c];
  }
}

// ---- combine on the source: rank order or choice order, fp32 from 0.0f, one bf16 rounding ----
__global__ void __launch_bounds__(EpKernelConfig::kCombineThreads)
ep_combine_kernel(const __grid_constant__ EpCombineParams p) {
  constexpr int kCols = EpKernelConfig::kCombineCols;
  const int groups_per_row = p.H / kCols;
  // 32-bit: the launcher checks T * H / 8 < 2^31.
  const int g = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (g >= p.T * groups_per_row) return;
  const int t = g / groups_per_row, c = g % groups_per_row * kCols;
  float v[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) v[i] = 0.0f;
  if (p.choice_order) {
    // The deterministic finalize's sum: the route rows of t in j order, skipping the routes that
    // carry nothing (dropped, or their row overflowed).
    for (int j = 0; j < p.k; ++j) {
      const int32_t slot = p.route_row[int64_t(t) * p.k + j];
      if (slot < 0) continue;
      const float4* src = reinterpret_cast<const float4*>(
          static_cast<const float*>(p.ret) + (int64_t(slot) * p.k + j) * p.H + c);
      const float4 a = __ldcs(src), b = __ldcs(src + 1);  // read once
      v[0] += a.x; v[1] += a.y; v[2] += a.z; v[3] += a.w;
      v[4] += b.x; v[5] += b.y; v[6] += b.z; v[7] += b.w;
    }
  } else {
    for (int d = 0; d < p.R; ++d) {
      const int32_t i = p.token_row[int64_t(t) * p.R + d];
      if (i < 0) continue;
      const uint4 raw = __ldcs(reinterpret_cast<const uint4*>(
          static_cast<const __nv_bfloat16*>(p.ret) + (int64_t(d) * p.cap + i) * p.H + c));
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = __bfloat1622float2(h[q]);
        v[2 * q] += f.x;
        v[2 * q + 1] += f.y;
      }
    }
  }
  if (p.shared) {  // last, as MoeLayer's shared column follows the top_k routes
    const float4* src = reinterpret_cast<const float4*>(p.shared + int64_t(t) * p.H + c);
    const float4 a = __ldcs(src), b = __ldcs(src + 1);
    v[0] += a.x; v[1] += a.y; v[2] += a.z; v[3] += a.w;
    v[4] += b.x; v[5] += b.y; v[6] += b.z; v[7] += b.w;
  }
  uint4 out;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int q = 0; q < 4; ++q) h[q] = __floats2bfloat162_rn(v[2 * q], v[2 * q + 1]);
  *reinterpret_cast<uint4*>(p.y + int64_t(t) * p.ldy + c) = out;
}

// ---- the shared expert's routing: a warp per token ----------------------------------------------
__global__ void __launch_bounds__(EpKernelConfig::kRowThreads)
ep_shared_routing_kernel(const __grid_constant__ EpSharedRoutingParams p) {
  const int lane = threadIdx.x % 32;
  const int t = int(blockIdx.x) * EpKernelConfig::kRowsPerCta + int(threadIdx.x / 32);
  if (t >= p.T) return;
  const float w = p.gate ? shared_gate_weight(p.x + int64_t(t) * p.ldx, p.gate, p.H, lane) : 1.0f;
  if (lane == 0) {
    p.ids[t] = 0;
    p.weights[t] = w;
  }
}

}  // namespace fusedmoe::detail
