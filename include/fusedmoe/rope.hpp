// fusedmoe: rotary position embedding (RoPE) of attention heads, in place.
//
// The rotation is applied to the LAST rope_dim values of every head: DeepSeek's MLA keeps its
// rope part at the end of each q head (q [T, 128, 192], rope_dim 64); with rope_dim == head_dim
// it is the whole head, as in Llama and Qwen. cos/sin come from a precomputed fp32 cache in
// vLLM's layout, so a model's own frequencies (YaRN, Llama 3 scaling, ...) need nothing here.
#pragma once

#include <cstdint>

#include "fusedmoe/stream.hpp"
#include "fusedmoe/types.hpp"

namespace fusedmoe {

/// Which values of the rope part form the rotated pairs; pair i always uses cos[i] and sin[i].
enum class RopeStyle : uint8_t {
  neox,  ///< (i, i + rope_dim/2): GPT-NeoX, Llama, Qwen, DeepSeek's HF checkpoints
  gptj,  ///< (2i, 2i + 1), interleaved: GPT-J, and DeepSeek's original weights
};

/// A lower-case name ("neox", "gptj") for messages and the CLI.
const char* rope_style_name(RopeStyle s);

struct RopeArgs {
  /// [T, num_q_heads, head_dim] bf16, f16 or f32, rotated in place. The last dimension must be
  /// contiguous; token and head strides are free (a q slice of a fused qkv buffer works), as
  /// long as the rope parts of different heads do not share memory.
  TensorRef q;
  /// Optional (data == nullptr: absent) [T, num_k_heads, head_dim] with q's dtype and head_dim,
  /// rotated in place as q is. Must not share memory with q.
  TensorRef k;
  /// [T] i32 or i64 (any stride): the position of each token, a row of cos_sin_cache.
  TensorRef positions;
  /// [max_position, rope_dim] f32, contiguous: row p holds cos(p * f_i) for i < rope_dim/2,
  /// then sin(p * f_i) (vLLM's cos_sin_cache).
  TensorRef cos_sin_cache;
  /// Values rotated at the end of each head: even, in [2, head_dim], at most 4096.
  int rope_dim = 0;
  RopeStyle style = RopeStyle::neox;
  /// Rotate by -theta (undoes a forward rotation up to rounding).
  bool inverse = false;
  /// Optional [1] i32 device counter: each position outside [0, max_position) adds 1 and the
  /// heads of its token are left unchanged (that cache row is never read). data == nullptr: bad
  /// positions are still skipped, just not counted. The counter is added to, never reset.
  TensorRef bad_position_count;
  /// Programmatic dependent launch: the kernel starts before the previous kernel on `stream`
  /// has finished, reads positions and cos_sin_cache, and waits for that kernel before it
  /// touches q, k or bad_position_count. Only set this when no kernel still running ahead of it
  /// on the stream writes positions or cos_sin_cache.
  bool pdl = false;
};

/// Enqueues the rotation on `stream` (no host synchronization; graph-capturable). For each pair
/// (x, y) of a head's rope part at its token's position p, in fp32:
///   x' = x * cos[p, i] - y * sin[p, i],   y' = y * cos[p, i] + x * sin[p, i]   (inverse: -sin)
/// rounded once to the storage dtype. Only the rope parts are read and written. T = 0 does
/// nothing. Throws fusedmoe::Error naming the argument on a wrong dtype, shape, stride,
/// alignment, device, an odd rope_dim, rope_dim > head_dim, a cache of the wrong shape, or a
/// GPU that is not sm_90.
void rope(const RopeArgs& args, Stream stream);

}  // namespace fusedmoe
