#!/usr/bin/env bash
# Session 45 call 2 (as run), ~6 min: docs/wip/bf16_up_w2_s4.diff, the bf16 gate/up's two-wave tile with 4 stages instead of 3
# (stages carry the fp8 scale arrays only with fp8 weights: a bf16 w2 stage is 48 KB, and 4 fit beside the staging
# tile, 225 KB; sass_compare against main: every fp8 and e2m1 kernel identical, two bf16 kernels reordered, the
# w2 gate/up replaced). Binaries: BUILD_TARGETS="fusedmoe test_layer_gpu" scripts/build_variants.sh .device_carry/s45b \
#   s4=docs/wip/bf16_up_w2_s4.diff   (base = main). Carry .device_carry/s45b.
# Predicted: the bf16 gate/up at T >= 1024 a few % faster (a deeper weight stream; 3 x 64 K stages hold ~2 us of
# work at the BF16 rate); nothing else moves.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s45b; R=$OUT/r; mkdir -p $R
for d in base s4; do xz -d -f -T0 $V/$d/*.xz; chmod +x $V/$d/*; done
s=$SECONDS; timeout 200 $V/s4/test_layer_gpu --gtest_filter='*EveryCompiledLayerConfigRuns*:*EveryPresetShrunk*:*LargeT*:*RepeatedForwards*:*Sanitizer*' \
  > $R/layer.txt 2>&1; echo "s4 test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/layer.txt | tr '\n' ' ')"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck initcheck; do
  n=$(timeout 100 scripts/sanitize_binary.sh "$SAN" $tool $V/s4/test_layer_gpu $R/san_$tool.log); echo "$tool rc=$? reports=$n"
done
tar cJf $OUT/r.txz -C $OUT r
for i in 1 2; do for d in s4 base; do
  timeout 90 $V/$d/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 \
    --tokens 1024,2048,8192 --stages on --json $R/ab_${d}_$i.json > $R/ab_${d}_$i.txt 2>&1; echo "ab $d round $i rc=$?"
done; done
for i in 1 2; do python3 scripts/bench_compare.py base=$R/ab_base_$i.json s4=$R/ab_s4_$i.json 2>&1 | grep -E "^layer(\.gate_up)? |geomean"; done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
