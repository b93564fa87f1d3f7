#!/usr/bin/env bash
# Session 40 call 3: scripts/gpu_check.sh --tools "memcheck racecheck" on the tree with the finalize
# bulk-copy kernel (docs/wip/finalize_bulk_rows.diff, its rule narrowed to bf16 rows in slot order).
# Its build stays on the warm machine for call 4.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
s=$SECONDS; timeout 560 scripts/gpu_check.sh --tools "memcheck racecheck" > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; grep -E "Failed|FAILED|Failure" -A3 $R/gpu_check.txt | head -20
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
