#!/usr/bin/env bash
# Session 40 call 5 (call 4 found a fresh machine: no build): synccheck + initcheck of the sanitizer
# cases with binaries built here at the same tree (stripped, .device_carry/s40), then the layer,
# main 60c27be (.device_carry/p/base) against it: fast T=8192 (the rule's case), one round.
set -u
export FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
B=.device_carry/s40/build
for f in $B/fusedmoe.xz $B/tests/*.xz .device_carry/p/base/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done
chmod +x $B/fusedmoe $B/tests/* .device_carry/p/base/*
FMOE_BUILD_DIR=$B timeout 240 scripts/gpu_check.sh --no-build --no-tests --tools "synccheck initcheck" > $R/gc.txt 2>&1; echo "rc=$?"
grep -E "^\[gpu_check\]" $R/gc.txt; grep -E "FAILED|Failure" -A3 $R/gc.txt | head
ROUNDS=1 BENCH_TIMEOUT=60 scripts/layer_ab.sh .device_carry/p/base/fusedmoe $B/fusedmoe $R/fast8k \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 8192 --stages on | grep -E "layer_ab|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
