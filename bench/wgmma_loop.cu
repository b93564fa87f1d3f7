// `fusedmoe bench --op wgmma_loop`: the FP8 prefill mainloop's tensor rate with nothing loaded
// (issue 10). DeepGEMM's grouped GEMM runs the tensor pipe at 75-83% where ours runs it at 50-64%
// (docs/performance.md, session 36). Both promote each k-block's fp8 products into fp32 sums
// (sums += scratch * scale_a[token] * scale_b). Ours does it per 128-row weight wave: two batches
// of 4 m64n128k32 wgmmas, each followed by a wait and a promotion. DeepGEMM issues one batch of 4
// m64n192k32 and waits once per k-block. This isolates that difference: one CTA per SM, two
// consumer warpgroups (64 tokens each, as tokens-as-M tiles), one k-stage that stays in shared
// memory, no loads, no epilogue. Forms:
//   w2_n128          two 128-row waves, a batch + wait + promotion each (the engine's gate/up)
//   n192             one 192-row batch + wait + promotion (DeepGEMM's block)
//   *_nopromo        the same batches and waits, accumulating in place: the promotion's cost
//   n256_nopromo     one 256-row batch per k-block, in place (no room for a 256-row scratch)
// Rows: TFLOP/s of the tile's products, % of the same-run dense FP8 rate (cuBLASLt). Every form
// first runs 2 k-blocks and is checked exactly against the host's sum of every output (values
// +-0.5, 1, 2 with power-of-two scales: every sum is exact in fp32).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/ptx/sm90_ptx.cuh"
#include "common/ptx/wgmma_fp8.cuh"
#include "fusedmoe/error.hpp"

namespace fusedmoe::bench {
namespace {

enum class Form { w2_n128, n192, w2_n128_nopromo, n192_nopromo, n256_nopromo };
constexpr Form kForms[] = {Form::w2_n128, Form::n192, Form::w2_n128_nopromo, Form::n192_nopromo,
                           Form::n256_nopromo};
const char* form_name(Form f) {
  switch (f) {
    case Form::w2_n128: return "w2_n128";
    case Form::n192: return "n192";
    case Form::w2_n128_nopromo: return "w2_n128_nopromo";
    case Form::n192_nopromo: return "n192_nopromo";
    case Form::n256_nopromo: return "n256_nopromo";
  }
  return "?";
}
__host__ __device__ constexpr int rows_of(Form f) {  // weight rows of the tile (wgmma N, all waves)
  return f == Form::n192 || f == Form::n192_nopromo ? 192 : 256;
}
__host__ __device__ constexpr bool promotes(Form f) { return f == Form::w2_n128 || f == Form::n192; }

constexpr int kTokens = 128, kRowBytes = 128;  // two warpgroups x 64 tokens; one 128-byte k-block

struct LoopSmem {
  alignas(1024) uint8_t a[kTokens * kRowBytes];  // tokens, K-major, 128-byte swizzle
  alignas(1024) uint8_t b[256 * kRowBytes];      // weight rows
  float sa[kTokens];                             // per-token scale of the k-block
  float sb[2];                                   // per-128-row weight block scale
};
constexpr size_t kSmem = sizeof(LoopSmem) + 1024;

// The stage's contents: every byte of physical 16-byte chunk p of row r of tile t (0: tokens,
// 1: weights) holds one e4m3 code of +-0.5, +-1, +-2; scales are 0.5, 1, 2 (tokens), 0.5, 2
// (weight blocks). Host and device draw the same.
__host__ __device__ inline uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}
__host__ __device__ inline uint8_t chunk_code(int t, int r, int p) {
  // 1, -1, 2, -2, 0.5, -0.5 (no table: a runtime-indexed array would live in local memory)
  const uint32_t i = mix(uint32_t(t * 4096 + r * 8 + p) + 12345u) % 6;
  return uint8_t((i < 2 ? 0x38 : i < 4 ? 0x40 : 0x30) | ((i & 1) << 7));
}
__host__ __device__ inline float token_scale(int r) { return r % 3 == 0 ? 0.5f : r % 3 == 1 ? 1.0f : 2.0f; }
__host__ __device__ inline float block_scale(int blk) { return blk == 0 ? 0.5f : 2.0f; }
double code_value(uint8_t c) {
  const double m = (c & 0x7F) == 0x38 ? 1.0 : (c & 0x7F) == 0x40 ? 2.0 : 0.5;
  return c & 0x80 ? -m : m;
}

// sums += scratch * (sa[token] * sb[block of the column]) for this thread's two tokens; the
// engine's tokens-as-M promotion (column 8i + 2(lane % 4) + h, rows r0 and r0 + 8). col0: the
// scratch's first column within the tile.
template <int N>
__device__ __forceinline__ void promote(float (&sums)[N / 2], const float (&scratch)[N / 2],
                                        const LoopSmem& ss, int r0, int col0) {
  const float s0 = ss.sa[r0], s1 = ss.sa[r0 + 8];
  const float b0 = ss.sb[0], b1 = ss.sb[1];
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    const float sb = (col0 + 8 * i) < 128 ? b0 : b1;  // static: col0 and i are compile-time
    const float p0 = s0 * sb, p1 = s1 * sb;
    sums[4 * i + 0] += scratch[4 * i + 0] * p0;
    sums[4 * i + 1] += scratch[4 * i + 1] * p0;
    sums[4 * i + 2] += scratch[4 * i + 2] * p1;
    sums[4 * i + 3] += scratch[4 * i + 3] * p1;
  }
}

// One batch: 4 k32 steps of m64nNk32 from the warpgroup's 64 tokens and weight rows [row0,
// row0 + N), then commit and wait. overwrite: the first step starts d from zero (a scratch).
template <int N>
__device__ __forceinline__ void batch(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool overwrite) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) ptx::fence_operand(d[i]);
  ptx::wgmma_fence();
#pragma unroll
  for (int j = 0; j < 4; ++j)  // +32 bytes along K: +2 in the descriptors' 16-byte address units
    ptx::WgmmaFp8<N>::mma(desc_a + 2 * j, desc_b + 2 * j, d, overwrite && j == 0 ? 0 : 1);
  ptx::wgmma_commit();
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < N / 2; ++i) ptx::fence_operand(d[i]);
}

template <int N>
__device__ __forceinline__ float total(const float (&d)[N / 2]) {
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) s += d[i];
  return s;
}

template <Form kForm>
__global__ void __launch_bounds__(256, 1) wgmma_loop_kernel(int kblocks, double* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t raw[];
  const uint32_t pad = (1024u - (ptx::smem_addr(raw) & 1023u)) & 1023u;
  LoopSmem& ss = *reinterpret_cast<LoopSmem*>(raw + pad);
  for (int i = threadIdx.x; i < kTokens * kRowBytes; i += blockDim.x)
    ss.a[i] = chunk_code(0, i / kRowBytes, (i % kRowBytes) / 16);
  for (int i = threadIdx.x; i < 256 * kRowBytes; i += blockDim.x)
    ss.b[i] = chunk_code(1, i / kRowBytes, (i % kRowBytes) / 16);
  if (threadIdx.x < kTokens) ss.sa[threadIdx.x] = token_scale(threadIdx.x);
  if (threadIdx.x < 2) ss.sb[threadIdx.x] = block_scale(threadIdx.x);
  // The stores above are generic-proxy writes that wgmma (async proxy) reads.
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int r0 = 64 * wg + 16 * warp + lane / 4;
  const uint64_t da = ptx::smem_desc_k128b(ss.a + 64 * wg * kRowBytes);
  const uint64_t db0 = ptx::smem_desc_k128b(ss.b), db1 = ptx::smem_desc_k128b(ss.b + 128 * kRowBytes);
  float out = 0.0f;
  if constexpr (kForm == Form::w2_n128) {
    float sums0[64] = {}, sums1[64] = {}, scratch[64];
    for (int kb = 0; kb < kblocks; ++kb) {
      batch<128>(scratch, da, db0, true);
      promote<128>(sums0, scratch, ss, r0, 0);
      batch<128>(scratch, da, db1, true);
      promote<128>(sums1, scratch, ss, r0, 128);
    }
    out = total<128>(sums0) + total<128>(sums1);
  } else if constexpr (kForm == Form::n192) {
    float sums[96] = {}, scratch[96];
    for (int kb = 0; kb < kblocks; ++kb) {
      batch<192>(scratch, da, db0, true);
      promote<192>(sums, scratch, ss, r0, 0);
    }
    out = total<192>(sums);
  } else if constexpr (kForm == Form::w2_n128_nopromo) {
    float d0[64] = {}, d1[64] = {};
    for (int kb = 0; kb < kblocks; ++kb) {
      batch<128>(d0, da, db0, false);
      batch<128>(d1, da, db1, false);
    }
    out = total<128>(d0) + total<128>(d1);
  } else if constexpr (kForm == Form::n192_nopromo) {
    float d[96] = {};
    for (int kb = 0; kb < kblocks; ++kb) batch<192>(d, da, db0, false);
    out = total<192>(d);
  } else {
    float d[128] = {};
    for (int kb = 0; kb < kblocks; ++kb) batch<256>(d, da, db0, false);
    out = total<256>(d);
  }
  atomicAdd(sink, double(out));
#else
  __trap();  // built for sm_90a only
#endif
}

void launch_loop(Form f, int ctas, int kblocks, double* sink, cudaStream_t stream) {
  switch (f) {
    case Form::w2_n128: wgmma_loop_kernel<Form::w2_n128><<<ctas, 256, kSmem, stream>>>(kblocks, sink); break;
    case Form::n192: wgmma_loop_kernel<Form::n192><<<ctas, 256, kSmem, stream>>>(kblocks, sink); break;
    case Form::w2_n128_nopromo:
      wgmma_loop_kernel<Form::w2_n128_nopromo><<<ctas, 256, kSmem, stream>>>(kblocks, sink);
      break;
    case Form::n192_nopromo: wgmma_loop_kernel<Form::n192_nopromo><<<ctas, 256, kSmem, stream>>>(kblocks, sink); break;
    case Form::n256_nopromo: wgmma_loop_kernel<Form::n256_nopromo><<<ctas, 256, kSmem, stream>>>(kblocks, sink); break;
  }
  FMOE_CUDA(cudaGetLastError());
}

void set_smem(Form f) {
  const void* k = nullptr;
  switch (f) {
    case Form::w2_n128: k = reinterpret_cast<const void*>(wgmma_loop_kernel<Form::w2_n128>); break;
    case Form::n192: k = reinterpret_cast<const void*>(wgmma_loop_kernel<Form::n192>); break;
    case Form::w2_n128_nopromo: k = reinterpret_cast<const void*>(wgmma_loop_kernel<Form::w2_n128_nopromo>); break;
    case Form::n192_nopromo: k = reinterpret_cast<const void*>(wgmma_loop_kernel<Form::n192_nopromo>); break;
    case Form::n256_nopromo: k = reinterpret_cast<const void*>(wgmma_loop_kernel<Form::n256_nopromo>); break;
  }
  FMOE_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
}

// The host's sum of every output of one CTA after `kblocks` k-blocks. Logical chunk c of row r
// sits at physical chunk c ^ (r % 8) (the 128-byte swizzle), and a chunk's 16 bytes are equal.
double expected_cta_sum(Form f, int kblocks) {
  const int n_rows = rows_of(f);
  double sum = 0.0;
  for (int r = 0; r < kTokens; ++r)
    for (int n = 0; n < n_rows; ++n) {
      double dot = 0.0;
      for (int c = 0; c < 8; ++c)
        dot += 16.0 * code_value(chunk_code(0, r, c ^ (r % 8))) * code_value(chunk_code(1, n, c ^ (n % 8)));
      const double scale = promotes(f) ? double(token_scale(r)) * block_scale(n / 128) : 1.0;
      sum += kblocks * dot * scale;
    }
  return sum;
}

void run(const Context& ctx, const cli::Args& args) {
  const int kblocks = int(args.integer("iters", 4096, 2, 1 << 20));
  const int ctas = ctx.ceil->sm_count;
  DeviceBuffer dsink(sizeof(double));
  auto* sink = static_cast<double*>(dsink.get());
  for (const Form f : kForms) {
    set_smem(f);
    // Check 2 k-blocks exactly against the host.
    FMOE_CUDA(cudaMemsetAsync(sink, 0, sizeof(double), ctx.stream));
    launch_loop(f, ctas, 2, sink, ctx.stream);
    double got = 0;
    FMOE_CUDA(cudaMemcpyAsync(&got, sink, sizeof got, cudaMemcpyDeviceToHost, ctx.stream));
    FMOE_CUDA(cudaStreamSynchronize(ctx.stream));
    const double want = ctas * expected_cta_sum(f, 2);
    FMOE_REQUIRE(got == want, "bench wgmma_loop (%s): the outputs sum to %.17g, expected %.17g",
                 form_name(f), got, want);
    Row r;
    r.op = "wgmma_loop";
    r.shape = strf("%d tokens x %d weight rows, K per launch %d", kTokens, rows_of(f), kblocks * 128);
    r.config = form_name(f);
    r.tokens = ctas;
    r.t = time_graph([&](cudaStream_t s, int) { launch_loop(f, ctas, kblocks, sink, s); }, ctx.stream, 5, 20);
    r.flops = 2.0 * ctas * double(kblocks) * kTokens * rows_of(f) * 128;
    set_floor(r, *ctx.ceil, "fp8");
    const double tflops = r.flops / (r.t.median_us * 1e-6) / 1e12;
    r.note = strf("%.0f TFLOP/s = %.1f%% of the dense FP8 rate (%.0f) in this process; %d CTAs",
                  tflops, 100.0 * tflops / ctx.ceil->fp8_tflops, ctx.ceil->fp8_tflops, ctas);
    print_row(r, *ctx.ceil);
    ctx.rows->push_back(r);
  }
}

using Kind = BenchOption::Kind;
const Register kRegister({"wgmma_loop",
                          "the FP8 mainloop's tensor rate with nothing loaded: two 128-row waves "
                          "(ours) vs one 192-row batch (DeepGEMM's), with and without the promotion",
                          {{"iters", "N", "k-blocks per CTA and launch (default 4096)", Kind::integer, {}, 2,
                            1 << 20}},
                          run});

}  // namespace
}  // namespace fusedmoe::bench
