#!/usr/bin/env bash
# Session 35 call 2: the sorted scales with the slot numbering fixed (scale_tile_of): the full
# layer suite, then base / sorted on the prefill presets, twice each (drift between processes).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
V=.device_carry/v; R=$OUT/r; mkdir -p $R
for n in base sorted; do for f in $V/$n/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
s=$SECONDS; timeout 170 $V/sorted/test_layer_gpu > $R/sorted_test.txt 2>&1; rc=$?
echo "sorted tests rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/sorted_test.txt | tr '\n' ' ')"
grep -E '^\[  FAILED|Failure|seed' $R/sorted_test.txt | head -8
if [ $rc = 0 ]; then
  TEST_FILTER=none BENCH_TIMEOUT=100 ROUNDS=2 VARIANTS="base sorted" scripts/variants_check.sh $V $R/p \
    --presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,8192 --stages on 2>&1 | tail -45
fi
tar cJf $OUT/r.txz -C $OUT r
