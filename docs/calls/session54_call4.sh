#!/usr/bin/env bash
# Session 54 call 4 (~4 min): the commit that ships the early down GEMV (FMOE_GEMV_DOWN_EARLY=1 by default, the
# L2 prefetch of call 3 taken out): its 4-bit GPU tests + the four sanitizers, and an ABBA layer A/B against main
# (e3a239d). Binaries: .device_carry/s54e/{base,new} (fusedmoe + test_layer_gpu + the e2m1 test binaries, stripped, xz).
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s54e; N=$D/new; R=$OUT/r; mkdir -p $R
for v in base new; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
scripts/four_bit_checks.sh $N $R/checks
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60 VARIANTS="base new"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b,qwen3.5-35b-a3b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |geomean"
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
