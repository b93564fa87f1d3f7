// Benchmark harness: CUDA-graph timing, the card's measured ceilings, result rows and JSON.
//
// Method (docs/performance.md): warm up once (lazy loading, first-touch), capture `per_graph`
// launches in one CUDA graph, replay it `reps` times between CUDA events, report the median per
// launch with p10/p90. Cold-L2 runs rotate among input sets whose total size exceeds the L2.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <vector>

namespace fusedmoe::bench {

struct Stats {
  double median_us = 0, p10_us = 0, p90_us = 0;
  int samples = 0;
};

/// launch(stream, i) enqueues launch number i (use i to rotate input sets). Returns per-launch
/// time statistics over `reps` replays of a graph of `per_graph` launches.
Stats time_graph(const std::function<void(cudaStream_t, int)>& launch, cudaStream_t stream,
                 int per_graph = 20, int reps = 30);

/// Measured once per process on the current device.
struct Ceilings {
  std::string device;
  int sm_count = 0;
  double l2_bytes = 0;
  int sm_clock_mhz = 0, mem_clock_mhz = 0;  ///< maximum clocks (attributes)
  int driver = 0, runtime = 0;
  /// The byte ceiling: the fastest of the ways below to stream 1 GiB (bytes moved per second:
  /// read + written for copies, read for the read-only stream); `copy_source` names the winner.
  double copy_gbps = 0;
  std::string copy_source;
  double copy_kernel_gbps = 0;       ///< copy_cs4: 16-byte streaming loads/stores, 4 in flight
  double copy_nc8_gbps = 0;          ///< copy_nc8: non-coherent loads, 8 in flight
  double read_gbps = 0;              ///< read_nc8: a read-only stream (what a weight stream is)
  double memcpy_gbps = 0;            ///< cudaMemcpyAsync device to device in a CUDA graph
  double memcpy_nograph_gbps = 0;    ///< the same, launched directly (no graph)
  double fp8_tflops = 0;       ///< cuBLASLt e4m3 x e4m3 -> bf16, 8192^3
  double bf16_tflops = 0;      ///< cuBLASLt bf16, 8192^3
};
const Ceilings& ceilings(cudaStream_t stream);

/// One measured row. `floor_us` is the larger of the byte floor (bytes / copy bandwidth) and the
/// compute floor (flops / dense rate); ratio = median / floor.
struct Row {
  std::string op, shape, config, mode;
  int tokens = 0;
  Stats t;
  double flops = 0;        ///< useful FLOPs of one launch
  double bytes = 0;        ///< fewest bytes one launch must move (weights hit + scales + I/O)
  double weight_bytes = 0; ///< the weight part of `bytes`
  double floor_us = 0;
  std::string floor_kind;  ///< "bytes" or "fp8" / "bf16" compute
  std::string note;
};

/// Fills floor_us / floor_kind from bytes, flops and the ceilings (compute rate by `rate`).
void set_floor(Row& r, const Ceilings& c, const char* rate = "fp8");

/// Prints the table header / a row (µs, TFLOP/s, GB/s, % of ceilings, x floor).
void print_header();
void print_row(const Row& r, const Ceilings& c);

/// Writes {device, clocks, commit, ceilings, rows} to `path`.
void write_json(const std::string& path, const Ceilings& c, const std::vector<Row>& rows,
                const std::string& command);

/// The kernels of the bandwidth ceiling (bench/ceilings.cu). read_nc8 reads src only (dst: a
/// 4-byte sink).
enum class StreamKernel { copy_cs4, copy_nc8, read_nc8 };
void launch_stream_kernel(StreamKernel k, const void* src, void* dst, size_t bytes,
                          cudaStream_t stream);

}  // namespace fusedmoe::bench
