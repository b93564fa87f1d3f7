#!/usr/bin/env bash
# DRAFT (not run), ~8 min: gpu_check on main (session 49's last device-code commit b778748 ran only as SASS-identical
# kernels, and the two-block test's new check, a forced config's other GEMM following the rules, never ran on a
# GPU). Build here first: ninja -C build fusedmoe $(cd build && ls tests | grep '_gpu$' | sed 's|^|tests/|'), then
#   D=.device_carry/s50g; mkdir -p $D; strip -o $D/fusedmoe build/fusedmoe;
#   for b in build/tests/test_*_gpu; do strip -o $D/$(basename $b) $b; done; xz -T2 -3 -f $D/*
# and carry .device_carry/s50g. Then next_call_s50b.sh on the warm machine.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s50g; R=$OUT/r; mkdir -p $R $G/tests
for f in $G/*.xz; do xz -d -f -T0 $f; done
mv $G/test_*_gpu $G/tests/ 2>/dev/null; chmod +x $G/fusedmoe $G/tests/*
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 570 scripts/gpu_check.sh --no-build --direct > $R/gpu_check.txt 2>&1
echo "gpu_check rc=$? $((SECONDS-s)) s"; grep -E "^\[gpu_check\]" $R/gpu_check.txt
cp $G/*.log $R/ 2>/dev/null; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
