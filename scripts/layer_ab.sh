#!/usr/bin/env bash
# A/B of the MoE layer on the GPU machine: the layer bench of two fusedmoe binaries (base, new) on
# the same presets and token counts, each in its own process in the same call, and optionally
# the new binary again under an environment assignment (AB_ENV, e.g. FMOE_NARROW_TAILS=0: the
# knob-off run that separates a change's effect from its code's). Then scripts/bench_compare.py
# prints every row side by side with ratios and a geomean. Results: OUTDIR/{base,new[,env]}.json
# and .txt, and OUTDIR/compare.txt.
#   scripts/layer_ab.sh BASE_BIN NEW_BIN OUTDIR [bench args, default: the three prefill presets at
#   T = 2048,4096,8192 with stages]
# ROUNDS=2 runs the two binaries in the order new, base, base, new (each drifts the same way, so
# the second round shows the spread between processes; session 38's calls 4-8 wrote this loop by
# hand): results base.r2 / new.r2 beside the first round's. BENCH_TIMEOUT bounds each run (seconds,
# default none: a device call has its own limit).
set -u
BASE=$1 NEW=$2 DIR=$3; shift 3
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,4096,8192 --stages on)
mkdir -p "$DIR"
run() {  # name, binary, env assignment or ""
  local s=$SECONDS
  timeout "${BENCH_TIMEOUT:-0}" env $3 "$2" bench --op layer "${ARGS[@]}" --json "$DIR/$1.json" >"$DIR/$1.txt" 2>&1
  echo "[layer_ab] $1: rc=$? in $((SECONDS - s)) s"
}
run new "$NEW" ""
run base "$BASE" ""
cols=("base=$DIR/base.json" "new=$DIR/new.json")
if [ "${ROUNDS:-1}" = 2 ]; then
  run base.r2 "$BASE" ""
  run new.r2 "$NEW" ""
  cols+=("base.r2=$DIR/base.r2.json" "new.r2=$DIR/new.r2.json")
fi
if [ -n "${AB_ENV:-}" ]; then
  run env "$NEW" "$AB_ENV"
  cols+=("env=$DIR/env.json")
fi
python3 "$(dirname "$0")/bench_compare.py" "${cols[@]}" | tee "$DIR/compare.txt"
