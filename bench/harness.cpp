#include "bench/harness.hpp"

#include "bench/cublaslt.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <memory>

#include "common/cuda_check.hpp"
#include "common/device_buffer.hpp"
#include "fmoe_commit.hpp"
#include "fusedmoe/formats.hpp"
#include "ref/random.hpp"
#include "tools/wait_or_die.hpp"

namespace fusedmoe::bench {
namespace {

#define FMOE_CUBLAS(call)                                                                   \
  do {                                                                                      \
    const cublasStatus_t st_ = (call);                                                      \
    FMOE_REQUIRE(st_ == CUBLAS_STATUS_SUCCESS, "%s failed: cublas status %d", #call, int(st_)); \
  } while (0)

struct Events {
  cudaEvent_t a{}, b{};
  Events() {
    FMOE_CUDA(cudaEventCreate(&a));
    FMOE_CUDA(cudaEventCreate(&b));
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double pos = p * double(v.size() - 1);
  const size_t lo = size_t(pos);
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

// Dense GEMM D[M,N] = A[M,K] B[K,N] through cuBLASLt (loaded on first use: bench/cublaslt.hpp),
// 8192^3, random inputs; TFLOP/s.
double cublaslt_gemm_tflops(bool fp8, cudaStream_t stream) {
  const CublasLt& L = cublaslt();
  const int n = 8192;
  cublasLtHandle_t lt;
  FMOE_CUBLAS(L.create(&lt));
  std::unique_ptr<cublasLtContext, decltype(L.destroy)> guard(lt, L.destroy);
  const size_t elems = size_t(n) * n;
  const size_t in_bytes = elems * (fp8 ? 1 : 2);
  // Random codes: e4m3 codes with the NaN codes excluded, or bf16 values in [-1, 1).
  std::vector<uint8_t> host(in_bytes);
  for (size_t i = 0; i < in_bytes; ++i) {
    uint8_t v = uint8_t(ref::hash3(7, fp8 ? 1 : 2, i));
    if (fp8) {
      if ((v & 0x7F) == 0x7F) v = 0x38;
      host[i] = v & 0xBF;  // keep magnitudes <= 2^0 so 8192-long sums stay finite
    } else if (i % 2 == 1) {
      host[i] = uint8_t(0x3C | (v & 0x80));  // bf16 high byte: +-[0.5, 1) range
    } else {
      host[i] = v;
    }
  }
  DeviceBuffer A = DeviceBuffer::from(host), B = DeviceBuffer::from(host);
  DeviceBuffer D(elems * 2), ws(64 << 20);
  const cudaDataType_t in_t = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  cublasLtMatmulDesc_t desc;
  FMOE_CUBLAS(L.matmul_desc_create(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opT = CUBLAS_OP_T, opN = CUBLAS_OP_N;  // FP8 needs the "TN" layout
  FMOE_CUBLAS(L.matmul_desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opT, sizeof(opT)));
  FMOE_CUBLAS(L.matmul_desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opN, sizeof(opN)));
  cublasLtMatrixLayout_t la, lb, ld;
  FMOE_CUBLAS(L.matrix_layout_create(&la, in_t, n, n, n));
  FMOE_CUBLAS(L.matrix_layout_create(&lb, in_t, n, n, n));
  FMOE_CUBLAS(L.matrix_layout_create(&ld, CUDA_R_16BF, n, n, n));
  cublasLtMatmulPreference_t pref;
  FMOE_CUBLAS(L.preference_create(&pref));
  const size_t ws_bytes = ws.bytes();
  FMOE_CUBLAS(L.preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t heur{};
  int found = 0;
  FMOE_CUBLAS(L.algo_get_heuristic(lt, desc, la, lb, ld, ld, pref, 1, &heur, &found));
  FMOE_REQUIRE(found > 0, "cuBLASLt found no %s GEMM algorithm", fp8 ? "fp8" : "bf16");
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&](cudaStream_t s, int) {
    FMOE_CUBLAS(L.matmul(lt, desc, &alpha, A.get(), la, B.get(), lb, &beta, D.get(), ld,
                               D.get(), ld, &heur.algo, ws.get(), ws_bytes, s));
  };
  const Stats st = time_graph(run, stream, 5, 10);
  L.preference_destroy(pref);
  L.matrix_layout_destroy(la);
  L.matrix_layout_destroy(lb);
  L.matrix_layout_destroy(ld);
  L.matmul_desc_destroy(desc);
  return 2.0 * n * double(n) * n / (st.median_us * 1e-6) / 1e12;
}

Ceilings measure(cudaStream_t stream) {
  Ceilings c;
  int dev = 0;
  FMOE_CUDA(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  FMOE_CUDA(cudaGetDeviceProperties(&p, dev));
  c.device = p.name;
  c.sm_count = p.multiProcessorCount;
  c.l2_bytes = double(p.l2CacheSize);
  int khz = 0;
  FMOE_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, dev));
  c.sm_clock_mhz = khz / 1000;
  FMOE_CUDA(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev));
  c.mem_clock_mhz = khz / 1000;
  FMOE_CUDA(cudaDriverGetVersion(&c.driver));
  FMOE_CUDA(cudaRuntimeGetVersion(&c.runtime));

  // Streams over 1 GiB (20x the L2): copies count bytes read plus written, the read-only stream
  // bytes read. The ceiling is the fastest (the floors must not flatter us).
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer src(bytes), dst(bytes);
  src.fill(0x3C);
  auto gbps = [&](double moved, const Stats& t) { return moved / (t.median_us * 1e-6) / 1e9; };
  auto kernel = [&](StreamKernel k) {
    return time_graph([&](cudaStream_t s, int) { launch_stream_kernel(k, src.get(), dst.get(), bytes, s); },
                      stream, 5, 10);
  };
  c.copy_kernel_gbps = gbps(2.0 * bytes, kernel(StreamKernel::copy_cs4));
  c.copy_nc8_gbps = gbps(2.0 * bytes, kernel(StreamKernel::copy_nc8));
  c.read_gbps = gbps(double(bytes), kernel(StreamKernel::read_nc8));
  c.memcpy_gbps = gbps(2.0 * bytes, time_graph([&](cudaStream_t s, int) {
    FMOE_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
  }, stream, 5, 10));
  {  // outside a graph (a graph's memcpy node may run on the copy engine)
    Events ev;
    std::vector<double> us(10);
    FMOE_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
    for (double& u : us) {
      FMOE_CUDA(cudaEventRecord(ev.a, stream));
      FMOE_CUDA(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream));
      FMOE_CUDA(cudaEventRecord(ev.b, stream));
      FMOE_CUDA(cudaEventSynchronize(ev.b));
      float ms = 0;
      FMOE_CUDA(cudaEventElapsedTime(&ms, ev.a, ev.b));
      u = 1e3 * double(ms);
    }
    c.memcpy_nograph_gbps = 2.0 * double(bytes) / (percentile(us, 0.5) * 1e-6) / 1e9;
  }
  const std::pair<const char*, double> ways[] = {
      {"copy kernel (streaming, 4 in flight)", c.copy_kernel_gbps},
      {"copy kernel (non-coherent loads, 8 in flight)", c.copy_nc8_gbps},
      {"read-only stream", c.read_gbps},
      {"cudaMemcpyAsync in a graph", c.memcpy_gbps},
      {"cudaMemcpyAsync", c.memcpy_nograph_gbps}};
  for (const auto& [name, v] : ways)
    if (v > c.copy_gbps) {
      c.copy_gbps = v;
      c.copy_source = name;
    }
  c.fp8_tflops = cublaslt_gemm_tflops(true, stream);
  c.bf16_tflops = cublaslt_gemm_tflops(false, stream);
  return c;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') { o += '\\'; o += ch; }
    else if (static_cast<unsigned char>(ch) < 0x20) o += strf("\\u%04x", ch);
    else o += ch;
  }
  return o;
}

}  // namespace

Stats time_graph(const std::function<void(cudaStream_t, int)>& launch, cudaStream_t stream,
                 int per_graph, int reps) {
  // Every wait has a watchdog: a kernel that deadlocks ends the bench with a message (session 43's
  // bf16 down-GEMM stall spun the bench forever at 100% utilization). The slowest timed graph
  // (deepseek-v3 bf16 at T=8192, 20 forwards) takes about 0.3 s.
  constexpr double kSeconds = 120;
  launch(stream, 0);  // warm-up: module load, first touch, lazy allocations
  cli::wait_or_die(stream, kSeconds, "the bench's warm-up launch");
  cudaGraph_t graph;
  FMOE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < per_graph; ++i) launch(stream, i);
  FMOE_CUDA(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  FMOE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  FMOE_CUDA(cudaGraphLaunch(exec, stream));  // first replay uploads the graph
  cli::wait_or_die(stream, kSeconds, strf("the bench's first replay of a graph of %d launches", per_graph));
  Events ev;
  std::vector<double> us(size_t(std::max(reps, 1)));
  for (size_t i = 0; i < us.size(); ++i) {
    FMOE_CUDA(cudaEventRecord(ev.a, stream));
    FMOE_CUDA(cudaGraphLaunch(exec, stream));
    FMOE_CUDA(cudaEventRecord(ev.b, stream));
    cli::wait_or_die(stream, kSeconds, strf("the bench's timed replay %zu of a graph of %d launches", i, per_graph));
    float ms = 0;
    FMOE_CUDA(cudaEventElapsedTime(&ms, ev.a, ev.b));
    us[i] = 1e3 * double(ms) / per_graph;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  Stats s;
  s.median_us = percentile(us, 0.5);
  s.p10_us = percentile(us, 0.1);
  s.p90_us = percentile(us, 0.9);
  s.samples = int(us.size());
  return s;
}

const Ceilings& ceilings(cudaStream_t stream) {
  static const Ceilings c = measure(stream);
  return c;
}

void set_floor(Row& r, const Ceilings& c, const char* rate) {
  const double byte_us = r.bytes / (c.copy_gbps * 1e9) * 1e6;
  const double tflops = std::string(rate) == "bf16" ? c.bf16_tflops : c.fp8_tflops;
  const double flop_us = r.flops / (tflops * 1e12) * 1e6;
  r.floor_us = std::max(byte_us, flop_us);
  r.floor_kind = byte_us >= flop_us ? "bytes" : rate;
}

void print_header() {
  std::printf("%-20s %-34s %6s %-22s %9s %9s %9s %8s %8s %9s %7s %s\n", "op", "shape", "T", "config",
              "med_us", "p10_us", "p90_us", "TFLOP/s", "GB/s", "floor_us", "xfloor", "note");
}

void print_row(const Row& r, const Ceilings& c) {
  const double s = r.t.median_us * 1e-6;
  std::printf("%-20s %-34s %6d %-22s %9.2f %9.2f %9.2f %8.1f %8.0f %9.2f %7.3f %s%s%s\n",
              r.op.c_str(), r.shape.c_str(), r.tokens, (r.config + (r.mode.empty() ? "" : "/" + r.mode)).c_str(),
              r.t.median_us, r.t.p10_us, r.t.p90_us, s > 0 ? r.flops / s / 1e12 : 0.0,
              s > 0 ? r.bytes / s / 1e9 : 0.0, r.floor_us,
              r.floor_us > 0 ? r.t.median_us / r.floor_us : 0.0, r.floor_kind.c_str(),
              r.note.empty() ? "" : " ", r.note.c_str());
  std::fflush(stdout);
}

void write_json(const std::string& path, const Ceilings& c, const std::vector<Row>& rows,
                const std::string& command) {
  FILE* f = std::fopen(path.c_str(), "w");
  FMOE_REQUIRE(f, "cannot write the benchmark JSON to \"%s\"", path.c_str());
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::fprintf(f, "{\n  \"date\": \"%s\",\n  \"commit\": \"%s\",\n  \"command\": \"%s\",\n", date,
               FMOE_GIT_COMMIT, json_escape(command).c_str());
  std::fprintf(f,
               "  \"device\": {\"name\": \"%s\", \"sm_count\": %d, \"l2_bytes\": %.0f, "
               "\"sm_clock_max_mhz\": %d, \"mem_clock_max_mhz\": %d, \"driver\": %d, \"runtime\": %d},\n",
               json_escape(c.device).c_str(), c.sm_count, c.l2_bytes, c.sm_clock_mhz,
               c.mem_clock_mhz, c.driver, c.runtime);
  std::fprintf(f,
               "  \"ceilings\": {\"copy_gbps\": %.1f, \"copy_source\": \"%s\", "
               "\"copy_kernel_gbps\": %.1f, \"copy_nc8_gbps\": %.1f, \"read_gbps\": %.1f, "
               "\"memcpy_gbps\": %.1f, \"memcpy_nograph_gbps\": %.1f, "
               "\"fp8_gemm_tflops\": %.1f, \"bf16_gemm_tflops\": %.1f},\n",
               c.copy_gbps, json_escape(c.copy_source).c_str(), c.copy_kernel_gbps,
               c.copy_nc8_gbps, c.read_gbps, c.memcpy_gbps, c.memcpy_nograph_gbps, c.fp8_tflops,
               c.bf16_tflops);
  std::fprintf(f, "  \"rows\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double s = r.t.median_us * 1e-6;
    std::fprintf(f,
                 "    {\"op\": \"%s\", \"shape\": \"%s\", \"tokens\": %d, \"config\": \"%s\", "
                 "\"mode\": \"%s\", \"median_us\": %.3f, \"p10_us\": %.3f, \"p90_us\": %.3f, "
                 "\"samples\": %d, \"flops\": %.0f, \"bytes\": %.0f, \"weight_bytes\": %.0f, "
                 "\"tflops\": %.2f, \"gbps\": %.1f, \"floor_us\": %.3f, \"floor_kind\": \"%s\", "
                 "\"x_floor\": %.4f, \"note\": \"%s\"}%s\n",
                 json_escape(r.op).c_str(), json_escape(r.shape).c_str(), r.tokens,
                 json_escape(r.config).c_str(), json_escape(r.mode).c_str(), r.t.median_us,
                 r.t.p10_us, r.t.p90_us, r.t.samples, r.flops, r.bytes, r.weight_bytes,
                 s > 0 ? r.flops / s / 1e12 : 0.0, s > 0 ? r.bytes / s / 1e9 : 0.0, r.floor_us,
                 r.floor_kind.c_str(), r.floor_us > 0 ? r.t.median_us / r.floor_us : 0.0,
                 json_escape(r.note).c_str(), i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
}

}  // namespace fusedmoe::bench
