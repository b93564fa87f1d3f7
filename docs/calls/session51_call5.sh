#!/usr/bin/env bash
# Session 51 call 5 (~8 min): the e2m1 word layout that decodes with one right shift (a0's magnitude in place and its
# sign << 4, a3's magnitude >> 7 and its sign << 5; was a3 from three shifts, two of them right: SHF on the integer
# ALU) in .device_carry/s51l, against main (s51g, 0d343b2). The layer A/B of call 1 plus the GEMVs at T=2 / 4, then
# the GPU tests of everything that reads the layout (layer 4-bit cases, e2m1 decode and prepare, the contest op,
# checkpoints, EP layer) and the four sanitizers on test_layer_gpu's SanitizerSmall.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s51l; R=$OUT/r; mkdir -p $R
SETS=layer+gemv LIMIT=220 KEEP=1 V="main=.device_carry/s51g lay=$N" bash docs/calls/session51_call1.sh
for f in $N/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $N/*
scripts/four_bit_checks.sh $N $R test_e2m1_gpu test_e2m1_prepare_gpu test_nvfp4_grouped_gemm_gpu test_checkpoint_gpu test_ep_layer_gpu  # (as run, these checks were inline; same commands)
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
