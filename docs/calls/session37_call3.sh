#!/usr/bin/env bash
# Session 37 call 3: the final tree (main's kernels, call 2's epilogue variant reverted; bench
# --op wgmma_loop; the new layer tests): gpu_check with memcheck + racecheck; call 4 runs
# `scripts/gpu_check.sh --no-build --tools "synccheck initcheck"` on the same build.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
s=$SECONDS; timeout 500 scripts/gpu_check.sh --tools "memcheck racecheck" > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; grep -E "Failed|FAILED|Failure" -A3 $R/gpu_check.txt | head -20
grep -E "TokensOnMDown|SanitizerSmall" $R/gpu_check.txt | head -6
timeout 40 build/fusedmoe bench --op wgmma_loop 2>&1 | grep -E "^wgmma_loop|ceilings" 
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
