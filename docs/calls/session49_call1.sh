#!/usr/bin/env bash
# Session 49 call 1 (as run), ~8 min: the first GPU run of the two WIP diffs (local branch wip-e2m1-k2; docs/wip/
# e2m1_two_kblock_stages.diff, then docs/wip/lean_producer.diff on top): their GPU tests and compute-sanitizer.
# Binaries: the branch's fusedmoe + test_layer_gpu in .device_carry/s49w (carry it). Rebuild: git checkout
# wip-e2m1-k2 (or git apply both diffs in order), ninja -C build fusedmoe test_layer_gpu, strip -o + xz -T2 -3.
# Then next_call_s49b.sh times them.
set -u
export FMOE_NO_SETUP=1
W=.device_carry/s49w; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $W/*.xz; chmod +x $W/*
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
# The cases the diffs touch or add (the full binary, ~6 min now, runs in the gpu_check that follows if they ship).
F='*TwoKBlock*:*LeanProducer*:*RepeatedForwards*:*SanitizerSmall*:*EveryCompiledLayerConfigRuns*:*FourBitTileWidths*'
s=$SECONDS; timeout 330 $W/test_layer_gpu --gtest_filter="$F" > $R/tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests.txt | tr '\n' ' ')"
grep -E "^\[  FAILED  \]|Failure" $R/tests.txt | head -8
tar cJf $OUT/r.txz -C $OUT r
# SanitizerSmall now forces the two-block configs and runs the lean producer.
for tool in memcheck racecheck synccheck; do
  [ $SECONDS -lt 500 ] || { echo "$tool skipped: $SECONDS s gone"; continue; }
  s=$SECONDS; n=$(timeout $((585-SECONDS)) scripts/sanitize_binary.sh $SAN $tool $W/test_layer_gpu $R/$tool.log)
  echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
