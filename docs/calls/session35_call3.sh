#!/usr/bin/env bash
# Session 35 call 3: gpu_check at main (build, every test, synccheck + initcheck; memcheck and
# racecheck follow in call 4 on the warm machine), then bench --op l2_feed (its kernel now goes
# through cuda::ptx; the bench checks its sums before timing).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
s=$SECONDS; timeout 500 scripts/gpu_check.sh --tools "synccheck initcheck" > $R/gpu_check_a.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check_a.txt; grep -E "FAILED|Failure" -A3 $R/gpu_check_a.txt | head -20
s=$SECONDS; timeout 60 build/fusedmoe bench --op l2_feed > $R/l2.txt 2>&1; echo "l2_feed rc=$? $((SECONDS-s)) s"; tail -6 $R/l2.txt
tar cJf $OUT/r.txz -C $OUT r
