// fusedmoe: grouped GEMM with both operands NVFP4 (the GPUMODE NVFP4 grouped-GEMM contest's form,
// seed 001): G independent GEMMs that share N and K, group g with its own number of rows M_g.
//
// NVFP4 as ModelOpt holds it: E2M1 values packed two per byte (even element in the low nibble),
// one E4M3 scale per 16 consecutive values along K, one fp32 global scale per matrix.
// Hopper has no FP4 tensor cores, so both operands are decoded exactly to bf16 (an E2M1 value times
// an E4M3 scale has at most 6 significant bits) and multiplied by bf16 wgmma with fp32
// accumulation; the two global scales go on the fp32 sum. B (the "weights", fixed across calls)
// is re-laid once into the layer engine's prepared 4-bit blocks (src/gemm/e2m1_layout.hpp) and
// decoded in registers; A is decoded into a bf16 workspace by one kernel per call.
#pragma once

#include <cstddef>
#include <memory>

#include "fusedmoe/stream.hpp"
#include "fusedmoe/types.hpp"

namespace fusedmoe {

/// One call: for each group g, rows r in [offsets[g], offsets[g + 1]) of A and C:
///   c[r, n] = a_global[g] * b_global[g] * sum_k dq(a)[r, k] * dq(b_g)[n, k],
///   dq(x)[i, k] = e2m1(x[i, k]) * e4m3(x_scale[i, k / 16]).
/// All tensors in CUDA device memory on the device the weights were prepared on.
struct Nvfp4GroupedGemmArgs {
  TensorRef a;         ///< [M, K/2] e2m1x2, contiguous, 16-byte aligned: every group's rows
  TensorRef a_scale;   ///< [M, K/16] e4m3, contiguous
  TensorRef a_global;  ///< [G] f32 (one per group's A), or data == nullptr: all 1
  TensorRef offsets;   ///< [G + 1] i32: offsets[0] = 0, non-decreasing, offsets[G] = M
  TensorRef c;         ///< [M, N] bf16, f16 or f32, contiguous, 16-byte aligned; fully written
  /// With a stream that is not being captured, the offsets are copied to the host and checked
  /// (this synchronizes the stream): a bad one throws Error naming it. Unchecked, the kernels
  /// clamp them into [0, M] and non-decreasing order (they never read or write out of bounds),
  /// write zeros to the rows of c no group covers, and say so in
  /// Nvfp4GroupedGemm::offsets_clamped.
  bool validate_offsets = true;
};

class Nvfp4GroupedGemm {
 public:
  /// b: [G, N, K/2] e2m1x2, b_scale: [G, N, K/16] e4m3, b_global: [G] f32; contiguous, in device
  /// memory of the current CUDA device. K a multiple of 16, N >= 1, G in [1, 512]. Checks the
  /// scales (a NaN or negative E4M3 scale code throws Error naming its group, row and block) and
  /// re-lays B on the device into memory this object owns. Runs on `stream` and synchronizes it.
  Nvfp4GroupedGemm(const TensorRef& b, const TensorRef& b_scale, const TensorRef& b_global,
                   Stream stream = nullptr);
  ~Nvfp4GroupedGemm();
  Nvfp4GroupedGemm(Nvfp4GroupedGemm&&) noexcept;
  Nvfp4GroupedGemm& operator=(Nvfp4GroupedGemm&&) noexcept;
  Nvfp4GroupedGemm(const Nvfp4GroupedGemm&) = delete;
  Nvfp4GroupedGemm& operator=(const Nvfp4GroupedGemm&) = delete;

  int groups() const;
  int n() const;
  int k() const;
  /// Device bytes of the prepared B.
  size_t prepared_bytes() const;

  /// Workspace bytes for calls with up to max_rows rows of A (all groups together). It needs
  /// no initialization and serves any later call with M <= max_rows.
  size_t workspace_size(int max_rows) const;

  /// Enqueues the A decode and the grouped GEMM on `stream`, joined by programmatic dependent
  /// launch, with no host synchronization (except the optional offsets check): graph-capturable.
  /// Throws Error naming the argument on a wrong dtype, shape, stride, alignment, device or
  /// workspace. NaN or Inf in A (codes or scales) propagate into the rows of c they touch.
  void run(const Nvfp4GroupedGemmArgs& args, void* workspace, size_t workspace_bytes,
           Stream stream) const;

  /// Whether the last call on this workspace had to clamp its offsets (see validate_offsets).
  /// Synchronizes `stream`; for diagnostics.
  bool offsets_clamped(const void* workspace, Stream stream) const;

  struct Impl;
  const Impl& impl() const { return *impl_; }  ///< internals for tests and benchmarks

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace fusedmoe
