#!/usr/bin/env bash
# Session 54 call 3 (~5 min): the up GEMV prefetching the down GEMV's weights to L2 and the down finding its
# columns + first weights before its wait on the up (FMOE_GEMV_DOWN_PREFETCH / FMOE_GEMV_DOWN_EARLY), against
# main (e3a239d). Binaries: .device_carry/s54p/{base,new} (fusedmoe + test_layer_gpu + the e2m1 test binaries,
# stripped, xz). new's defaults: early 1, prefetch 2 where min(T k, E) experts' down weights fit 24 MiB.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s54p; N=$D/new; R=$OUT/r; mkdir -p $R
for v in base new; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
scripts/four_bit_checks.sh $N $R/checks  # test_layer_gpu's 4-bit cases (the new DecodeGemv* tests), e2m1 binaries, four sanitizers
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60
export VARIANTS="base new off:new early:new pf1:new pf2:new"
export VARIANT_ENV="off=FMOE_GEMV_DOWN_EARLY=0,FMOE_GEMV_DOWN_PREFETCH=0 early=FMOE_GEMV_DOWN_PREFETCH=0 pf1=FMOE_GEMV_DOWN_PREFETCH=1 pf2=FMOE_GEMV_DOWN_PREFETCH=2"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b,qwen3.5-35b-a3b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |geomean"
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
