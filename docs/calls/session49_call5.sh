#!/usr/bin/env bash
# Session 49 call 5 (as run, ~8 min): gpu_check on .device_carry/s49g (fusedmoe and the 13 test_*_gpu at the commit
# that makes the two-block stages and the lean down producer the 4-bit defaults at BLOCK_T <= 32): every GPU test
# binary run directly, then the four sanitizers.
set -u
export FMOE_NO_SETUP=1
G=${G:-.device_carry/s49g}; R=$OUT/r; mkdir -p $R $G/tests  # (G: another carry, as next_call_s50.sh)
for f in $G/*.xz; do xz -d -f -T0 $f; done
mv $G/test_*_gpu $G/tests/ 2>/dev/null; chmod +x $G/fusedmoe $G/tests/*
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 570 scripts/gpu_check.sh --no-build --direct > $R/gpu_check.txt 2>&1
echo "gpu_check rc=$? $((SECONDS-s)) s"; grep -E "^\[gpu_check\]" $R/gpu_check.txt
cp $G/*.log $R/ 2>/dev/null; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
