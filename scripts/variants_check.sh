#!/usr/bin/env bash
# On the GPU machine: tests and times the variants that scripts/build_variants.sh built.
# For each DIR/NAME/ it runs:
# 1. test_layer_gpu, with TEST_FILTER (a gtest filter, default every case);
# 2. the layer bench, each variant in its own process, in turn. With ROUNDS=2 it goes through
#    them twice, which shows the drift between processes.
# Then scripts/bench_compare.py prints every variant against base.
# Results go to OUT/NAME.{test,bench}.txt, OUT/NAME.json and OUT/compare.txt.
# A variant whose tests fail is not timed.
#   scripts/variants_check.sh DIR OUT [bench args, default: the three prefill presets at
#   T = 2048,4096,8192 with stages]
# Env: VARIANTS (names in order, default every directory of DIR, base first; LABEL:NAME times
#   DIR/NAME's binaries under another label, e.g. "base cluster rr_up:base", its tests run once
#   per directory); VARIANT_ENV (per-label assignments for its bench runs, space-separated
#   LABEL=K=V[,K=V], e.g. "cluster=FMOE_CLUSTER=1 rr_up=FMOE_DYNAMIC_ITEMS=2"); TEST_FILTER;
#   ROUNDS (default 1); BENCH_ENV (assignments for every bench run, e.g. FMOE_NARROW_TAILS=0);
#   TEST_TIMEOUT, BENCH_TIMEOUT (seconds per run, default none: a device call has a hard limit);
#   TEST_FILTER=none skips the tests (a bench-only A/B); ORDER=abba runs even rounds in reverse
#   order, so drift between processes cancels in the two rounds' ratios (session 51's A/Bs).
set -u
DIR=$1 OUT=$2; shift 2
ARGS=("$@")
[ ${#ARGS[@]} -gt 0 ] || ARGS=(--presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,4096,8192 --stages on)
mkdir -p "$OUT"
if [ -n "${VARIANTS:-}" ]; then
  read -r -a names <<<"$VARIANTS"
else
  names=(base)
  for d in "$DIR"/*/; do
    n=$(basename "$d")
    [ "$n" = base ] || names+=("$n")
  done
fi
dir_of() { [[ $1 == *:* ]] && echo "${1#*:}" || echo "$1"; }
label_of() { echo "${1%%:*}"; }
env_of() {  # the VARIANT_ENV assignments of label $1, space-separated
  local e
  for e in ${VARIANT_ENV:-}; do
    [ "${e%%=*}" = "$1" ] && echo "${e#*=}" | tr ',' ' '
  done
}
timed=()
declare -A tested=()
for v in "${names[@]}"; do
  n=$(dir_of "$v")
  if [ -z "${tested[$n]:-}" ]; then
    for f in "$DIR/$n"/*.xz; do [ -e "$f" ] && xz -d -f -T0 "$f"; done
    chmod +x "$DIR/$n"/* 2>/dev/null
    s=$SECONDS
    if [ "${TEST_FILTER:-*}" = none ]; then
      echo "tests skipped (TEST_FILTER=none)" >"$OUT/$n.test.txt"; tested[$n]=0
    else
      timeout "${TEST_TIMEOUT:-0}" "$DIR/$n/test_layer_gpu" --gtest_filter="${TEST_FILTER:-*}" >"$OUT/$n.test.txt" 2>&1
      tested[$n]=$?
    fi
    echo "[variants] $n: tests rc=${tested[$n]} in $((SECONDS - s)) s: $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/$n.test.txt" | tr '\n' ' ')"
    grep -E '^\[  FAILED|Failure' "$OUT/$n.test.txt" | head -5
  fi
  [ "${tested[$n]}" = 0 ] && timed+=("$v")
done
reversed=()
for ((i = ${#timed[@]} - 1; i >= 0; i--)); do reversed+=("${timed[$i]}"); done
for ((round = 1; round <= ${ROUNDS:-1}; round++)); do
  order=("${timed[@]}")
  [ "${ORDER:-}" = abba ] && [ $((round % 2)) = 0 ] && order=("${reversed[@]}")
  for v in "${order[@]}"; do
    n=$(label_of "$v")
    s=$SECONDS
    suffix=$([ "$round" = 1 ] && echo "" || echo ".r$round")
    # shellcheck disable=SC2046
    timeout "${BENCH_TIMEOUT:-0}" env ${BENCH_ENV:-} $(env_of "$n") "$DIR/$(dir_of "$v")/fusedmoe" bench --op layer \
      "${ARGS[@]}" --json "$OUT/$n$suffix.json" >"$OUT/$n$suffix.bench.txt" 2>&1
    echo "[variants] $n$suffix: bench rc=$? in $((SECONDS - s)) s $(env_of "$n")"
  done
done
cols=()
for v in "${timed[@]}"; do
  n=$(label_of "$v")
  [ -f "$OUT/$n.json" ] && cols+=("$n=$OUT/$n.json")
  [ -f "$OUT/$n.r2.json" ] && cols+=("$n.r2=$OUT/$n.r2.json")
done
[ ${#cols[@]} -gt 0 ] && python3 "$(dirname "$0")/bench_compare.py" "${cols[@]}" | tee "$OUT/compare.txt"
