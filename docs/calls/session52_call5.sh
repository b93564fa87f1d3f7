#!/usr/bin/env bash
# Session 52 call 5 (as run, ~8 min): the decode GEMVs' activations by cp.async into a ring of three chunk buffers, two
# chunks ahead (.device_carry/s52c), against main (.device_carry/s52g): call 4's ncu had the store of the next chunk
# waiting for its register loads in 11% of the samples. The GEMV A/B (session 51's SETS=gemv set, ABBA, even loads)
# plus the layer at T=1 / 8 / 32, then the 4-bit GPU checks (scripts/four_bit_checks.sh: test_layer_gpu's 4-bit and
# decode GEMV cases, the e2m1 binaries, the four sanitizers on SanitizerSmall).
set -u
export FMOE_NO_SETUP=1
N=${N:-.device_carry/s52c}; R=$OUT/r; mkdir -p $R
SETS=gemv LIMIT=${LIMIT:-260} KEEP=1 V="main=.device_carry/s52g cp=$N" bash docs/calls/session51_call1.sh
for f in $N/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $N/*
scripts/four_bit_checks.sh $N $R/chk
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
