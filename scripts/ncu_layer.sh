#!/usr/bin/env bash
# ncu of the layer's grouped GEMMs (gate/up, then down) on one preset and token count: the first
# two grouped_gemm_kernel launches of `fusedmoe bench --op layer` (its checked forward, before
# the timed replays), `--set full` with source counters. Writes NAME.ncu-rep, NAME.txt (the
# details page of both kernels) and NAME_sass.csv (per-instruction samples of the down GEMM).
#   scripts/ncu_layer.sh FUSEDMOE_BIN PRESET T OUTDIR [extra bench args...]
# Env: FMOE_FORCE_CONFIG etc. pass through; NCU_KERNELS (default 2: gate/up and down).
set -u
BIN=$1 PRESET=$2 T=$3 DIR=$4; shift 4
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
NAME="$DIR/ncu_${PRESET}_T${T}"
"$NCU" --kernel-name regex:grouped_gemm_kernel --launch-count "${NCU_KERNELS:-2}" --set full \
  --import-source no -f -o "$NAME" \
  "$BIN" bench --op layer --presets "$PRESET" --tokens "$T" --mode fast --stages off "$@" \
  >"$NAME.log" 2>&1
echo "ncu rc=$? ($NAME)"
"$NCU" -i "$NAME.ncu-rep" --page details >"$NAME.txt" 2>&1
"$NCU" -i "$NAME.ncu-rep" --page source --csv --print-source sass --launch-skip 1 --launch-count 1 \
  >"${NAME}_sass.csv" 2>&1 || true
