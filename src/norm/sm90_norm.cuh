// Fused RMSNorm + quantize on sm_90 (contract: include/fusedmoe/norm.hpp).
//
//   h = x (or bf16(x + residual), written back), inv = 1 / sqrt(sum h^2 / H + eps),
//   y = (h * inv) * w, out = bf16(y) | e4m3 per 128 columns + f32 scale | e2m1 + e4m3 per 16.
// Rows of bf16 with any row stride; every output element written once, nothing else touched.
// Design (rows kernel): one CTA per row, the row kept in registers between the sum of squares and
// the output. Chunk c (8 values, 16 bytes) of the row belongs to thread c % G in step c / G, so
// each step's loads are coalesced, a 128-column FP8 block is one half-warp and a 16-column NVFP4
// block a lane pair: block maxima are warp shuffles. The row's sum: shuffles, then one barrier.
// (generic kernel) one warp per row, two passes (the second reads the row again, from L2),
// scalar accesses: any H, alignment and stride.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include "common/cuda_check.hpp"
#include "common/launch.hpp"
#include "common/ptx/sm90_ptx.cuh"
#include "norm/norm_launch.hpp"
#include "norm/norm_math.hpp"

namespace fusedmoe::detail {

template <int kChunks_, int kMaxThreads_>
struct NormConfig {
  static constexpr int kChunks = kChunks_;          // 16-byte chunks of the row per thread, at most
  static constexpr int kMaxThreads = kMaxThreads_;  // threads per row (= per CTA), at most
  static constexpr int kMaxWarps = kMaxThreads / 32;
  // Registers: h and the weight take 8 per chunk (16 with the residual's chunks in flight).
  // <= 512 threads: two CTAs per SM (<= 128 registers at 256 threads, <= 64 at 512); 1024: one.
  static constexpr int kMinBlocks = kMaxThreads <= 512 ? 2 : 1;
  static_assert(kChunks >= 1 && kChunks <= 8, "kChunks: 1..8 chunks per thread");
  static_assert(kMaxThreads % 32 == 0 && kMaxThreads >= 32 && kMaxThreads <= 1024,
                "kMaxThreads: whole warps, at most 1024");
};

namespace norm {

constexpr int kChunkValues = 8;       // bf16 per 16-byte chunk
constexpr int kFp8Block = 128;        // columns per fp8 scale: 16 chunks, one half-warp
constexpr int kNvfp4Block = 16;       // columns per nvfp4 scale: 2 chunks, one lane pair
constexpr float kE4M3Max = 448.0f;
constexpr float kE2M1Max = 6.0f;

__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;\n" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

__device__ __forceinline__ float nan_f32() { return __uint_as_float(0x7FFFFFFFu); }

// ---- memory -------------------------------------------------------------------------------------
// 16 bytes of x or residual, read once: coherent (out may be x itself, and residual is written by
// this kernel, so the non-coherent path is not allowed), no L1 allocation. Callers guard it with
// `if`: volatile asm is never hoisted out of the guard, so a masked-off load reads nothing.
__device__ __forceinline__ uint4 ld_once_v4(const uint16_t* ptr) {
  uint4 v;
  asm volatile("ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}
// 16 bytes of the weight: read-only for the kernel and read by every row on the SM (L1 hits).
__device__ __forceinline__ uint4 ld_weight_v4(const uint16_t* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

// ---- bf16 ---------------------------------------------------------------------------------------
__device__ __forceinline__ float bf16_bits_to_float(uint32_t b) { return __uint_as_float(b << 16); }

// The 8 bf16 of a chunk (element 2i in the low half of word i) as floats.
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);  // RNE, lo in the low half
  return *reinterpret_cast<const uint32_t*>(&b);
}

// h = bf16(float(x) + float(r)) for the 8 values of a chunk: one fp32 add, one rounding.
__device__ __forceinline__ uint4 add_bf16x8(const uint4& x, const uint4& r) {
  float a[8], b[8];
  unpack8(x, a);
  unpack8(r, b);
  uint4 h;
  h.x = pack_bf16x2(__fadd_rn(a[0], b[0]), __fadd_rn(a[1], b[1]));
  h.y = pack_bf16x2(__fadd_rn(a[2], b[2]), __fadd_rn(a[3], b[3]));
  h.z = pack_bf16x2(__fadd_rn(a[4], b[4]), __fadd_rn(a[5], b[5]));
  h.w = pack_bf16x2(__fadd_rn(a[6], b[6]), __fadd_rn(a[7], b[7]));
  return h;
}

// ---- the row's scale ----------------------------------------------------------------------------
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// inv_rms from the row's sum of squares, each operation correctly rounded (norm.hpp's formula);
// NaN when the sum is not finite: the row is poisoned rather than scaled to zeros.
__device__ __forceinline__ float inv_rms_of(float ss, int H, float eps) {
  if (!isfinite(ss)) return nan_f32();
  return __frcp_rn(__fsqrt_rn(__fadd_rn(__fdiv_rn(ss, float(H)), eps)));
}

// ---- quantization blocks --------------------------------------------------------------------------
// Max |y| of a block spread over kLanes aligned consecutive lanes (N values each), NaN-propagating;
// an Inf becomes NaN, so a block holding a non-finite y gets a NaN scale (norm.hpp).
template <int N, int kLanes>
__device__ __forceinline__ float block_amax(const float (&y)[N]) {
  float m = 0.f;
#pragma unroll
  for (int j = 0; j < N; ++j) m = ptx::abs_max_nan(m, y[j]);
#pragma unroll
  for (int off = kLanes / 2; off > 0; off >>= 1)
    m = ptx::abs_max_nan(m, __shfl_xor_sync(0xffffffffu, m, off));
  return m == INFINITY ? nan_f32() : m;
}

// FP8: the host quantizer's operations (fmt::quantize_fp8_per_token): scale = amax / 448, codes
// e4m3(y * (448 / amax)); a zero block has scale 0 and codes 0. N values -> N bytes, in order.
template <int N>
__device__ __forceinline__ float fp8_codes(const float (&y)[N], float amax, uint32_t (&codes)[N / 4]) {
  const float scale = amax == 0.f ? 0.f : __fdiv_rn(amax, kE4M3Max);
  const float inv = amax == 0.f ? 0.f : __fdiv_rn(kE4M3Max, amax);
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(
        make_float2(__fmul_rn(y[4 * i], inv), __fmul_rn(y[4 * i + 1], inv)), __NV_SATFINITE, __NV_E4M3);
    const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(
        make_float2(__fmul_rn(y[4 * i + 2], inv), __fmul_rn(y[4 * i + 3], inv)), __NV_SATFINITE, __NV_E4M3);
    codes[i] = uint32_t(lo) | (uint32_t(hi) << 16);
  }
  return scale;
}

__device__ __forceinline__ float e4m3_to_float(uint32_t code) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3)));
}

// NVFP4: the host quantizer's operations (fmt::quantize_nvfp4): s = e4m3((amax / 6) / g),
// codes e2m1(y / (float(s) * g)), codes 0 when that divisor is 0 or NaN. The division goes through
// one reciprocal per block (norm_math.hpp: the same quotient, bit for bit). Returns the N codes as
// nibbles (value j in bits 4j..4j+3) and the scale code in `sf`. A global scale that is not
// positive and finite poisons every block (`g_ok` false: NaN scale, codes 0).
template <int N>
__device__ __forceinline__ uint32_t nvfp4_codes(const float (&y)[N], float amax, float g, bool g_ok,
                                                uint32_t& sf) {
  using namespace norm_math;
  if (!g_ok) {
    sf = 0x7F;
    return 0;
  }
  sf = __nv_cvt_float_to_fp8(__fdiv_rn(__fdiv_rn(amax, kE2M1Max), g), __NV_SATFINITE, __NV_E4M3);
  const float denom = __fmul_rn(e4m3_to_float(sf), g);
  if (!(denom > 0.f)) return 0;  // an all-zero block (s = 0) or a poisoned one (NaN)
  const float r = __frcp_rn(denom);
  uint32_t codes = 0;
  if (div_by_recip_ok(denom, r, amax)) {
#pragma unroll
    for (int j = 0; j < N; ++j) codes |= e2m1_code(div_by_recip(y[j], denom, r)) << (4 * j);
  } else {  // extreme scales: the divisions themselves (rare, uniform over the block's lanes)
#pragma unroll
    for (int j = 0; j < N; ++j) codes |= e2m1_code(__fdiv_rn(y[j], denom)) << (4 * j);
  }
  return codes;
}

__device__ __forceinline__ bool global_ok(float g) { return g > 0.f && g < INFINITY; }

// ---- the rows kernel's output of one chunk ------------------------------------------------------
// Chunk c of row `row` (y: its 8 values, zeros when !active). Every lane of the warp calls it (the
// block maxima are shuffles); only active lanes store.
template <NormOut kOut>
__device__ __forceinline__ void store_chunk(const NormParams& p, int64_t row, int c, bool active,
                                            const float (&y)[8], float g, bool g_ok) {
  if constexpr (kOut == NormOut::bf16) {
    if (!active) return;
    uint4 v;
    v.x = pack_bf16x2(y[0], y[1]);
    v.y = pack_bf16x2(y[2], y[3]);
    v.z = pack_bf16x2(y[4], y[5]);
    v.w = pack_bf16x2(y[6], y[7]);
    uint16_t* out = static_cast<uint16_t*>(p.out) + row * p.out_stride;
    *reinterpret_cast<uint4*>(out + int64_t(c) * kChunkValues) = v;
  } else if constexpr (kOut == NormOut::fp8) {
    const float amax = block_amax<8, kFp8Block / kChunkValues>(y);
    uint32_t codes[2];
    const float scale = fp8_codes<8>(y, amax, codes);
    if (!active) return;
    uint8_t* out = static_cast<uint8_t*>(p.out) + row * p.out_stride;
    *reinterpret_cast<uint2*>(out + int64_t(c) * kChunkValues) = make_uint2(codes[0], codes[1]);
    if (c % (kFp8Block / kChunkValues) == 0)
      static_cast<float*>(p.out_scale)[row * p.scale_stride + c / (kFp8Block / kChunkValues)] = scale;
  } else {
    const float amax = block_amax<8, kNvfp4Block / kChunkValues>(y);
    uint32_t sf;
    const uint32_t codes = nvfp4_codes<8>(y, amax, g, g_ok, sf);
    if (!active) return;
    uint8_t* out = static_cast<uint8_t*>(p.out) + row * p.out_stride;
    *reinterpret_cast<uint32_t*>(out + int64_t(c) * (kChunkValues / 2)) = codes;
    if (c % (kNvfp4Block / kChunkValues) == 0)
      static_cast<uint8_t*>(p.out_scale)[row * p.scale_stride + c / (kNvfp4Block / kChunkValues)] = uint8_t(sf);
  }
}

}  // namespace norm

// ================================================================================================
// The rows kernel: one CTA (blockDim.x = G threads, whole warps) per row, the row in registers.
// Needs H % 8 == 0, 16-byte aligned rows of x, residual, weight (and bf16 out; fp8 out 8 bytes,
// nvfp4 out 4 bytes), and H <= 8 * kChunks * G.
// ================================================================================================
template <class Cfg, NormOut kOut>
__global__ void __launch_bounds__(Cfg::kMaxThreads, Cfg::kMinBlocks)
    norm_rows_kernel(const __grid_constant__ NormParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace norm;
  __shared__ float s_part[Cfg::kMaxWarps];  // (warps) partial sums of squares
  const int G = int(blockDim.x), tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int64_t row = blockIdx.x;
  const int chunks = p.H / kChunkValues;

  // Under PDL the next kernel may launch now; the weight is not the previous kernel's output, so
  // it streams in before the wait, x and residual after.
  if (p.pdl) griddep_launch_dependents();
  uint4 w[Cfg::kChunks], h[Cfg::kChunks];  // (kChunks) 16-byte chunks c = tid + i * G
#pragma unroll
  for (int i = 0; i < Cfg::kChunks; ++i) {
    const int c = tid + i * G;
    if (c < chunks) w[i] = ld_weight_v4(p.weight + int64_t(c) * kChunkValues);
  }
  if (p.pdl) griddep_wait();
  const uint16_t* x = p.x + row * p.x_stride;
#pragma unroll
  for (int i = 0; i < Cfg::kChunks; ++i) {
    const int c = tid + i * G;
    if (c < chunks) h[i] = ld_once_v4(x + int64_t(c) * kChunkValues);
  }
  if (p.residual) {  // uniform: h = bf16(x + residual), written back (only this thread touches it)
    uint16_t* res = p.residual + row * p.residual_stride;
    uint4 r[Cfg::kChunks];
#pragma unroll
    for (int i = 0; i < Cfg::kChunks; ++i) {
      const int c = tid + i * G;
      if (c < chunks) r[i] = ld_once_v4(res + int64_t(c) * kChunkValues);
    }
#pragma unroll
    for (int i = 0; i < Cfg::kChunks; ++i) {
      const int c = tid + i * G;
      if (c < chunks) {
        h[i] = add_bf16x8(h[i], r[i]);
        *reinterpret_cast<uint4*>(res + int64_t(c) * kChunkValues) = h[i];
      }
    }
  }

  // Sum of squares: this thread's chunks, the warp, then the warps in a fixed order (every
  // thread adds the same partials in the same order, so all hold the same inv_rms).
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < Cfg::kChunks; ++i) {
    const int c = tid + i * G;
    if (c < chunks) {
      float f[8];
      unpack8(h[i], f);
#pragma unroll
      for (int j = 0; j < 8; ++j) ss = __fmaf_rn(f[j], f[j], ss);
    }
  }
  ss = warp_sum(ss);
  const int num_warps = G / 32;
  if (num_warps > 1) {  // uniform
    if (lane == 0) s_part[warp] = ss;
    __syncthreads();  // orders the partials' writes before every thread reads them
    ss = 0.f;
    for (int v = 0; v < num_warps; ++v) ss += s_part[v];
  }
  const float inv = inv_rms_of(ss, p.H, p.eps);
  if (tid == 0 && p.inv_rms) p.inv_rms[row * p.inv_rms_stride] = inv;
  float g = 0.f;
  bool g_ok = false;
  if constexpr (kOut == NormOut::nvfp4) {
    g = p.global_scale[0];
    g_ok = global_ok(g);
  }

  // Output: y = (h * inv) * w per value, quantized per block, stored per chunk.
#pragma unroll
  for (int i = 0; i < Cfg::kChunks; ++i) {
    if (i * G + (tid & ~31) >= chunks) break;  // the whole warp is past the row (warp-uniform)
    const int c = tid + i * G;
    const bool active = c < chunks;
    float y[8];
    if (active) {
      float hf[8], wf[8];
      unpack8(h[i], hf);
      unpack8(w[i], wf);
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] = __fmul_rn(__fmul_rn(hf[j], inv), wf[j]);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j) y[j] = 0.f;
    }
    store_chunk<kOut>(p, row, c, active, y, g, g_ok);
  }
#else
  __trap();  // built for sm_90a only
#endif
}

// ================================================================================================
// The generic kernel: one warp per row, kGenericWarps rows per CTA. A step is 128 columns, 4
// consecutive ones per lane (an fp8 block is the warp, an nvfp4 block 4 lanes). Pass 1 sums the
// squares; pass 2 reads x and residual again (from L2), writes residual and the output. Reading
// both passes before any write of the same element (by the same lane) keeps in-place out == x and
// the residual write-back correct.
// ================================================================================================
template <NormOut kOut>
__global__ void __launch_bounds__(32 * NormConfigInfo::kGenericWarps)
    norm_generic_kernel(const __grid_constant__ NormParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  using namespace norm;
  constexpr int kStep = 128;
  const int lane = int(threadIdx.x) & 31;
  const int64_t row = int64_t(blockIdx.x) * NormConfigInfo::kGenericWarps + (threadIdx.x >> 5);
  if (p.pdl) griddep_launch_dependents();
  if (p.pdl) griddep_wait();
  if (row >= p.T) return;  // no barrier below: warps are independent
  const uint16_t* x = p.x + row * p.x_stride;
  uint16_t* res = p.residual ? p.residual + row * p.residual_stride : nullptr;
  auto h_at = [&](int e) -> float {
    const float xv = bf16_bits_to_float(x[e]);
    if (!res) return xv;
    return __bfloat162float(__float2bfloat16_rn(__fadd_rn(xv, bf16_bits_to_float(res[e]))));
  };
  const int steps = (p.H + kStep - 1) / kStep;
  float ss = 0.f;
  for (int s = 0; s < steps; ++s)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int e = s * kStep + 4 * lane + j;
      if (e < p.H) {
        const float v = h_at(e);
        ss = __fmaf_rn(v, v, ss);
      }
    }
  const float inv = inv_rms_of(warp_sum(ss), p.H, p.eps);
  if (lane == 0 && p.inv_rms) p.inv_rms[row * p.inv_rms_stride] = inv;
  float g = 0.f;
  bool g_ok = false;
  if constexpr (kOut == NormOut::nvfp4) {
    g = p.global_scale[0];
    g_ok = global_ok(g);
  }
  for (int s = 0; s < steps; ++s) {
    const int e0 = s * kStep + 4 * lane;
    float y[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      y[j] = 0.f;
      if (e0 + j < p.H) {
        const float hv = h_at(e0 + j);
        if (res) res[e0 + j] = uint16_t(__float_as_uint(hv) >> 16);  // hv is bf16-valued: exact
        y[j] = __fmul_rn(__fmul_rn(hv, inv), bf16_bits_to_float(p.weight[e0 + j]));
      }
    }
    if constexpr (kOut == NormOut::bf16) {
      uint16_t* out = static_cast<uint16_t*>(p.out) + row * p.out_stride;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (e0 + j < p.H) out[e0 + j] = __bfloat16_as_ushort(__float2bfloat16_rn(y[j]));
    } else if constexpr (kOut == NormOut::fp8) {
      uint32_t codes[1];
      const float scale = fp8_codes<4>(y, block_amax<4, 32>(y), codes);
      uint8_t* out = static_cast<uint8_t*>(p.out) + row * p.out_stride;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (e0 + j < p.H) out[e0 + j] = uint8_t(codes[0] >> (8 * j));
      if (lane == 0) static_cast<float*>(p.out_scale)[row * p.scale_stride + s] = scale;
    } else {  // H % 16 == 0: a lane's 4 values are all in the row or all past it
      uint32_t sf;
      const uint32_t codes = nvfp4_codes<4>(y, block_amax<4, kNvfp4Block / 4>(y), g, g_ok, sf);
      if (e0 < p.H) {
        uint8_t* out = static_cast<uint8_t*>(p.out) + row * p.out_stride + e0 / 2;
        out[0] = uint8_t(codes);
        out[1] = uint8_t(codes >> 8);
        if (lane % (kNvfp4Block / 4) == 0)
          static_cast<uint8_t*>(p.out_scale)[row * p.scale_stride + e0 / kNvfp4Block] = uint8_t(sf);
      }
    }
  }
#else
  __trap();  // built for sm_90a only
#endif
}

// ================================================================================================
// Launchers: the caller's stream, PDL when asked, launch checked.
// ================================================================================================
template <class Cfg, NormOut kOut>
void launch_norm_rows(const NormParams& p, int threads, cudaStream_t stream) {
  FMOE_REQUIRE(threads >= 32 && threads <= Cfg::kMaxThreads && threads % 32 == 0,
               "rmsnorm_quant: %d threads per row for a config of at most %d", threads, Cfg::kMaxThreads);
  launch_kernel(norm_rows_kernel<Cfg, kOut>, dim3(unsigned(p.T)), dim3(unsigned(threads)), 0, stream,
                p.pdl, p);
  FMOE_CHECK_LAUNCH("norm_rows_kernel", stream);
}

template <NormOut kOut>
void launch_norm_generic(const NormParams& p, cudaStream_t stream) {
  constexpr int kRows = NormConfigInfo::kGenericWarps;
  launch_kernel(norm_generic_kernel<kOut>, dim3(unsigned((p.T + kRows - 1) / kRows)), dim3(32u * kRows), 0,
                stream, p.pdl, p);
  FMOE_CHECK_LAUNCH("norm_generic_kernel", stream);
}

}  // namespace fusedmoe::detail
