#!/usr/bin/env bash
# Session 39 call 5, on call 4's warm machine and build: scripts/gpu_check.sh --no-build --no-tests
# --tools "synccheck initcheck", then the layer at T=4096 (128 routes per expert on deepseek-v3 and
# qwen3.5-35b-a3b: the sorted rows' threshold) and T=2048 on deepseek-v3 (below it): main 6615fb2
# (.device_carry/n/base) against this build, one round.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
ls build/fusedmoe >/dev/null && timeout 300 scripts/gpu_check.sh --no-build --no-tests --tools "synccheck initcheck" > $R/gc.txt 2>&1; echo "rc=$?"
grep -E "^\[gpu_check\]" $R/gc.txt; grep -E "FAILED|Failure" -A3 $R/gc.txt | head
V=.device_carry/n; for f in $V/base/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/base/*
ROUNDS=1 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe build/fusedmoe $R/ab \
  --presets deepseek-v3,qwen3.5-35b-a3b --tokens 2048,4096 --stages on | grep -E "layer_ab|down|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
