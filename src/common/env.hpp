// The environment knobs of fusedmoe: one table, read once, parsed strictly.
//
// Every FMOE_* variable the library reads is a row of kKnobTable (name, kind, what it does), is
// read the first time knobs() is called, and a malformed value (a non-number, a number out of
// range, trailing characters, a bool other than 0/1) throws Error naming the variable and the
// accepted values. The call path never calls getenv. Tests and benchmarks that switch a knob
// inside one process use ScopedKnob, which sets the parsed value directly.
#pragma once

#include <string>

namespace fusedmoe::detail {

struct Knobs {
  int threads = 0;             ///< FMOE_THREADS: host threads for the CPU reference (0: all cores)
  bool print_config = false;   ///< FMOE_PRINT_CONFIG=1: print each op's kernel config and why
  std::string force_config;    ///< FMOE_FORCE_CONFIG=<name>: force a compiled config by name
  bool debug_sync = false;     ///< FMOE_DEBUG_SYNC=1: synchronize after every launch
  bool no_pdl = false;         ///< FMOE_NO_PDL=1: no programmatic dependent launch
  bool fused_schedule = true;  ///< FMOE_FUSED_SCHEDULE=0: keep the schedule kernel at decode sizes
  int prefetch_units = 0;      ///< FMOE_PREFETCH_UNITS=n: L2 weight prefetch (measured useless)
  bool split_k = false;        ///< FMOE_SPLIT_K=1: the layer's gate/up GEMM splits K wherever allowed
  int ep_timeout_s = 1800;     ///< FMOE_EP_TIMEOUT=s: `run --ep` / `bench --op ep_layer` end their rank processes after s seconds
  int gemv_max_t = -1;         ///< FMOE_GEMV_MAX_T=n: the 4-bit layer runs its GEMMs as GEMVs up to T=n (-1: the layer's rule)
  int gemv_split = 0;          ///< FMOE_GEMV_SPLIT=1|2|4: K parts in the few-CTA decode GEMVs (0: the rule)
  int gemv_down_early = -1;    ///< FMOE_GEMV_DOWN_EARLY=0|1: the down decode GEMV finds its columns and loads its first weights before waiting on the up (-1: the layer default, 1)
  bool narrow_tails = true;    ///< FMOE_NARROW_TAILS=0: every token tile at full width (A/B timing)
  int lean_producer = -1;      ///< FMOE_LEAN_PRODUCER=0|1: whether one producer warp fills the down GEMM's k-stages (-1: the layer's rule)
  int dynamic_items = 3;       ///< FMOE_DYNAMIC_ITEMS: which GEMMs take tiles from a counter (bit 0 gate/up, bit 1 down; A/B timing)
  int rows16_min_t = -1;       ///< FMOE_ROWS16_MIN_T=n: fast mode combines by bf16 route rows from T=n (0: never; -1: the layer's rule)
  int schedule_routes = 0;     ///< FMOE_SCHEDULE_ROUTES=1|2|4|8: routes per thread of the schedule kernel (0: the rule)
  int finalize_bulk = 1;       ///< FMOE_FINALIZE_BULK: finalize reads route rows by bulk copies 0 never, 1 bf16 rows in slot order, 2 any rows (A/B timing, tests)
  int route_block = 1;         ///< FMOE_ROUTE_BLOCK=0|1|2: sigmoid_grouped_topk routed by all four warps of a token below T=1024: 0 never, 1 grouped (default), 2 also one group
  bool static_tiles = true;    ///< FMOE_STATIC_TILES=0: the layer never numbers token tiles statically (A/B timing, tests)
};

/// One row per knob: what `fusedmoe info` and the README list.
struct KnobInfo {
  const char* name;
  const char* accepted;  ///< "0 or 1", "an integer in [1, 4096]", "a config name"
  const char* what;
};
extern const KnobInfo kKnobTable[];
extern const int kNumKnobs;

/// The process-wide knobs, parsed from the environment on first use. Throws Error on a malformed
/// value (and parses again on the next call, so the error repeats rather than being forgotten).
Knobs& knobs();

/// Parses one knob's text; exposed for the tests. Throws Error naming `name`.
int parse_knob_int(const char* name, const char* text, int lo, int hi);
bool parse_knob_bool(const char* name, const char* text);

/// Sets a knob for the lifetime of the object and restores it after (tests, benchmarks).
template <class T>
class ScopedKnob {
 public:
  using Field = T Knobs::*;
  ScopedKnob(Field field, T value) : field_(field), old_(knobs().*field) {
    knobs().*field = std::move(value);
  }
  ~ScopedKnob() { knobs().*field_ = old_; }
  ScopedKnob(const ScopedKnob&) = delete;
  ScopedKnob& operator=(const ScopedKnob&) = delete;

 private:
  Field field_;
  T old_;
};

}  // namespace fusedmoe::detail
