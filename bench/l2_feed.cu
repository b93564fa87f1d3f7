// `fusedmoe bench --op l2_feed`: how fast the SMs can fill shared memory from L2, the feed the
// prefill grouped GEMM's k-stages need (issue 10). Each CTA (one an SM) runs a 4-stage ring of
// the gate/up tile's k-stage: 16 KB of "activations" of its own plus 32 KB of "weights" that CTAs
// 2i and 2i+1 share (two token tiles of one weight tile), by bulk copies (cp.async.bulk) from
// buffers that stay in L2 (24 MB, read again each launch: a hot-L2 ceiling on purpose). A consumer
// warp releases each stage as soon as it lands, so the ring runs at the feed's rate. Two forms:
// - own:       each CTA reads its 48 KB a stage from L2;
// - multicast: CTAs 2i, 2i+1 form a cluster; each reads its activations and one half of the
//              weights, multicast into both CTAs (48 KB lands in each, 32 KB read from L2 each).
// Rows: bytes = shared-memory bytes filled; the note gives the L2 bytes read per second and per
// SM. The gate/up at deepseek-v3 T=8192 pulls ~6 TB/s (docs/performance.md, session 33): this
// says how close to the feed that is, and what multicasting the weights frees.
// Every form is first run once and checked: the consumer sums one word of each landed block
// (the buffers hold their word index), against the sum the host expects; a wrong kernel is never
// timed.
#include <cooperative_groups.h>
#include <cuda/ptx>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/registry.hpp"
#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "common/ptx/sm90_ptx.cuh"
#include "fusedmoe/error.hpp"

namespace fusedmoe::bench {
namespace {

namespace cptx = cuda::ptx;

constexpr int kStages = 4;
constexpr uint32_t kABytes = 16 * 1024, kWBytes = 32 * 1024;
constexpr int64_t kWRegion = 16 << 20, kARegion = 8 << 20;  // 24 MB: in L2 on H100 and H200
constexpr int kWBlocks = int(kWRegion / kWBytes), kABlocks = int(kARegion / kABytes);

struct alignas(128) FeedStage {
  uint8_t a[kABytes];
  uint8_t w[kWBytes];
};
struct FeedSmem {
  FeedStage st[kStages];
  uint64_t full[kStages], empty[kStages];
};

// The blocks iteration `it` of CTA `cta` reads (the host's check uses the same).
__host__ __device__ inline int w_block(int cta, int it) { return ((cta / 2) * 7 + it) % kWBlocks; }
__host__ __device__ inline int a_block(int cta, int it) { return (cta * 5 + it) % kABlocks; }

// A stage's barrier, waited on by whole warps (acquire at cluster scope: the multicast form's
// stages are written and released by the other CTA too).
__device__ __forceinline__ void wait_parity(uint64_t* bar, uint32_t parity) {
  while (!cptx::mbarrier_try_wait_parity(cptx::sem_acquire, cptx::scope_cluster, bar, parity)) {
  }
}

template <bool kMulticast>
__global__ void __launch_bounds__(64) l2_feed_kernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ a,
                                                     int iters, unsigned long long* sink) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t raw[];
  const uint32_t pad = (128u - (ptx::smem_addr(raw) & 127u)) & 127u;
  FeedSmem& ss = *reinterpret_cast<FeedSmem*>(raw + pad);
  const uint32_t rank = kMulticast ? cptx::get_sreg_cluster_ctarank() : 0u;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      cptx::mbarrier_init(&ss.full[s], 1);
      // Multicast: a stage is free once the consumers of both CTAs released it (both are written).
      cptx::mbarrier_init(&ss.empty[s], kMulticast ? 2u : 1u);
    }
    cptx::fence_mbarrier_init(cptx::sem_release, cptx::scope_cluster);
  }
  if (kMulticast) {
    cptx::barrier_cluster_arrive(cptx::sem_release);
    cptx::barrier_cluster_wait();
  } else {
    __syncthreads();
  }
  const int cta = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 0 && lane == 0) {  // producer
    for (int it = 0; it < iters; ++it) {
      const int s = it % kStages;
      if (it >= kStages) wait_parity(&ss.empty[s], ((it / kStages) - 1) & 1);
      uint64_t* full = &ss.full[s];
      // (sizes by value: cuda::ptx takes references, which constexpr globals cannot bind in
      // device code)
      const uint32_t tx = kABytes + kWBytes, abytes = kABytes, wbytes = kWBytes;
      cptx::mbarrier_arrive_expect_tx(cptx::sem_release, cptx::scope_cta, cptx::space_shared, full, tx);
      cptx::cp_async_bulk(cptx::space_cluster, cptx::space_global, ss.st[s].a,
                          a + int64_t(a_block(cta, it)) * kABytes, abytes, full);
      const uint8_t* wsrc = w + int64_t(w_block(cta, it)) * kWBytes;
      if (kMulticast) {
        // This CTA's half lands at the same offset (and on the same barrier) in both CTAs.
        const uint32_t half = kWBytes / 2;
        const uint16_t mask = 0x3;
        cptx::cp_async_bulk(cptx::space_cluster, cptx::space_global, ss.st[s].w + rank * half,
                            wsrc + rank * half, half, full, mask);
      } else {
        cptx::cp_async_bulk(cptx::space_cluster, cptx::space_global, ss.st[s].w, wsrc, wbytes, full);
      }
    }
  } else if (warp == 1) {  // consumer: one word of each landed block, then release the stage
    unsigned long long sum = 0;
    for (int it = 0; it < iters; ++it) {
      const int s = it % kStages;
      wait_parity(&ss.full[s], (it / kStages) & 1);
      if (lane == 0) {
        const FeedStage& st = ss.st[s];
        sum += *reinterpret_cast<const uint32_t*>(st.a) + *reinterpret_cast<const uint32_t*>(st.w) +
               *reinterpret_cast<const uint32_t*>(st.w + kWBytes / 2);
        if (kMulticast) {
          for (unsigned r = 0; r < 2; ++r)  // both CTAs' producers write this stage
            cptx::mbarrier_arrive(cptx::sem_release, cptx::scope_cluster, cptx::space_cluster,
                                  cooperative_groups::this_cluster().map_shared_rank(&ss.empty[s], r));
        } else {
          cptx::mbarrier_arrive(&ss.empty[s]);
        }
      }
      __syncwarp();
    }
    if (lane == 0) atomicAdd(sink, sum);
  }
  // No CTA leaves while its partner may still write into it or arrive on its barriers.
  if (kMulticast) {
    cptx::barrier_cluster_arrive(cptx::sem_release);
    cptx::barrier_cluster_wait();
  }
#else
  __trap();  // built for sm_90a only
#endif
}

constexpr size_t kSmem = sizeof(FeedSmem) + 128;

void launch_feed(bool multicast, int ctas, const uint8_t* w, const uint8_t* a, int iters,
                 unsigned long long* sink, cudaStream_t stream) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(64);
  cfg.dynamicSmemBytes = kSmem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = multicast ? 2 : 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (multicast)
    FMOE_CUDA(cudaLaunchKernelEx(&cfg, l2_feed_kernel<true>, w, a, iters, sink));
  else
    FMOE_CUDA(cudaLaunchKernelEx(&cfg, l2_feed_kernel<false>, w, a, iters, sink));
}

void run(const Context& ctx, const cli::Args& args) {
  const int iters = int(args.integer("iters", 512, kStages, 1 << 20));
  const int sms = ctx.ceil->sm_count;
  for (auto* k : {l2_feed_kernel<false>, l2_feed_kernel<true>})
    FMOE_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
  // Buffers hold their 32-bit word index, so each landed block's first word names its offset.
  std::vector<uint32_t> hw(kWRegion / 4), ha(kARegion / 4);
  for (size_t i = 0; i < hw.size(); ++i) hw[i] = uint32_t(i);
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = uint32_t(i);
  DeviceBuffer dw(kWRegion), da(kARegion), dsink(sizeof(unsigned long long));
  dw.upload(hw.data(), kWRegion);
  da.upload(ha.data(), kARegion);
  for (bool multicast : {false, true}) {
    // CTAs: every SM once, in whole clusters that can all be resident at the same time.
    int ctas = sms / 2 * 2;
    if (multicast) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(ctas);
      cfg.blockDim = dim3(64);
      cfg.dynamicSmemBytes = kSmem;
      cudaLaunchAttribute attr[1];
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim = {2, 1, 1};
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      FMOE_CUDA(cudaOccupancyMaxActiveClusters(&clusters, l2_feed_kernel<true>, &cfg));
      FMOE_REQUIRE(clusters > 0, "bench l2_feed: no 2-CTA cluster of %zu bytes of shared memory fits", kSmem);
      ctas = std::min(ctas, 2 * clusters);
    }
    const auto* w = static_cast<const uint8_t*>(dw.get());
    const auto* a = static_cast<const uint8_t*>(da.get());
    auto* sink = static_cast<unsigned long long*>(dsink.get());
    // Check one launch against the host's sum.
    FMOE_CUDA(cudaMemsetAsync(sink, 0, sizeof(unsigned long long), ctx.stream));
    launch_feed(multicast, ctas, w, a, iters, sink, ctx.stream);
    unsigned long long got = 0;
    FMOE_CUDA(cudaMemcpyAsync(&got, sink, sizeof got, cudaMemcpyDeviceToHost, ctx.stream));
    FMOE_CUDA(cudaStreamSynchronize(ctx.stream));
    unsigned long long want = 0;
    for (int c = 0; c < ctas; ++c)
      for (int it = 0; it < iters; ++it)
        want += uint64_t(a_block(c, it)) * (kABytes / 4) + 2 * uint64_t(w_block(c, it)) * (kWBytes / 4) +
                kWBytes / 8;
    FMOE_REQUIRE(got == want, "bench l2_feed (%s): the landed blocks sum to %llu, expected %llu",
                 multicast ? "multicast" : "own", got, want);
    Row r;
    r.op = "l2_feed";
    r.shape = multicast ? "multicast x2: 16 + 16 (x2) KB/stage" : "own: 16 + 32 KB/stage";
    r.config = "s4";
    r.tokens = ctas;
    r.t = time_graph([&](cudaStream_t s, int) { launch_feed(multicast, ctas, w, a, iters, sink, s); },
                     ctx.stream, 5, 20);
    const double filled = double(ctas) * iters * (kABytes + kWBytes);
    const double l2 = double(ctas) * iters * (kABytes + (multicast ? kWBytes / 2 : kWBytes));
    r.bytes = filled;
    const double sec = r.t.median_us * 1e-6;
    r.note = strf("hot L2: %.0f GB/s read from L2 (%.1f GB/s per CTA), %.1f GB/s filled per CTA; %d CTAs",
                  l2 / sec / 1e9, l2 / sec / 1e9 / ctas, filled / sec / 1e9 / ctas, ctas);
    print_row(r, *ctx.ceil);
    ctx.rows->push_back(r);
  }
}

using Kind = BenchOption::Kind;
const Register kRegister({"l2_feed",
                          "shared-memory fill rate from L2 (the prefill GEMM's k-stage feed), own "
                          "loads vs weights multicast over 2-CTA clusters",
                          {{"iters", "N", "k-stages per CTA and launch (default 512)", Kind::integer, {}, kStages,
                            1 << 20}},
                          run});

}  // namespace
}  // namespace fusedmoe::bench
