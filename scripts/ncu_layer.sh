#!/usr/bin/env bash
# ncu of the layer's kernels on one preset and token count: by default the first two
# grouped_gemm_kernel launches of `fusedmoe bench --op layer` (gate/up, then down: its checked
# forward, before the timed replays), `--set full` with source counters. Writes NAME.ncu-rep,
# NAME.txt (the details page of each kernel), NAME_sass.csv (per-instruction samples of each) and
# NAME_stalls.txt (scripts/ncu_stalls.py: where each kernel's warps wait).
#   scripts/ncu_layer.sh FUSEDMOE_BIN PRESET T OUTDIR [extra bench args...]
# Env: FMOE_FORCE_CONFIG etc. pass through; NCU_REGEX (kernel names, default grouped_gemm_kernel;
# e.g. 'route_quant|gemv|finalize' for a decode layer: without a filter ncu takes the bench's
# ceiling kernels first); NCU_KERNELS (launches, default 2); NCU_ARGS (more ncu arguments, e.g.
# "--metrics dram__bytes_read.sum,dram__bytes_write.sum": shown on the details page too).
set -u
BIN=$1 PRESET=$2 T=$3 DIR=$4; shift 4
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
mkdir -p "$DIR"
NAME="$DIR/ncu_${PRESET}_T${T}"
"$NCU" --kernel-name regex:"${NCU_REGEX:-grouped_gemm_kernel}" --launch-count "${NCU_KERNELS:-2}" --set full \
  --import-source no ${NCU_ARGS:-} -f -o "$NAME" \
  "$BIN" bench --op layer --presets "$PRESET" --tokens "$T" --mode fast --stages off "$@" \
  >"$NAME.log" 2>&1
echo "ncu rc=$? ($NAME)"
"$NCU" -i "$NAME.ncu-rep" --page details >"$NAME.txt" 2>&1
"$NCU" -i "$NAME.ncu-rep" --page source --csv --print-source sass >"${NAME}_sass.csv" 2>&1 || true
python3 "$(dirname "$0")/ncu_stalls.py" "${NAME}_sass.csv" >"${NAME}_stalls.txt" 2>&1 || true
