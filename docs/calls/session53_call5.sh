#!/usr/bin/env bash
# Session 53 call 5 (~4 min, the budget's last minutes): the up decode GEMV at 6 CTAs an SM, now that it fits 78
# registers without a spill (the cp.async B ring freed its fill registers). One binary, .device_carry/s53u/base
# (HEAD + docs/tried/gemv_up_six_ctas_knob.diff: X_UP6=1 the up at 6 past one round of 5 as the down, X_UP6=2 at 6 whenever
# many). Its decode-GEMV cases with X_UP6=2 and memcheck, then an ABBA A/B of 0 / 1 / 2.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s53u; B=$D/base; R=$OUT/r; mkdir -p $R
for f in $B/*.xz; do xz -d -f -T0 $f; done; chmod +x $B/*
s=$SECONDS; X_UP6=2 timeout 100 $B/test_layer_gpu --gtest_filter='*DecodeGemv*:*FullSizePresetsAtDecode*' > $R/tests.txt 2>&1
echo "tests X_UP6=2 rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/tests.txt | tr '\n' ' ')"; grep -E "Failure|out of tolerance" $R/tests.txt | head -4
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; n=$(X_UP6=2 timeout 60 scripts/sanitize_binary.sh "$SAN" memcheck $B/test_layer_gpu "$R/memcheck.log"); echo "memcheck X_UP6=2 rc=$? reports=$n $((SECONDS-s)) s"
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60 VARIANTS="base rule:base all:base" VARIANT_ENV="rule=X_UP6=1 all=X_UP6=2"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b,qwen3.5-35b-a3b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|geomean"
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
