#!/usr/bin/env bash
# A/B of the MoE layer on the GPU machine: the layer bench of two fusedmoe binaries (base, new) on
# the same presets and token counts, each in its own process in the same call, and optionally
# the new binary again under an environment assignment (AB_ENV, e.g. FMOE_NARROW_TAILS=0: the
# knob-off run that separates a change's effect from its code's). Then scripts/bench_compare.py
# prints every row side by side with ratios and a geomean. Results: OUTDIR/{base,new[,env]}.json
# and .txt, and OUTDIR/compare.txt.
#   scripts/layer_ab.sh BASE_BIN NEW_BIN OUTDIR [bench args, default: the three prefill presets at
#   T = 2048,4096,8192 with stages]
set -u
BASE=$1 NEW=$2 DIR=$3; shift 3
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,4096,8192 --stages on)
mkdir -p "$DIR"
run() {  # name, binary, env assignment or ""
  local s=$SECONDS
  env $3 "$2" bench --op layer "${ARGS[@]}" --json "$DIR/$1.json" >"$DIR/$1.txt" 2>&1
  echo "[layer_ab] $1: rc=$? in $((SECONDS - s)) s"
}
run new "$NEW" ""
run base "$BASE" ""
cols=("base=$DIR/base.json" "new=$DIR/new.json")
if [ -n "${AB_ENV:-}" ]; then
  run env "$NEW" "$AB_ENV"
  cols+=("env=$DIR/env.json")
fi
python3 "$(dirname "$0")/bench_compare.py" "${cols[@]}" | tee "$DIR/compare.txt"
