#!/usr/bin/env bash
# Issue 13's table on a multi-GPU machine: `fusedmoe bench --op ep_layer` on DeepSeek-V3 (fp8, its
# shared expert kept, fast mode) at T = 128 and 8192 tokens per rank for every R in 1 2 4 8 that
# the machine has GPUs for, with the model's routing and unbiased routing, the step also split in
# --chunks pipelined chunks. One summary line per (R, routing, T) from rank 0's rows: the step, the
# single-GPU layer on the same tokens (weak scaling), dispatch + combine against NCCL alone, the
# chunked step. JSON and full tables in $FMOE_BUILD_DIR/ep_bench_*.{json,txt}.
#   scripts/ep_bench.sh [--chunks N] [--ranks "1 2 4"] [-- extra bench options, e.g. --local-sms 116
#                       --shared-sms 16]
# Environment: FMOE_BUILD_DIR (build; fusedmoe must be built), FMOE_EP_TIMEOUT (default here 240).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD_DIR=${FMOE_BUILD_DIR:-build}
CHUNKS=4
RANKS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --chunks) CHUNKS="$2"; shift ;;
    --ranks) RANKS="$2"; shift ;;
    --) shift; break ;;
    *) echo "usage: scripts/ep_bench.sh [--chunks N] [--ranks \"1 2 4\"]" >&2; exit 2 ;;
  esac
  shift
done
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} FMOE_EP_TIMEOUT=${FMOE_EP_TIMEOUT:-240}
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ -z "$RANKS" ]; then
  for r in 1 2 4 8; do [ "$r" -le "$GPUS" ] && RANKS="$RANKS $r"; done
fi
[ -x "$BUILD_DIR/fusedmoe" ] || { echo "[ep_bench] $BUILD_DIR/fusedmoe is not built" >&2; exit 1; }
status=0
for R in $RANKS; do
  for routing in model unbiased; do
    base="$BUILD_DIR/ep_bench_R${R}_$routing"
    "$BUILD_DIR/fusedmoe" bench --op ep_layer --ep "$R" --preset deepseek-v3 --tokens 128,8192 \
      --mode fast --routing "$routing" --chunks "$CHUNKS" --json "$base.json" "$@" >"$base.txt" 2>&1
    rc=$?
    if [ $rc -ne 0 ]; then
      status=1
      echo "[ep_bench] R=$R routing=$routing: FAILED (exit $rc): $(grep -E 'rank [0-9]+ \(GPU' "$base.txt" | head -1 | cut -c1-300)"
      continue
    fi
    for T in 128 8192; do
      row() { grep -E "^$1 +deepseek-v3 fp8_block R=$R rank 0 +$T " "$base.txt" | head -1; }
      med() { row "$1" | awk '{print $9}'; }  # op, 5 words of shape, T, config, median
      # Routes each rank's local layer ran (the load balance): max / mean over the ranks.
      balance=$(grep -E "^ep_layer +deepseek-v3 fp8_block R=$R rank [0-9]+ +$T " "$base.txt" |
                grep -Eo '[0-9]+ routes received' | awk '{s += $1; if ($1 > m) m = $1; n++}
                END {if (n) printf "routes per rank max %d, mean %.0f (%.2fx)", m, s / n, m * n / s}')
      echo "[ep_bench] R=$R routing=$routing T=$T: step $(med ep_layer) us, single-GPU $(med ep_layer.single) us," \
           "dispatch $(med ep_layer.dispatch), local $(med ep_layer.local), combine $(med ep_layer.combine)," \
           "chunked $(med ep_layer.chunked) us; $(row ep_layer | grep -Eo 'dispatch \+ combine at [0-9]+%[^;]*; the single-GPU layer is [0-9]+%'); $balance"
    done
  done
done
exit $status
