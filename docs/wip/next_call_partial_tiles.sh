#!/usr/bin/env bash
# DRAFT (not run): docs/wip/sorted_rows_partial_tiles.diff on the GPU, and where the sorted rows'
# threshold belongs. Before it, here (one ninja at a time):
#   scripts/build_variants.sh .device_carry/p part=docs/wip/sorted_rows_partial_tiles.diff
# Carry .device_carry/p. About 5 minutes: the variant's rows16 tests, racecheck / memcheck /
# synccheck / initcheck of SanitizerSmall, then the layer (fast) at T = 2048, 4096 (64 and 128
# routes per expert on deepseek-v3 / qwen3.5; qwen3-30b-a3b has 128 and 256) with each binary
# also forced onto the twin (FMOE_FORCE_CONFIG names only the down config), then T=8192 twice.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/p; R=$OUT/r; mkdir -p $R
for n in base part; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
s=$SECONDS; timeout 150 $V/part/test_layer_gpu --gtest_filter='LayerGpu.FastModeBf16RouteRows:LayerGpu.SanitizerSmall:LayerGpu.TokensOnMDownGemmBiasesAndAPartialWave' > $R/test.txt 2>&1
echo "test rc=$? $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/test.txt | tr '\n' ' ')"; grep -E "Failure|FAILED" -A3 $R/test.txt | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh $SAN $tool $V/part/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
AB_ENV=FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_s3 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/part/fusedmoe $R/mid \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,4096 --stages on | grep -E "layer_ab|down|finalize|^layer  |geomean"
AB_ENV=FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_s3 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/part/fusedmoe $V/base/fusedmoe $R/mid_base \
  --presets deepseek-v3,qwen3.5-35b-a3b --tokens 2048,4096 --stages on | grep -E "layer_ab|^layer  |geomean"
ROUNDS=2 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/part/fusedmoe $R/big \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 8192 --stages on | grep -E "layer_ab|down|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
