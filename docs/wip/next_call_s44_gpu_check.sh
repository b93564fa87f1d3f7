#!/usr/bin/env bash
# DRAFT (not run), ~9 min: gpu_check of the fix (.device_carry/s44/fix: fusedmoe and the 13 tests/test_*_gpu, main +
# docs/wip/repeat_forwards_600.diff + docs/wip/producer_threads_drive_full.diff), as session42_call4.sh: every GPU
# test binary run directly, then scripts/gpu_check.sh's four sanitizer tools on those binaries. Carry .device_carry/s44/fix.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s44/fix; R=$OUT/r; mkdir -p $R $G/tests
for f in $G/*.xz; do xz -d -f -T0 $f; done
mv $G/test_*_gpu $G/tests/ 2>/dev/null; chmod +x $G/fusedmoe $G/tests/*
fails=0; n=0; s0=$SECONDS
for b in $G/tests/test_*_gpu; do
  n=$((n + 1)); s=$SECONDS
  timeout 240 $b > $R/$(basename $b).txt 2>&1; rc=$?
  [ $rc = 0 ] || fails=$((fails + 1))
  echo "$(basename $b) rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' $R/$(basename $b).txt | tr '\n' ' ')"
done
echo "[s44] gpu tests: $((n - fails)) of $n binaries passed ($((SECONDS-s0)) s)"
tar cJf $OUT/r.txz -C $OUT r
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 300 scripts/gpu_check.sh --no-build --no-tests > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; cp $G/sanitizer_*.log $R/ 2>/dev/null
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
