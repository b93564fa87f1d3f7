#!/usr/bin/env bash
# Session 55 call 2 (~5 min): route_quant's block routing (all four warps of a token rank its
# sigmoid_grouped_topk experts) against main (a012853). Carry .device_carry/s55r: base/fusedmoe
# (main), new/{fusedmoe,test_moe_fp8_gpu,test_moe_fp8_stages_gpu} (stripped, xz). Tests and the
# four sanitizers first (SanitizerSmall now has a block-routed case; racecheck also on the new
# test), then the ABBA A/B with stage rows (layer.route_quant alone), then ncu of route_quant.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s55r; N=$D/new; R=$OUT/r; mkdir -p $R
for v in base new; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for t in test_moe_fp8_gpu test_moe_fp8_stages_gpu; do
  s=$SECONDS; timeout 120 $N/$t > $R/$t.txt 2>&1; echo "$t rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$t.txt | tr '\n' ' ')"
  grep -E "Failure|differ|Expected|Which is" $R/$t.txt | head -8
done
for tool in memcheck racecheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh "$SAN" $tool $N/test_moe_fp8_gpu "$R/$tool.log")
  echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
s=$SECONDS; timeout 120 $SAN --tool racecheck --racecheck-report all --error-exitcode 3 $N/test_moe_fp8_gpu --gtest_filter='*BlockRouting*' > $R/racecheck_block.log 2>&1
echo "racecheck BlockRouting rc=$? $((SECONDS-s)) s: $(grep -E 'RACECHECK SUMMARY|PASSED|FAILED' $R/racecheck_block.log | tr '\n' ' ')"
echo "t=$SECONDS s"
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=90 VARIANTS="base new"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,kimi-k2 --tokens 1,2,4,8,64,512 --routing unbiased 2>&1 | grep -E "^layer |^layer.route|geomean"
echo "t=$SECONDS s"
scripts/variants_check.sh $D $R/f --precision fp8 --mode fast --presets deepseek-v3 --tokens 1,8,64,256,512,1000 --routing unbiased 2>&1 | grep -E "^layer |^layer.route|geomean"
echo "t=$SECONDS s"
NCU_REGEX=route_quant NCU_KERNELS=1 timeout 60 scripts/ncu_layer.sh $N/fusedmoe deepseek-v3 1 $R/ncu --precision nvfp4 --routing unbiased
grep -E "route_quant_kernel|Duration|Elapsed Cycles|Registers Per" $R/ncu/*.txt | head -6
rm -f $R/ncu/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
