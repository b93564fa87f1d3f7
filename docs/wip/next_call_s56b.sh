#!/usr/bin/env bash
# DRAFT for session 56 (not run, ~5 min), after next_call_s56.sh: the up decode GEMV warmed before its PDL
# wait (docs/wip/gemv_warm_before_wait.diff: a dry pass through the same code while route_quant runs).
# Session 55 built .device_carry/s56g from d93077f (base, gwarm; fusedmoe + test_layer_gpu, stripped, xz):
#   BUILD_TARGETS="fusedmoe test_layer_gpu" scripts/build_variants.sh .device_carry/s56g \
#     gwarm=docs/wip/gemv_warm_before_wait.diff
# Carry [".device_carry/s56g"]. If it wins: the commit's own four_bit_checks (sanitizers) and a gpu_check.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s56g; R=$OUT/r; mkdir -p $R
for v in base gwarm; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; timeout 150 $D/gwarm/test_layer_gpu --gtest_filter='*DecodeGemv*:*FourBit*:*Nvfp4*:*Mxfp4*:*FullSizePresetsAtDecode*' > $R/gwarm.test.txt 2>&1
echo "gwarm test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/gwarm.test.txt | tr '\n' ' ')"
for tool in racecheck synccheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh "$SAN" $tool $D/gwarm/test_layer_gpu "$R/$tool.log"); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=90 VARIANTS="base gwarm"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b,qwen3-235b-a22b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^layer |^layer.gate|geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^layer |^layer.gate|geomean"
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
