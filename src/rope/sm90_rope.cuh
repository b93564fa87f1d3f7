// RoPE on sm_90, in place: the last R = rope_dim values of every head of q (and k) rotated by
// their token's position p, pair i = (i, i + R/2) (neox) or (2i, 2i + 1) (gptj):
//   x' = x cos[p, i] - y sin[p, i],   y' = y cos[p, i] + x sin[p, i]   (inverse: -sin)
// fp32 math, one rounding to the storage type. q [T, Hq, D], k [T, Hk, D]: any token and head
// strides, last dim contiguous; cache [max_position, R] f32 (cos | sin). Only rope parts are read
// or written; a token whose position is outside [0, max_position) is not written at all.
// Design: a work item is two vectors of one head holding the x and the y of the same V pairs
// (neox: at pair V*j and R/2 + V*j; gptj: two adjacent vectors of V/2 pairs each), so in both
// styles an item uses cos/sin [V*j, V*j + V). Each thread issues the loads of its 2 items first;
// the CTA then stages its tokens' cos/sin rows in shared memory (each row read once per CTA)
// while those loads fly; a barrier, then rotate and store. Under PDL the staging comes first,
// overlapping the previous kernel, and q / k are read after griddepcontrol.wait.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/cuda_check.hpp"
#include "common/launch.hpp"
#include "rope/rope_launch.hpp"

namespace fusedmoe::detail {

namespace rope {

// Storage types: raw bits in registers, converted to and from fp32 one element at a time.
template <DType kT>
struct Elem;
template <>
struct Elem<DType::bf16> {
  using Raw = uint16_t;
  static __device__ __forceinline__ float to_float(Raw r) { return __uint_as_float(uint32_t(r) << 16); }
  static __device__ __forceinline__ Raw from_float(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }
};
template <>
struct Elem<DType::f16> {
  using Raw = uint16_t;
  static __device__ __forceinline__ float to_float(Raw r) { return __half2float(__ushort_as_half(r)); }
  static __device__ __forceinline__ Raw from_float(float v) { return __half_as_ushort(__float2half_rn(v)); }
};
template <>
struct Elem<DType::f32> {
  using Raw = float;
  static __device__ __forceinline__ float to_float(Raw r) { return r; }
  static __device__ __forceinline__ Raw from_float(float v) { return v; }
};

// One load or store of kBytes: the native type of that width, so it compiles to one LDG/STG.
template <int kBytes>
struct VecBits;
template <> struct VecBits<16> { using T = uint4; };
template <> struct VecBits<8> { using T = uint2; };
template <> struct VecBits<4> { using T = uint32_t; };
template <> struct VecBits<2> { using T = uint16_t; };

}  // namespace rope

template <DType kDType, int kVecBytes_>
struct RopeConfig {
  using E = rope::Elem<kDType>;
  using Raw = typename E::Raw;
  static constexpr int kVecBytes = kVecBytes_;
  static constexpr int V = kVecBytes / int(sizeof(Raw));  // elements (= pairs of an item) per vector
  static constexpr int kItems = kRopeItemsPerThread;
  static constexpr int kMaxThreads = kRopeMaxThreads;
  // 4 CTAs of 256 per SM (<= 64 registers; the 16-byte kernels use 56-61): 1024 threads x 2
  // items x 32 bytes = 64 KB of loads in flight per SM, ~2.5x what 3.35 TB/s needs at ~1 us per
  // CTA (two dependent latencies: position, then cache row). Without the bound ptxas spills
  // 8 bytes in the f16 2-byte kernel (CUDA 13.0) although it has registers to spare.
  static constexpr int kMinBlocks = 4;
  static_assert(kVecBytes % int(sizeof(Raw)) == 0 && V >= 1, "a vector holds whole elements");
  static_assert(V <= 8, "at most 8 pairs per item: the cos/sin of an item stay in registers");
};

namespace rope {

template <class Cfg>
union Vec {
  typename VecBits<Cfg::kVecBytes>::T bits;
  typename Cfg::Raw e[Cfg::V];
};

// One work item of a thread: where its two vectors are, which token of the CTA and which pairs.
template <class Cfg>
struct Item {
  typename Cfg::Raw* base;  // the head's rope part
  int off0, off1;           // element offsets of the x and the y vector
  int tok;                  // token within the CTA's tile
  int pair0;                // first pair index: cos/sin columns [pair0, pair0 + V)
  bool live;
  Vec<Cfg> x, y;
};

__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

__device__ __forceinline__ int64_t load_position(const RopeParams& p, int t) {
  const int64_t i = int64_t(t) * p.positions_stride;
  return p.positions_i64 ? static_cast<const int64_t*>(p.positions)[i]
                         : int64_t(static_cast<const int32_t*>(p.positions)[i]);
}

// Slot `flat` of the CTA's tile (tokens_per_cta x items_per_cta) -> the item's head and pairs.
template <class Cfg>
__device__ __forceinline__ void locate(Item<Cfg>& it, const RopeParams& p, int flat, int t0, int n_tok,
                                       int item0) {
  const int tok = flat / p.items_per_cta;
  const int item = item0 + (flat - tok * p.items_per_cta);
  it.live = tok < n_tok && item < p.items_per_token;
  const int head = item / p.items_per_head;
  const int j = item - head * p.items_per_head;
  const int64_t t = t0 + tok;
  using Raw = typename Cfg::Raw;
  it.base = head < p.num_q_heads
                ? static_cast<Raw*>(p.q) + t * p.q_tok_stride + int64_t(head) * p.q_head_stride
                : static_cast<Raw*>(p.k) + t * p.k_tok_stride + int64_t(head - p.num_q_heads) * p.k_head_stride;
  it.tok = tok;
  it.pair0 = j * Cfg::V;
  it.off0 = p.neox ? it.pair0 : 2 * it.pair0;
  it.off1 = p.neox ? p.rope_dim / 2 + it.pair0 : 2 * it.pair0 + Cfg::V;
}

// Plain loads and stores: the data is read once, so no reuse to protect in L1, and the rotated
// q / k stay in L2 for the attention kernel that reads them next (no streaming / evict-first hint).
template <class Cfg>
__device__ __forceinline__ void load_item(Item<Cfg>& it) {
  using Bits = typename VecBits<Cfg::kVecBytes>::T;
  it.x.bits = *reinterpret_cast<const Bits*>(it.base + it.off0);
  it.y.bits = *reinterpret_cast<const Bits*>(it.base + it.off1);
}

template <class Cfg>
__device__ __forceinline__ void store_item(const Item<Cfg>& it) {
  using Bits = typename VecBits<Cfg::kVecBytes>::T;
  *reinterpret_cast<Bits*>(it.base + it.off0) = it.x.bits;
  *reinterpret_cast<Bits*>(it.base + it.off1) = it.y.bits;
}

// V consecutive floats of shared memory, in 16- or 8-byte reads where the offsets allow (the host
// guarantees R % (2 V) == 0, so row and column offsets are multiples of V floats).
template <int V>
__device__ __forceinline__ void load_floats(const float* s, float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int j = 0; j < V; j += 4) {
      const float4 f = *reinterpret_cast<const float4*>(s + j);
      out[j] = f.x, out[j + 1] = f.y, out[j + 2] = f.z, out[j + 3] = f.w;
    }
  } else if constexpr (V == 2) {
    const float2 f = *reinterpret_cast<const float2*>(s);
    out[0] = f.x, out[1] = f.y;
  } else {
#pragma unroll
    for (int j = 0; j < V; ++j) out[j] = s[j];
  }
}

__device__ __forceinline__ void rotate(float& x, float& y, float c, float s) {
  const float xr = fmaf(x, c, -y * s);
  const float yr = fmaf(y, c, x * s);
  x = xr;
  y = yr;
}

// Rotates an item's V pairs with the cos / sin row `cs` (columns [pair0, pair0 + V) of cos, then
// the same of sin at + R/2; sin already negated for the inverse).
template <class Cfg>
__device__ __forceinline__ void rotate_item(Item<Cfg>& it, const float* cs_row, int half, bool neox) {
  constexpr int V = Cfg::V;
  float c[V], s[V], a[V], b[V];
  load_floats<V>(cs_row + it.pair0, c);
  load_floats<V>(cs_row + half + it.pair0, s);
#pragma unroll
  for (int j = 0; j < V; ++j) {
    a[j] = Cfg::E::to_float(it.x.e[j]);
    b[j] = Cfg::E::to_float(it.y.e[j]);
  }
  if (neox || V == 1) {  // pair j: (a[j], b[j]) (gptj with V = 1: the x and y vectors are 2i, 2i+1)
#pragma unroll
    for (int j = 0; j < V; ++j) rotate(a[j], b[j], c[j], s[j]);
  } else {  // gptj: pairs (2m, 2m+1) inside each vector; a holds pairs [0, V/2), b [V/2, V)
#pragma unroll
    for (int m = 0; m < V / 2; ++m) {
      rotate(a[2 * m], a[2 * m + 1], c[m], s[m]);
      rotate(b[2 * m], b[2 * m + 1], c[V / 2 + m], s[V / 2 + m]);
    }
  }
#pragma unroll
  for (int j = 0; j < V; ++j) {
    it.x.e[j] = Cfg::E::from_float(a[j]);
    it.y.e[j] = Cfg::E::from_float(b[j]);
  }
}

}  // namespace rope

// ================================================================================================
// The kernel. Grid: x = tiles of tokens_per_cta tokens, y = ranges of items_per_cta items of each
// token. Shared memory: (tokens_per_cta, R) f32 cos | sin rows, then (tokens_per_cta) i64 rows.
// ================================================================================================
template <class Cfg>
__global__ void __launch_bounds__(Cfg::kMaxThreads, Cfg::kMinBlocks) rope_kernel(const __grid_constant__ RopeParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace rope;
  extern __shared__ __align__(16) float smem[];
  const int R = p.rope_dim, half = R / 2;
  float* s_rows = smem;                                                           // (tokens_per_cta, R)
  int64_t* s_row_idx = reinterpret_cast<int64_t*>(smem + p.tokens_per_cta * R);  // (tokens_per_cta)
  const int tid = threadIdx.x;
  const int t0 = int(blockIdx.x) * p.tokens_per_cta;
  const int n_tok = min(p.tokens_per_cta, p.T - t0);
  const int item0 = int(blockIdx.y) * p.items_per_cta;

  // Under PDL the next kernel may start now: its CTAs stage their cos/sin rows while this grid
  // drains, and wait (griddepcontrol.wait) for it before they touch q or k.
  if (p.pdl) griddep_launch_dependents();

  // 1. Every item's loads first: they are in flight while the positions and cache rows arrive.
  //    Under PDL, q / k may be the previous kernel's output: they are loaded after the wait.
  Item<Cfg> items[Cfg::kItems];
#pragma unroll
  for (int s = 0; s < Cfg::kItems; ++s) {
    locate(items[s], p, tid + s * int(blockDim.x), t0, n_tok, item0);
    if (items[s].live && !p.pdl) load_item(items[s]);
  }

  // 2. The positions of the CTA's tokens; a bad one is marked -1: that token's cache row is never
  //    read and its heads never written. (A CTA of tiny heads may have more tokens than threads.)
  for (int r = tid; r < n_tok; r += int(blockDim.x)) {
    const int64_t pos = load_position(p, t0 + r);
    s_row_idx[r] = pos >= 0 && pos < p.max_position ? pos : -1;
  }
  __syncthreads();  // row indices visible to the threads that stage the rows

  // 3. The cache rows, once per CTA: consecutive threads read consecutive floats of a row (each
  //    row is R * 4 contiguous bytes: whole sectors). sin is negated here for the inverse.
  for (int i = tid; i < n_tok * R; i += int(blockDim.x)) {
    const int r = i / R, c = i - r * R;
    const int64_t row = s_row_idx[r];
    if (row >= 0) {
      const float v = p.cache[row * R + c];
      s_rows[i] = (p.inverse && c >= half) ? -v : v;
    }
  }
  __syncthreads();  // rows complete before any thread rotates with them

  if (p.pdl) {
    griddep_wait();  // the previous kernel's writes (q, k, the counter) are visible from here
#pragma unroll
    for (int s = 0; s < Cfg::kItems; ++s)
      if (items[s].live) load_item(items[s]);
  }
  // Each bad position counted once, by the CTAs of the first item range.
  if (blockIdx.y == 0 && p.bad_position_count)
    for (int r = tid; r < n_tok; r += int(blockDim.x))
      if (s_row_idx[r] < 0) atomicAdd(p.bad_position_count, 1);

  // 4. Rotate and store (nothing for a token with a bad position).
#pragma unroll
  for (int s = 0; s < Cfg::kItems; ++s) {
    Item<Cfg>& it = items[s];
    if (!it.live || s_row_idx[it.tok] < 0) continue;
    rotate_item(it, s_rows + it.tok * R, half, p.neox);
    store_item(it);
  }
#else
  __trap();  // built for sm_90a only
#endif
}

// ================================================================================================
// Launcher: the caller's stream, launch checked.
// ================================================================================================
template <class Cfg>
void launch_rope_cfg(const RopeParams& p, const RopeGrid& g, cudaStream_t stream) {
  const dim3 grid(unsigned(g.blocks_x), unsigned(g.blocks_y));
  // At most 16 KB + 8 B per token of shared memory (kRopeMaxStagedFloats): under the 48 KB that
  // needs no opt-in.
  launch_kernel(rope_kernel<Cfg>, grid, dim3(unsigned(g.threads)), g.smem_bytes, stream, p.pdl, p);
  FMOE_CHECK_LAUNCH("rope_kernel", stream);
}

}  // namespace fusedmoe::detail
