// fusedmoe: NVFP4 block-scaled GEMV on Hopper (CUDA cores decode, tensor cores multiply).
//
// NVFP4 as ModelOpt checkpoints hold it: E2M1 values packed two per byte (even element in the low
// nibble), one E4M3 scale per 16 consecutive values along K, one fp32 global scale per matrix;
// value = e2m1 * e4m3 * global. Both entry points read that plain row-major layout directly (no
// re-layout step is needed: the kernels load each row's scales with the row's values).
#pragma once

#include "fusedmoe/stream.hpp"
#include "fusedmoe/types.hpp"

namespace fusedmoe {

/// Batched GEMV: c[l, m] = sum_k A_l[m, k] * b_l[k] for l in [0, L), with A_l an NVFP4 matrix
/// of M x K and b_l either an NVFP4 vector (the GPUMODE nvfp4_gemv contest's form) or a bf16
/// vector (weight-only 4-bit). fp32 accumulation; c written once, rounded to its dtype.
struct GemvNvfp4Args {
  TensorRef a;         ///< [L, M, K/2] e2m1x2 (or [M, K/2] when L = 1); last dim contiguous,
                       ///< base 16-byte aligned. K must be a multiple of 16.
  TensorRef a_scale;   ///< [L, M, K/16] e4m3 (or [M, K/16]), last dim contiguous
  TensorRef a_global;  ///< [L] f32 (one per matrix; [1] or a scalar view when L = 1)
  TensorRef b;         ///< NVFP4: [L, K/2] e2m1x2; bf16: [L, K] bf16 (or [K/2] / [K] when L = 1)
  TensorRef b_scale;   ///< [L, K/16] e4m3 for an NVFP4 b; data == nullptr for a bf16 b
  TensorRef b_global;  ///< [L] f32 for an NVFP4 b; data == nullptr for a bf16 b
  TensorRef c;         ///< [L, M] f16 / bf16 / f32 (or [M] when L = 1), any positive strides:
                       ///< an (M, L) column-major c is the view with stride {1, L}
  /// Programmatic dependent launch: the kernel starts streaming A before the previous kernel on
  /// `stream` has finished, and waits for it before it reads b or writes c. Only set this when
  /// no kernel still running ahead of it on the stream writes a, a_scale or a_global.
  bool pdl = false;
};

/// Enqueues the batched GEMV on `stream` (no host synchronization; graph-capturable).
/// Throws fusedmoe::Error naming the argument on a wrong dtype, shape, stride, alignment,
/// device, K not a multiple of 16, or a GPU that is not sm_90.
/// Precision: E2M1 x E4M3 products are exact in fp16, and the products of A and b are summed in
/// fp32. A bf16 b is scaled by a power of two per vector and converted to fp16 (exact for
/// elements within 2^28 of the vector's largest magnitude; smaller ones keep fp16-subnormal
/// precision).
void gemv_nvfp4(const GemvNvfp4Args& args, Stream stream);

/// The MoE decode projection with NVFP4 expert weights, one GEMV per (token, selected expert):
///   y[t, n] = sum_j weights[t, j] * sum_k W_{ids[t, j]}[n, k] * x[t, k].
/// Each selected expert's weights are read once per group of up to 8 tokens, however many of
/// those tokens picked it. Meant for a handful of tokens (decode); any T works.
struct MoeGemvNvfp4Args {
  TensorRef w;             ///< [E, N, K/2] e2m1x2, last dim contiguous, base 16-byte aligned
  TensorRef w_scale;       ///< [E, N, K/16] e4m3, last dim contiguous
  TensorRef w_global;      ///< [E] f32
  TensorRef x;             ///< [T, K] bf16, last dim contiguous
  TensorRef topk_ids;      ///< [T, k] i32, last dim contiguous
  TensorRef topk_weights;  ///< [T, k] f32, last dim contiguous
  TensorRef y;             ///< [T, N] f16 / bf16 / f32, any positive strides; fully written
  /// Optional [1] i32 device counter: each id outside [0, E) adds 1 (data == nullptr: not
  /// counted). Such an id is never dereferenced: its route contributes nothing to y.
  TensorRef bad_id_count;
  /// As in GemvNvfp4Args; here the kernel can only get its launch ahead of the previous kernel,
  /// since the expert weights it streams depend on topk_ids.
  bool pdl = false;
};

/// Enqueues the MoE decode GEMV on `stream` (no host synchronization; graph-capturable).
/// Throws fusedmoe::Error as gemv_nvfp4 does. The precision contract of x is that of a bf16 b.
void moe_gemv_nvfp4(const MoeGemvNvfp4Args& args, Stream stream);

}  // namespace fusedmoe
