// Host side of RoPE: argument validation, the config (vector width) and grid choice, kernel
// parameters.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <string>

#include "common/device_state.hpp"
#include "common/env.hpp"
#include "common/tensor_check.hpp"
#include "fusedmoe/error.hpp"
#include "fusedmoe/rope.hpp"
#include "rope/rope_launch.hpp"

namespace fusedmoe {

const char* rope_style_name(RopeStyle s) {
  switch (s) {
    case RopeStyle::neox: return "neox";
    case RopeStyle::gptj: return "gptj";
  }
  return "unknown";
}

namespace detail {

// ---- the config table ----------------------------------------------------------------------------
namespace {
const RopeConfigInfo kConfigs[] = {
#define FMOE_ROPE(name, dtype, vec_bytes) {#name, dtype, vec_bytes},
#include "rope/rope_configs.def"
#undef FMOE_ROPE
};
constexpr int kNumConfigs = int(sizeof(kConfigs) / sizeof(kConfigs[0]));
static_assert(kNumConfigs == int(RopeConfigId::count), "config table and ids out of step");

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

RopeConfigInfo rope_config_info(RopeConfigId id) {
  FMOE_REQUIRE(int(id) >= 0 && int(id) < kNumConfigs, "rope: unknown config id %d", int(id));
  return kConfigs[int(id)];
}

RopeConfigId rope_config_by_name(const std::string& name) {
  for (int i = 0; i < kNumConfigs; ++i)
    if (name == kConfigs[i].name) return RopeConfigId(i);
  return RopeConfigId::count;
}

// ---- the grid --------------------------------------------------------------------------------------
RopeGrid rope_grid(const RopeProblem& p, int vec_bytes) {
  const int V = vec_bytes / int(dtype_bytes(p.dtype));
  const int64_t items_per_head = p.rope_dim / (2 * V);
  const int64_t ipt = p.heads * items_per_head;  // items per token
  RopeGrid g;
  if (ipt >= kRopeSlotsPerCta / 2) {
    // A token fills at least half a CTA (DeepSeek q: 128 heads x 4 items = 512; Llama q + k:
    // 40 x 8 = 320): one token per CTA, its items split into ranges of at most a full CTA.
    int64_t ranges = cdiv(ipt, kRopeSlotsPerCta);
    // Few tokens (decode): split each token over more, smaller CTAs until every SM has one, so
    // the bytes stream through many SMs instead of a few (each range still at least one warp).
    if (p.T * ranges < p.num_sms)
      ranges = std::max(ranges, std::min(cdiv(ipt, kRopeMinSlots), cdiv(p.num_sms, std::max<int64_t>(p.T, 1))));
    g.items_per_cta = int(cdiv(ipt, ranges));  // balanced ranges: no short last one
    g.blocks_y = int(cdiv(ipt, g.items_per_cta));
    g.tokens_per_cta = 1;
  } else {
    // Small heads: whole tokens per CTA, as many as fill it (and whose cos/sin rows fit the
    // staging area), but no more than spreads the tokens over every SM, and at least a warp's
    // worth of items.
    const int64_t fill = std::max<int64_t>(1, std::min<int64_t>(kRopeSlotsPerCta / ipt, kRopeMaxStagedFloats / p.rope_dim));
    const int64_t spread = std::max(cdiv(kRopeMinSlots, ipt), cdiv(p.T, p.num_sms));
    g.tokens_per_cta = int(std::max<int64_t>(1, std::min(fill, spread)));
    g.items_per_cta = int(ipt);
    g.blocks_y = 1;
  }
  const int64_t slots = int64_t(g.tokens_per_cta) * g.items_per_cta;
  g.threads = int(cdiv(cdiv(slots, kRopeItemsPerThread), 32) * 32);
  g.blocks_x = cdiv(p.T, g.tokens_per_cta);
  g.smem_bytes = rope_smem_bytes(g.tokens_per_cta, p.rope_dim);
  return g;
}

RopeChoice select_rope_config(const RopeProblem& p, const char* forced) {
  RopeChoice ch;
  // A forced config (FMOE_FORCE_CONFIG): names of other ops' configs are theirs, not an error.
  if (forced && *forced) {
    const RopeConfigId id = rope_config_by_name(forced);
    if (id != RopeConfigId::count) {
      const RopeConfigInfo c = rope_config_info(id);
      FMOE_REQUIRE(c.dtype == p.dtype, "FMOE_FORCE_CONFIG=%s is a %s rope config; q is %s", forced,
                   dtype_name(c.dtype), dtype_name(p.dtype));
      FMOE_REQUIRE(c.vec_bytes <= p.max_vec_bytes,
                   "FMOE_FORCE_CONFIG=%s needs %d-byte vectors; this call allows %d (%s)", forced,
                   c.vec_bytes, p.max_vec_bytes, p.vec_why.c_str());
      ch.id = id;
      ch.reason = "forced by FMOE_FORCE_CONFIG";
      ch.grid = rope_grid(p, c.vec_bytes);
      return ch;
    }
  }
  // Memory-bound: the widest vector the layout allows (16 bytes: 8 bf16 pairs per item, the
  // fewest instructions per byte); the narrower configs exist for layouts that are not aligned.
  int best = -1;
  for (int i = 0; i < kNumConfigs; ++i)
    if (kConfigs[i].dtype == p.dtype && kConfigs[i].vec_bytes <= p.max_vec_bytes &&
        (best < 0 || kConfigs[i].vec_bytes > kConfigs[best].vec_bytes))
      best = i;
  FMOE_REQUIRE(best >= 0, "rope: no compiled config for %s with vectors of at most %d bytes",
               dtype_name(p.dtype), p.max_vec_bytes);
  ch.id = RopeConfigId(best);
  ch.grid = rope_grid(p, kConfigs[best].vec_bytes);
  ch.reason = kConfigs[best].vec_bytes == 16
                  ? std::string("16-byte vectors")
                  : strf("%d-byte vectors: %s", kConfigs[best].vec_bytes, p.vec_why.c_str());
  ch.reason += strf("; %d token(s) x %d items per CTA, %d threads, %" PRId64 " x %d CTAs",
                    ch.grid.tokens_per_cta, ch.grid.items_per_cta, ch.grid.threads,
                    ch.grid.blocks_x, ch.grid.blocks_y);
  return ch;
}

}  // namespace detail

// ================================================================================================
// Validation and launch.
// ================================================================================================
namespace {
constexpr const char* kOp = "rope";

// Largest power of two (<= 16) dividing v; 16 for v == 0.
int pow2_divisor(uint64_t v) {
  int b = 16;
  while (b > 1 && v % uint64_t(b) != 0) b /= 2;
  return b;
}

// q or k: [T, heads, head_dim] of a float dtype, last dim contiguous, elements aligned, and the
// rope parts of different heads apart in memory (they are written in place).
void check_heads(const char* name, const TensorRef& t, int rope_dim) {
  FMOE_REQUIRE(t.ndim == 3, "%s: %s must be [T, heads, head_dim], got %s", kOp, name, t.describe().c_str());
  FMOE_REQUIRE(t.dtype == DType::bf16 || t.dtype == DType::f16 || t.dtype == DType::f32,
               "%s: %s must be bf16, f16 or f32, got %s", kOp, name, t.describe().c_str());
  detail::check_data(kOp, name, t);
  detail::check_on_device(kOp, name, t);
  detail::check_unit_inner_stride(kOp, name, t);
  FMOE_REQUIRE(t.stride[0] >= 0 && t.stride[1] >= 0, "%s: %s has a negative stride {%lld, %lld, 1}",
               kOp, name, (long long)t.stride[0], (long long)t.stride[1]);
  const size_t eb = dtype_bytes(t.dtype);
  FMOE_REQUIRE(reinterpret_cast<uintptr_t>(t.data) % eb == 0,
               "%s: %s must be %zu-byte aligned (its element size), got address %p", kOp, name, eb, t.data);
  // Distinct heads: the [T, H] grid of R-element rope parts nests one way or the other.
  const int64_t T = t.shape[0], H = t.shape[1], st = t.stride[0], sh = t.stride[1], R = rope_dim;
  const bool heads_inner = (H <= 1 || sh >= R) && (T <= 1 || st >= (H - 1) * sh + R);
  const bool tokens_inner = (T <= 1 || st >= R) && (H <= 1 || sh >= (T - 1) * st + R);
  FMOE_REQUIRE(t.numel() == 0 || heads_inner || tokens_inner,
               "%s: %s strides {%lld, %lld, 1} make the rope parts (%d values) of its [%lld, %lld] "
               "heads overlap; they are rotated in place and need memory of their own",
               kOp, name, (long long)st, (long long)sh, rope_dim, (long long)T, (long long)H);
}

// The widest vector (bytes) every q / k access of this tensor allows; `why` says what limits it.
int tensor_vec_bytes(const char* name, const TensorRef& t, int rope_dim, std::string& why) {
  const int64_t eb = int64_t(dtype_bytes(t.dtype));
  const uint64_t base = reinterpret_cast<uintptr_t>(t.data) + uint64_t((t.shape[2] - rope_dim) * eb);
  struct Part {
    const char* what;
    uint64_t bytes;
  };
  const Part parts[] = {
      {"the rope part's address", base},
      {"the token stride", t.shape[0] > 1 ? uint64_t(t.stride[0] * eb) : 0},
      {"the head stride", t.shape[1] > 1 ? uint64_t(t.stride[1] * eb) : 0},
      // x and y of a pair: rope_dim/2 apart (neox); gptj items are rope_dim/2-aligned too.
      {"rope_dim / 2", uint64_t(rope_dim / 2 * eb)},
  };
  int best = 16;
  for (const Part& pt : parts) {
    const int b = pow2_divisor(pt.bytes);
    if (b < best) {
      best = b;
      why = strf("%s of %s is %llu bytes, a multiple of %d but not of %d", pt.what, name,
                 (unsigned long long)pt.bytes, b, 2 * b);
    }
  }
  return best;
}

struct Prepared {
  detail::RopeParams p;
  detail::RopeProblem prob;
  int device = 0;
  bool empty = false;
};

Prepared prepare(const RopeArgs& a) {
  Prepared pr;
  detail::RopeParams& p = pr.p;
  const TensorRef& q = a.q;
  const bool has_k = a.k.data != nullptr;
  FMOE_REQUIRE(a.style == RopeStyle::neox || a.style == RopeStyle::gptj,
               "%s: style must be RopeStyle::neox or RopeStyle::gptj, got code %d", kOp, int(a.style));
  FMOE_REQUIRE(q.ndim == 3, "%s: q must be [T, num_q_heads, head_dim], got %s", kOp, q.describe().c_str());
  const int64_t T = q.shape[0], D = q.shape[2];
  const int R = a.rope_dim;
  FMOE_REQUIRE(R > 0 && R % 2 == 0, "%s: rope_dim must be a positive even number, got %d", kOp, R);
  FMOE_REQUIRE(R <= D, "%s: rope_dim = %d is larger than head_dim = %lld (q %s)", kOp, R,
               (long long)D, q.describe().c_str());
  FMOE_REQUIRE(R <= detail::kRopeMaxRopeDim, "%s: rope_dim = %d; at most %d is supported", kOp, R,
               detail::kRopeMaxRopeDim);
  check_heads("q", q, R);
  const int device = q.device_index;
  if (has_k) {
    const TensorRef& k = a.k;
    FMOE_REQUIRE(k.ndim == 3 && k.shape[0] == T && k.shape[2] == D,
                 "%s: k must be [%lld, num_k_heads, %lld] (q's T and head_dim), got %s", kOp,
                 (long long)T, (long long)D, k.describe().c_str());
    FMOE_REQUIRE(k.dtype == q.dtype, "%s: k must have q's dtype %s, got %s", kOp, dtype_name(q.dtype),
                 k.describe().c_str());
    check_heads("k", k, R);
    detail::check_same_device(kOp, "k", k, device);
    FMOE_REQUIRE(k.data != q.data || k.numel() == 0 || q.numel() == 0,
                 "%s: k and q are the same memory (%p); they must not overlap", kOp, k.data);
  }
  const TensorRef& pos = a.positions;
  FMOE_REQUIRE(pos.dtype == DType::i32 || pos.dtype == DType::i64, "%s: positions must be i32 or i64, got %s",
               kOp, pos.describe().c_str());
  detail::check_shape(kOp, "positions", pos, {T});
  detail::check_data(kOp, "positions", pos);
  detail::check_on_device(kOp, "positions", pos);
  detail::check_same_device(kOp, "positions", pos, device);
  FMOE_REQUIRE(pos.stride[0] >= 0, "%s: positions has a negative stride %lld", kOp, (long long)pos.stride[0]);
  FMOE_REQUIRE(reinterpret_cast<uintptr_t>(pos.data) % dtype_bytes(pos.dtype) == 0,
               "%s: positions must be %zu-byte aligned (its element size), got address %p", kOp,
               dtype_bytes(pos.dtype), pos.data);
  const TensorRef& cache = a.cos_sin_cache;
  detail::check_dtype(kOp, "cos_sin_cache", cache, DType::f32);
  FMOE_REQUIRE(cache.ndim == 2 && cache.shape[1] == R && cache.shape[0] >= 1,
               "%s: cos_sin_cache must be [max_position, %d] (rope_dim columns: cos then sin), got %s",
               kOp, R, cache.describe().c_str());
  detail::check_contiguous(kOp, "cos_sin_cache", cache);
  detail::check_data(kOp, "cos_sin_cache", cache);
  detail::check_on_device(kOp, "cos_sin_cache", cache);
  detail::check_same_device(kOp, "cos_sin_cache", cache, device);
  detail::check_aligned(kOp, "cos_sin_cache", cache, 4);
  if (a.bad_position_count.data) {
    const TensorRef& bc = a.bad_position_count;
    detail::check_dtype(kOp, "bad_position_count", bc, DType::i32);
    FMOE_REQUIRE(bc.numel() == 1, "%s: bad_position_count must hold one i32, got %s", kOp, bc.describe().c_str());
    detail::check_on_device(kOp, "bad_position_count", bc);
    detail::check_same_device(kOp, "bad_position_count", bc, device);
    detail::check_aligned(kOp, "bad_position_count", bc, 4);
  }
  const int64_t Hq = q.shape[1], Hk = has_k ? a.k.shape[1] : 0;
  // Grid limits: token tiles on grid.x (2^31 - 1), item ranges on grid.y (65535 of >= 64).
  FMOE_REQUIRE(T <= INT32_MAX && (Hq + Hk) * R <= (int64_t(1) << 24),
               "%s: T = %lld, %lld heads x rope_dim %d: at most 2^31 - 1 tokens and 2^24 rotated values per token",
               kOp, (long long)T, (long long)(Hq + Hk), R);

  const size_t eb = dtype_bytes(q.dtype);
  p.q = static_cast<uint8_t*>(q.data) + (D - R) * int64_t(eb);
  p.q_tok_stride = q.stride[0];
  p.q_head_stride = q.stride[1];
  if (has_k && Hk > 0) {
    p.k = static_cast<uint8_t*>(a.k.data) + (D - R) * int64_t(eb);
    p.k_tok_stride = a.k.stride[0];
    p.k_head_stride = a.k.stride[1];
  }
  p.num_q_heads = int(Hq);
  p.num_k_heads = int(Hk);
  p.T = int(T);
  p.positions = pos.data;
  p.positions_stride = pos.stride[0];
  p.positions_i64 = pos.dtype == DType::i64;
  p.cache = static_cast<const float*>(cache.data);
  p.max_position = cache.shape[0];
  p.rope_dim = R;
  p.neox = a.style == RopeStyle::neox;
  p.inverse = a.inverse;
  p.bad_position_count = static_cast<int*>(a.bad_position_count.data);
  p.pdl = a.pdl;

  detail::RopeProblem& prob = pr.prob;
  prob.dtype = q.dtype;
  prob.T = T;
  prob.heads = Hq + Hk;
  prob.rope_dim = R;
  prob.max_vec_bytes = tensor_vec_bytes("q", q, R, prob.vec_why);
  if (has_k && Hk > 0) {
    std::string why_k;
    const int vk = tensor_vec_bytes("k", a.k, R, why_k);
    if (vk < prob.max_vec_bytes) {
      prob.max_vec_bytes = vk;
      prob.vec_why = why_k;
    }
  }
  pr.device = device;
  pr.empty = T == 0 || Hq + Hk == 0;  // nothing to rotate (bad arguments still threw above)
  return pr;
}

detail::RopeChoice choose(Prepared& pr) {
  pr.prob.num_sms = detail::current_device_state(kOp, pr.device).sms;
  const detail::RopeChoice ch = detail::select_rope_config(pr.prob, detail::knobs().force_config.c_str());
  const int V = detail::rope_config_info(ch.id).vec_bytes / int(dtype_bytes(pr.prob.dtype));
  pr.p.items_per_head = pr.p.rope_dim / (2 * V);
  pr.p.items_per_token = (pr.p.num_q_heads + pr.p.num_k_heads) * pr.p.items_per_head;
  pr.p.items_per_cta = ch.grid.items_per_cta;
  pr.p.tokens_per_cta = ch.grid.tokens_per_cta;
  return ch;
}

}  // namespace

void rope(const RopeArgs& args, Stream stream) {
  Prepared pr = prepare(args);
  if (pr.empty) return;
  const detail::RopeChoice ch = choose(pr);
  if (detail::knobs().print_config)
    std::fprintf(stderr, "fusedmoe rope: config %s (%s)\n", detail::rope_config_info(ch.id).name,
                 ch.reason.c_str());
  detail::launch_rope(ch.id, pr.p, ch.grid, stream);
}

namespace detail {
RopeChoice plan_rope(const RopeArgs& args) {
  Prepared pr = prepare(args);
  FMOE_REQUIRE(!pr.empty, "rope: plan_rope on an empty problem (T = %lld, no heads): nothing runs",
               (long long)pr.prob.T);
  return choose(pr);
}
}  // namespace detail

}  // namespace fusedmoe
