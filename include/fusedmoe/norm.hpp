// fusedmoe: RMSNorm fused with the quantization of its output (the input of the next GEMM).
//
// One pass over each row: h = x (or bf16(x + residual), written back into residual, vLLM's
// fused_add_rms_norm), y = h / rms(h) * weight in fp32, then y is stored as bf16, as FP8 E4M3
// with one fp32 scale per 128 columns (the FP8 layer's activation form), or as NVFP4 (E2M1 pairs
// with one E4M3 scale per 16 columns under a per-tensor global scale, ModelOpt's activation form).
#pragma once

#include "fusedmoe/stream.hpp"
#include "fusedmoe/types.hpp"

namespace fusedmoe {

/// Arguments of rmsnorm_quant. Every tensor lives in the memory of one CUDA device.
///
/// Math, per row t (all fp32, each operation correctly rounded):
///   h[c]    = x[t, c], or bf16_rne(float(x[t, c]) + float(residual[t, c])) when residual is given
///   inv_rms = 1 / sqrt(sum_c h[c]^2 / H + eps)   (the sum in an unspecified order)
///   y[c]    = (h[c] * inv_rms) * float(weight[c])
/// and the output is bf16_rne(y) (bf16 out), fmt::quantize_fp8_per_token_128(y) (e4m3 out) or
/// fmt::quantize_nvfp4(y, global_scale) (e2m1x2 out), bit for bit: the quantizers see the fp32 y,
/// never a bf16-rounded one.
///
/// Non-finite values are never turned silently into finite ones:
/// - a row whose sum of squares is not finite (a NaN or Inf in h, or |h| values beyond ~1e19
///   whose squares overflow fp32) gets inv_rms = NaN, so every output of the row is NaN (bf16)
///   or has a NaN scale (fp8, nvfp4);
/// - a quantization block whose y holds a NaN or an Inf (from a non-finite weight) gets a NaN
///   scale (fp8: the f32 NaN, nvfp4: an E4M3 NaN code); the codes of such an fp8 block are
///   unspecified, those of an nvfp4 block are 0, as fmt::quantize_nvfp4 writes them;
/// - a global_scale that is not positive and finite makes every nvfp4 block scale NaN (codes 0).
struct RmsNormQuantArgs {
  TensorRef x;         ///< [T, H] bf16, last dim contiguous, any row stride
  /// Optional (data == nullptr: none) [T, H] bf16, last dim contiguous: read, then overwritten
  /// with h. Must not overlap x, weight or the outputs.
  TensorRef residual;
  TensorRef weight;    ///< [H] bf16, contiguous (RMSNorm's gamma)
  float eps = 1e-6f;   ///< positive and finite
  /// The output form follows its dtype: bf16 [T, H], e4m3 [T, H] or e2m1x2 [T, H/2] (NVFP4,
  /// H a multiple of 16; element 2j in the low nibble of byte j). Last dim contiguous, any row
  /// stride, fully written; nothing outside its elements is touched. A bf16 out may be x itself
  /// (the same data and strides: in-place normalization); any other overlap with an input is
  /// unsupported.
  TensorRef out;
  /// e4m3 out: [T, ceil(H/128)] f32 (scale = amax / 448 per 128 columns, the last block partial);
  /// e2m1x2 out: [T, H/16] e4m3 block scales; bf16 out: empty (data == nullptr). Last dim
  /// contiguous.
  TensorRef out_scale;
  /// e2m1x2 out only: [1] f32 (or a 0-d tensor), the activation's per-tensor global scale
  /// (ModelOpt's input_scale), read on the device; other forms: empty.
  TensorRef global_scale;
  /// Optional (data == nullptr: not written) [T] f32, any stride: the inv_rms each row was
  /// normalized with, exactly as the kernel used it (for a backward pass, or to reproduce the
  /// outputs bit for bit on the host).
  TensorRef inv_rms;
  /// Programmatic dependent launch: the kernel may start while the previous kernel on `stream`
  /// drains; it reads weight before waiting for that kernel, and everything else after. Only set
  /// this when no kernel still running ahead of it writes weight.
  bool pdl = false;
};

/// Enqueues the fused RMSNorm + quantize on `stream` (no host synchronization; graph-capturable).
/// T = 0 is a no-op. H >= 1 (bf16, e4m3 out) or a multiple of 16 (e2m1x2 out); rows of any
/// alignment and length work (16-byte aligned rows of H % 8 == 0 and H <= 16384 take the fast
/// kernel, which keeps each row in registers).
/// Throws fusedmoe::Error naming the argument, with expected vs actual, on a wrong dtype, shape,
/// stride, alignment (element size), device, a missing or superfluous scale tensor, eps <= 0 or
/// not finite, or a GPU that is not sm_90.
void rmsnorm_quant(const RmsNormQuantArgs& args, Stream stream);

}  // namespace fusedmoe
