#!/usr/bin/env bash
# Session 41 call 4 (~7-8 min): the shipped tree (main: the wide schedule 905d893 + finalize's shared arithmetic
# 4090264) checked on binaries built here from it and carried stripped (.device_carry/s41/g: fusedmoe and the 13
# tests/test_*_gpu; the device's own build would take ~3 min of the budget). Every GPU test binary (the CPU tests run
# here: scripts/test.sh), then scripts/gpu_check.sh's four sanitizer tools on those binaries, then the layer against
# main before the session (.device_carry/q/base, device code of c011d4c).
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s41/g; Q=.device_carry/q/base; R=$OUT/r; mkdir -p $R
for f in $G/*.xz $G/tests/*.xz $Q/*.xz; do xz -d -f -T0 $f; done; chmod +x $G/fusedmoe $G/tests/* $Q/*
fails=0; n=0; s0=$SECONDS
for b in $G/tests/test_*_gpu; do
  n=$((n + 1)); s=$SECONDS
  timeout 240 $b > $R/$(basename $b).txt 2>&1; rc=$?
  [ $rc = 0 ] || fails=$((fails + 1))
  echo "$(basename $b) rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' $R/$(basename $b).txt | tr '\n' ' ')"
done
echo "[call4] gpu tests: $((n - fails)) of $n binaries passed ($((SECONDS-s0)) s)"
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 420 scripts/gpu_check.sh --no-build --no-tests > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; cp $G/sanitizer_*.log $R/ 2>/dev/null
A="--presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on"
timeout 70 $Q/fusedmoe bench --op layer $A --json $R/ab_base.json > $R/ab_base.txt 2>&1; echo "bench base rc=$?"
timeout 70 $G/fusedmoe bench --op layer $A --json $R/ab_new.json > $R/ab_new.txt 2>&1; echo "bench new rc=$?"
python3 scripts/bench_compare.py base=$R/ab_base.json new=$R/ab_new.json > $R/compare.txt 2>&1
grep -E "schedule|^layer  |geomean" $R/compare.txt
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
