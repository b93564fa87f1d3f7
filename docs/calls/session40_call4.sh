#!/usr/bin/env bash
# Session 40 call 4, on call 3's warm machine and build: scripts/gpu_check.sh --no-build --no-tests
# --tools "synccheck initcheck", then the layer, main 60c27be (.device_carry/p/base) against this
# build: fast mode T=8192 (the rule's case) twice, T=2048 and deterministic T=8192 once (unchanged paths).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
ls build/fusedmoe >/dev/null && timeout 300 scripts/gpu_check.sh --no-build --no-tests --tools "synccheck initcheck" > $R/gc.txt 2>&1; echo "rc=$?"
grep -E "^\[gpu_check\]" $R/gc.txt; grep -E "FAILED|Failure" -A3 $R/gc.txt | head
V=.device_carry/p; for f in $V/base/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/base/*
P=qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b
ROUNDS=2 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe build/fusedmoe $R/fast8k --presets $P --tokens 8192 --stages on |
  grep -E "layer_ab|finalize|^layer  |geomean"
ROUNDS=1 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe build/fusedmoe $R/fast2k --presets $P --tokens 2048 --stages on |
  grep -E "layer_ab|finalize|^layer  |geomean"
ROUNDS=1 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe build/fusedmoe $R/det8k --presets $P --tokens 8192 --stages on --mode deterministic |
  grep -E "layer_ab|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
