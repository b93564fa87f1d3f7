#!/usr/bin/env bash
# Session 54 call 5 (~4.5 min, the last of the device time): finalize folded into the down decode GEMV
# (FMOE_GEMV_FOLD_FINALIZE, default 1) against c98f212. Binaries: .device_carry/s54f/{base,new} (base = call 4's
# new, c98f212; fusedmoe + test_layer_gpu + the e2m1 test binaries, stripped, xz). The A/B first (one round each
# way), then the 4-bit tests + sanitizers; outputs go straight to $OUT so a cut-off call still returns them.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s54f; N=$D/new; R=$OUT/r; mkdir -p $R
for v in base new; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60 VARIANTS="base new"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b,qwen3.5-35b-a3b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^layer |geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^layer |geomean"
echo "t=$SECONDS s"
scripts/four_bit_checks.sh $N $R/checks
echo "t=$SECONDS s"
