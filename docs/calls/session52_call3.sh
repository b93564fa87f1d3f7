#!/usr/bin/env bash
# Session 52 call 3 (as run, ~9 min): the lean gathered producer (one warp copies the 4-bit gate/up's gathered rows at
# <= 32-token tiles, RowLoader<Cfg, gathered, 32>) in .device_carry/s52l against main (.device_carry/s52g): its lean
# tests and SanitizerSmall first, then session 51's ABBA layer A/B (docs/calls/session51_call1.sh, SETS=layer).
set -u
export FMOE_NO_SETUP=1
N=${N:-.device_carry/s52l}; R=$OUT/r; mkdir -p $R
for f in $N/test_layer_gpu.xz; do xz -d -f -T0 $f; done; chmod +x $N/test_layer_gpu
s=$SECONDS; timeout 150 $N/test_layer_gpu --gtest_filter='*LeanProducer*:*SanitizerSmall*' > $R/lean_tests.txt 2>&1
echo "lean tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/lean_tests.txt | tr '\n' ' ')"
grep -E "Failure|out of tolerance|did not finish" $R/lean_tests.txt | head -6
V="main=.device_carry/s52g lean=$N" LIMIT=${LIMIT:-540} bash docs/calls/session51_call1.sh
