#!/usr/bin/env bash
# Session 39 call 1 (as run): the sorted rows diff, now docs/tried/sorted_route_rows_tma_call1.diff (it was docs/wip/sorted_route_rows_tma.diff), on the GPU. Before it,
# here (one ninja at a time):
#   scripts/build_variants.sh .device_carry/n sorted=docs/wip/sorted_route_rows_tma.diff
# Carry .device_carry/n. About 4-5 minutes: the new test case and the rows16 tests of the variant,
# racecheck + memcheck of SanitizerSmall, then the layer A/B at T=2048,8192 (fast: the bf16 rows
# from T*H*4 > 50 MiB, i.e. all three presets at T=8192 and deepseek-v3 at 2048), twice.
# If it wins: apply it on main and run scripts/gpu_check.sh (two calls, as session 38's 2 and 3).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/n; R=$OUT/r; mkdir -p $R
for n in base sorted; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
s=$SECONDS; timeout 150 $V/sorted/test_layer_gpu --gtest_filter='LayerGpu.FastModeBf16RouteRows:LayerGpu.SanitizerSmall:LayerGpu.TokensOnMDownGemmBiasesAndAPartialWave:LayerGpu.GraphReplaysAndDeterminism' > $R/test.txt 2>&1
echo "test rc=$? $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/test.txt | tr '\n' ' ')"; grep -E "Failure|FAILED" -A3 $R/test.txt | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh $SAN $tool $V/sorted/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
ROUNDS=2 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/sorted/fusedmoe $R/ab \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on | grep -E "layer_ab|down|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
