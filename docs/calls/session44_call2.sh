#!/usr/bin/env bash
# As run in session 44, ~9 min: gpu_check of the fix (.device_carry/s44/fix: fusedmoe and the 13 test_*_gpu, main +
# docs/wip/repeat_forwards_600.diff + docs/wip/producer_threads_drive_full.diff): every GPU test binary run directly,
# then the four sanitizer tools on those binaries. Carry .device_carry/s44/fix.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s44/fix; R=$OUT/r; mkdir -p $R $G/tests
for f in $G/*.xz; do xz -d -f -T0 $f; done
mv $G/test_*_gpu $G/tests/ 2>/dev/null; chmod +x $G/fusedmoe $G/tests/*
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 560 scripts/gpu_check.sh --no-build --direct > $R/gpu_check.txt 2>&1
echo "gpu_check rc=$? $((SECONDS-s)) s"; grep -E "^\[gpu_check\]" $R/gpu_check.txt
cp $G/*.log $R/ 2>/dev/null; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
