#!/usr/bin/env bash
# Session 46 call 4 (~9 min): gpu_check on .device_carry/s46c (fusedmoe and the 13 test_*_gpu at b85a611: main +
# static_tile_numbering at 8 MiB + the bf16 down's two waves; also covers ee3f673's finalize change, whose full
# gpu_check session 45 could not run). Every GPU test binary run directly, then the four sanitizers.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s46c; R=$OUT/r; mkdir -p $R $G/tests
for f in $G/*.xz; do xz -d -f -T0 $f; done
mv $G/test_*_gpu $G/tests/ 2>/dev/null; chmod +x $G/fusedmoe $G/tests/*
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 570 scripts/gpu_check.sh --no-build --direct > $R/gpu_check.txt 2>&1
echo "gpu_check rc=$? $((SECONDS-s)) s"; grep -E "^\[gpu_check\]" $R/gpu_check.txt
cp $G/*.log $R/ 2>/dev/null; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
