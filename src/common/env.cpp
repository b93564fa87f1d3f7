#include "common/env.hpp"

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <optional>

#include "common/text.hpp"
#include "fusedmoe/error.hpp"

namespace fusedmoe::detail {

const KnobInfo kKnobTable[] = {
    {"FMOE_THREADS", "an integer in [1, 4096]", "host threads of the CPU reference (default: all cores)"},
    {"FMOE_PRINT_CONFIG", "0 or 1", "print each op's kernel config and the reason for it"},
    {"FMOE_FORCE_CONFIG", "a config name", "force a compiled kernel config by name (tests, tuning)"},
    {"FMOE_DEBUG_SYNC", "0 or 1", "synchronize after every launch so a fault names its kernel"},
    {"FMOE_NO_PDL", "0 or 1", "turn programmatic dependent launch off (debugging, A/B timing)"},
    {"FMOE_FUSED_SCHEDULE", "0 or 1", "0: keep the schedule kernel at decode sizes (default 1)"},
    {"FMOE_PREFETCH_UNITS", "an integer in [0, 1024]", "L2 weight prefetch before the routing ends (measured useless, default 0)"},
    {"FMOE_SPLIT_K", "0 or 1", "1: the layer's gate/up GEMM splits K at decode wherever a part keeps 2 k-blocks (default 0: only the 4-bit gate/up, parts of >= 32)"},
    {"FMOE_GEMV_MAX_T", "an integer in [0, 8]", "the 4-bit layer runs both GEMMs as decode GEMVs up to this many tokens (0: never; default 8, the most they take)"},
    {"FMOE_EP_TIMEOUT", "an integer in [1, 86400]", "seconds 'run --ep' and 'bench --op ep_layer' wait for their rank processes before ending them (default 1800)"},
    {"FMOE_GEMV_SPLIT", "1, 2 or 4", "K parts inside each CTA of the 4-bit decode GEMVs when they have few CTAs (default: the layer's rule)"},
    {"FMOE_GEMV_DOWN_EARLY", "0 or 1", "the 4-bit down decode GEMV finds its columns and loads its first weights before waiting on the up GEMV (default 1; 0 waits first)"},
    {"FMOE_NARROW_TAILS", "0 or 1", "0: the grouped GEMMs run every token tile at full size (default 1: tail tiles of fp8 / 4-bit weights-as-M configs run narrower wgmmas where their routes fit, and the two-wave tokens-as-M tails of <= 64 routes run at half height, in the gate/up as interleaved pairs)"},
    {"FMOE_LEAN_PRODUCER", "0 or 1", "1: in the layer's bf16 / 4-bit down GEMMs (TMA rows), only the producer warpgroup's first warp runs the k-loop; the other three wait at the next tile's barrier instead of polling the ring; 0: all four (default: the layer's rule, one warp for 4-bit weights in tiles of <= 32 tokens)"},
    {"FMOE_DYNAMIC_ITEMS", "0, 1, 2 or 3", "which of the layer's grouped GEMMs take their tiles after each CTA's first in order from a counter, so the CTAs sharing a weight tile stay together: 1 the gate/up, 2 the down, 3 both (default), 0 neither (round robin); the layer uses it for FP8 tiles with tokens as M, and for FP8 tiles of K >= 4096 where the hit experts average <= 1.03 or >= 3 routes"},
    {"FMOE_ROWS16_MIN_T", "an integer in [0, 1073741824]", "fast mode's down GEMM writes one bf16 row per route, summed by finalize, from this many tokens up (0: never, always fp32 atomics; default: the layer's rule)"},
    {"FMOE_SCHEDULE_ROUTES", "1, 2, 4 or 8", "routes each thread of the schedule kernel ranks (default: the fewest whose grid fits two CTAs an SM)"},
    {"FMOE_FINALIZE_BULK", "0, 1 or 2", "how finalize reads the route rows: 0 one 16-byte load per thread, 2 by bulk copies into shared memory, 1 (default) bulk copies for bf16 rows in slot order (fast mode from 128 routes per expert)"},
    {"FMOE_ROUTE_BLOCK", "0, 1 or 2", "below 1024 tokens, route_quant ranks a token's sigmoid_grouped_topk experts with all four of its warps instead of one warp's serial chain: 1 (default) for grouped routing in groups of whole 32-expert blocks (DeepSeek-V3), 2 also for one group (Kimi K2: measured 1-2% slower at T = 1-2), 0 never"},
    {"FMOE_STATIC_TILES", "0 or 1", "0: the layer's grouped GEMMs number every token tile from the routing (default 1: where the layer's rule says so, each expert's first token tile is numbered before the routing exists)"},
};
const int kNumKnobs = int(sizeof(kKnobTable) / sizeof(kKnobTable[0]));

int parse_knob_int(const char* name, const char* text, int lo, int hi) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  const bool number = end != text && *end == '\0' && text[0] != ' ' && text[0] != '+';
  FMOE_REQUIRE(number, "environment variable %s=%s is not an integer (expected an integer in "
               "[%d, %d])", name, quote_user_text(text).c_str(), lo, hi);
  FMOE_REQUIRE(errno != ERANGE && v >= lo && v <= hi,
               "environment variable %s=%s is out of range (expected an integer in [%d, %d])",
               name, quote_user_text(text).c_str(), lo, hi);
  return int(v);
}

bool parse_knob_bool(const char* name, const char* text) {
  const std::string s = text;
  FMOE_REQUIRE(s == "0" || s == "1", "environment variable %s=%s must be 0 or 1", name,
               quote_user_text(text).c_str());
  return s == "1";
}

namespace {

// An unset or empty variable keeps the default.
const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

Knobs read_knobs() {
  Knobs k;
  if (const char* v = env("FMOE_THREADS")) k.threads = parse_knob_int("FMOE_THREADS", v, 1, 4096);
  if (const char* v = env("FMOE_PRINT_CONFIG")) k.print_config = parse_knob_bool("FMOE_PRINT_CONFIG", v);
  if (const char* v = env("FMOE_FORCE_CONFIG")) {
    const std::string s = v;
    FMOE_REQUIRE(s.size() <= 64 && s.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") ==
                                       std::string::npos,
                 "environment variable FMOE_FORCE_CONFIG=%s is not a config name (lower-case "
                 "letters, digits and '_')", quote_user_text(v).c_str());
    k.force_config = s;
  }
  if (const char* v = env("FMOE_DEBUG_SYNC")) k.debug_sync = parse_knob_bool("FMOE_DEBUG_SYNC", v);
  if (const char* v = env("FMOE_NO_PDL")) k.no_pdl = parse_knob_bool("FMOE_NO_PDL", v);
  if (const char* v = env("FMOE_FUSED_SCHEDULE"))
    k.fused_schedule = parse_knob_bool("FMOE_FUSED_SCHEDULE", v);
  if (const char* v = env("FMOE_PREFETCH_UNITS"))
    k.prefetch_units = parse_knob_int("FMOE_PREFETCH_UNITS", v, 0, 1024);
  if (const char* v = env("FMOE_SPLIT_K")) k.split_k = parse_knob_bool("FMOE_SPLIT_K", v);
  if (const char* v = env("FMOE_NARROW_TAILS"))
    k.narrow_tails = parse_knob_bool("FMOE_NARROW_TAILS", v);
  if (const char* v = env("FMOE_LEAN_PRODUCER"))
    k.lean_producer = parse_knob_bool("FMOE_LEAN_PRODUCER", v) ? 1 : 0;
  if (const char* v = env("FMOE_DYNAMIC_ITEMS"))
    k.dynamic_items = parse_knob_int("FMOE_DYNAMIC_ITEMS", v, 0, 3);
  if (const char* v = env("FMOE_EP_TIMEOUT"))
    k.ep_timeout_s = parse_knob_int("FMOE_EP_TIMEOUT", v, 1, 86400);
  if (const char* v = env("FMOE_GEMV_MAX_T")) k.gemv_max_t = parse_knob_int("FMOE_GEMV_MAX_T", v, 0, 8);
  if (const char* v = env("FMOE_GEMV_SPLIT")) {
    k.gemv_split = parse_knob_int("FMOE_GEMV_SPLIT", v, 1, 4);
    FMOE_REQUIRE(k.gemv_split != 3, "environment variable FMOE_GEMV_SPLIT=%s must be 1, 2 or 4",
                 quote_user_text(v).c_str());
  }
  if (const char* v = env("FMOE_GEMV_DOWN_EARLY"))
    k.gemv_down_early = parse_knob_bool("FMOE_GEMV_DOWN_EARLY", v) ? 1 : 0;
  if (const char* v = env("FMOE_ROWS16_MIN_T"))
    k.rows16_min_t = parse_knob_int("FMOE_ROWS16_MIN_T", v, 0, 1 << 30);
  if (const char* v = env("FMOE_SCHEDULE_ROUTES")) {
    k.schedule_routes = parse_knob_int("FMOE_SCHEDULE_ROUTES", v, 1, 8);
    const int n = k.schedule_routes;
    FMOE_REQUIRE(n == 1 || n == 2 || n == 4 || n == 8,
                 "environment variable FMOE_SCHEDULE_ROUTES=%s must be 1, 2, 4 or 8", quote_user_text(v).c_str());
  }
  if (const char* v = env("FMOE_FINALIZE_BULK")) k.finalize_bulk = parse_knob_int("FMOE_FINALIZE_BULK", v, 0, 2);
  if (const char* v = env("FMOE_ROUTE_BLOCK")) k.route_block = parse_knob_int("FMOE_ROUTE_BLOCK", v, 0, 2);
  if (const char* v = env("FMOE_STATIC_TILES")) k.static_tiles = parse_knob_bool("FMOE_STATIC_TILES", v);
  return k;
}

}  // namespace

Knobs& knobs() {
  static std::mutex mu;
  static std::optional<Knobs> parsed;
  std::lock_guard<std::mutex> lock(mu);
  if (!parsed) parsed = read_knobs();  // throws on a malformed value: parsed stays empty
  return *parsed;
}

}  // namespace fusedmoe::detail
