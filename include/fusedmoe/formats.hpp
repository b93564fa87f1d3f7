// fusedmoe: host codecs and quantizers, bit-exact with the device kernels.
//
// Rounding is round-to-nearest-even everywhere. Non-finite policy: a NaN or Inf inside a
// quantization block poisons that block (its dequantized values are NaN), never silently finite.
#pragma once

#include <cstdint>

namespace fusedmoe::fmt {

// ---- scalar codecs -----------------------------------------------------------------------------
/// FP8 E4M3 ("fn"): RNE, finite values beyond 448 saturate to +-448, Inf saturates to +-448,
/// NaN becomes 0x7F/0xFF. Subnormals down to 2^-9.
uint8_t e4m3_from_float(float x);
float e4m3_to_float(uint8_t code);
constexpr float kE4M3Max = 448.0f;

/// FP4 E2M1 (4-bit code in the low nibble): magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}, RNE,
/// saturating at +-6. E2M1 has no NaN: NaN maps to +0 (the block scale carries the NaN).
uint8_t e2m1_from_float(float x);
float e2m1_to_float(uint8_t code);
constexpr float kE2M1Max = 6.0f;

/// UE8M0: the smallest power of two >= x (round up, so a scale never shrinks), for x > 0.
/// x <= 0 gives 2^-127 (code 0); NaN gives 0xFF; values above 2^127 give 2^127.
uint8_t ue8m0_from_float_ceil(float x);
float ue8m0_to_float(uint8_t code);

/// bfloat16 and IEEE half as raw bits: RNE, overflow to Inf, NaN stays NaN (quiet).
uint16_t bf16_from_float(float x);
float bf16_to_float(uint16_t bits);
uint16_t f16_from_float(float x);
float f16_to_float(uint16_t bits);
/// bf16 round trip of a float: the value a bf16 store would keep.
inline float round_to_bf16(float x) { return bf16_to_float(bf16_from_float(x)); }

// ---- quantizers --------------------------------------------------------------------------------
/// Activations, one fp32 scale per token per 128 columns (the last block may be partial):
///   amax = max|x| over the block; scale = amax / 448; q = e4m3(x * (448 / amax)).
/// An all-zero block has scale 0 and codes 0.
/// x, q: [rows, cols] row-major; scales: [rows, ceil(cols/128)].
void quantize_fp8_per_token_128(const float* x, int64_t rows, int64_t cols, uint8_t* q,
                                float* scales);
/// The same rule with `block` columns per scale (the FP8 layer quantizes its intermediate per 64:
/// one GEMM 1 tile holds 64 intermediate values; or per 128 in fast mode where a two-wave tile
/// holds 128). scales: [rows, ceil(cols/block)].
void quantize_fp8_per_token(const float* x, int64_t rows, int64_t cols, int block, uint8_t* q,
                            float* scales);

/// Weights, one fp32 scale per 128x128 block (DeepSeek-V3 `weight_scale_inv`: w ~= q * scale),
/// partial edge blocks use only the elements that exist. Same rule as above per block.
/// w, q: [rows, cols]; scale_inv: [ceil(rows/128), ceil(cols/128)].
void quantize_fp8_block_128x128(const float* w, int64_t rows, int64_t cols, uint8_t* q,
                                float* scale_inv);

/// NVFP4 (ModelOpt): global = amax(tensor) / (6 * 448) (`weight_scale_2`; 1 when amax is 0);
/// per 16 columns s = e4m3((amax16 / 6) / global); value = e2m1(x / (float(s) * global)).
/// Dequantized: e2m1 * float(s) * global. cols must be a multiple of 16.
/// x: [rows, cols]; packed: [rows, cols/2], element 2j in the low nibble of byte j;
/// block_scales: [rows, cols/16] e4m3 codes.
float nvfp4_global_scale(float amax);
void quantize_nvfp4(const float* x, int64_t rows, int64_t cols, float global_scale,
                    uint8_t* packed, uint8_t* block_scales);
/// MXFP4 (OCP MX, as gpt-oss ships its experts): one UE8M0 scale per 32 columns,
/// s = ue8m0_from_float_ceil(amax32 / 6) (rounded up, so no value clips; the OCP spec's
/// floor(log2(amax)) - 2 rule would clip the largest values by up to 1.33x), value = e2m1(x / s).
/// An all-zero block has scale code 0 (2^-127) and zero codes; a NaN or Inf in a block gives it
/// the NaN scale 0xFF. cols must be a multiple of 32.
/// x: [rows, cols]; packed: [rows, cols/2] (even element in the low nibble);
/// scales: [rows, cols/32] ue8m0 codes.
void quantize_mxfp4(const float* x, int64_t rows, int64_t cols, uint8_t* packed, uint8_t* scales);
/// Max |x| of a buffer, NaN-propagating (a NaN anywhere gives NaN).
float abs_max(const float* x, int64_t n);

// ---- dequantizers (the values the kernels multiply) --------------------------------------------
void dequantize_fp8_per_token_128(const uint8_t* q, const float* scales, int64_t rows,
                                  int64_t cols, float* x);
void dequantize_fp8_block_128x128(const uint8_t* q, const float* scale_inv, int64_t rows,
                                  int64_t cols, float* w);
void dequantize_nvfp4(const uint8_t* packed, const uint8_t* block_scales, float global_scale,
                      int64_t rows, int64_t cols, float* x);

void dequantize_mxfp4(const uint8_t* packed, const uint8_t* scales, int64_t rows, int64_t cols,
                      float* x);

}  // namespace fusedmoe::fmt
