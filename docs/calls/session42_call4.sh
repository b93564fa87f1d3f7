#!/usr/bin/env bash
# Session 42 call 4 (~9 min): gpu_check of the shipped tree (main 3c96531: route_quant with fewer warp instructions),
# on binaries built here from it and carried stripped (.device_carry/s42/g: fusedmoe and the 13 tests/test_*_gpu).
# Every GPU test binary run directly (the CPU tests run here: scripts/test.sh), then scripts/gpu_check.sh's four
# sanitizer tools on those binaries. With the time left: the token-tile rule at T = 512 / 1024 under the bench's
# model routing and unbiased routing, the rule against BLOCK_T = 128 forced (call 3: deepseek-v3 T=1024 3191 ->
# 2474 us with a BLOCK_T = 128 config forced, 176 of 256 experts hit).
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s42/g; R=$OUT/r; mkdir -p $R
for f in $G/*.xz $G/tests/*.xz; do xz -d -f -T0 $f; done; chmod +x $G/fusedmoe $G/tests/*
fails=0; n=0; s0=$SECONDS
for b in $G/tests/test_*_gpu; do
  n=$((n + 1)); s=$SECONDS
  timeout 240 $b > $R/$(basename $b).txt 2>&1; rc=$?
  [ $rc = 0 ] || fails=$((fails + 1))
  echo "$(basename $b) rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' $R/$(basename $b).txt | tr '\n' ' ')"
done
echo "[call4] gpu tests: $((n - fails)) of $n binaries passed ($((SECONDS-s0)) s)"
tar cJf $OUT/r.txz -C $OUT r
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 300 scripts/gpu_check.sh --no-build --no-tests > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; cp $G/sanitizer_*.log $R/ 2>/dev/null
tar cJf $OUT/r.txz -C $OUT r
left=$((570 - SECONDS)); echo "left for the rule bench: $left s"
for v in rule w2 ub_rule ub_w2; do
  [ $left -gt 40 ] || break
  e=FMOE_X=0; a=""
  case $v in *w2) e=FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_s4 ;; esac
  case $v in ub_*) a="--routing unbiased" ;; esac
  s=$SECONDS
  env $e timeout $((left - 10)) $G/fusedmoe bench --op layer --presets deepseek-v3,qwen3-30b-a3b --tokens 512,1024 \
    $a --json $R/t_$v.json > $R/t_$v.txt 2>&1; echo "bench $v rc=$? $((SECONDS-s)) s"
  left=$((570 - SECONDS))
  tar cJf $OUT/r.txz -C $OUT r
done
cd $R && python3 $OLDPWD/scripts/bench_compare.py rule=t_rule.json w2=t_w2.json ub_rule=t_ub_rule.json \
  ub_w2=t_ub_w2.json 2>&1 | grep -E "^layer |geomean|^op"; cd $OLDPWD
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
