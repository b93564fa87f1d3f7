#!/usr/bin/env bash
# DRAFT (not run), ~6 min: docs/wip/last_wave_halves.diff, the last wave's items in halves in the two-wave tokens-as-M
# GEMMs that run whole tiles only (the fp8 gate/up; the fp8 down in deterministic mode and on fast mode's bf16 route rows). Binaries: .device_carry/s47l =
# main 867651d + the diff (fusedmoe and all 13 GPU test binaries, for a gpu_check after), .device_carry/s47 = main.
# Rebuild: git apply docs/wip/last_wave_halves.diff && ninja -C build && strip + xz -3 build/fusedmoe and
# build/tests/test_*_gpu into .device_carry/s47l && git checkout -- README.md src tests. Carry .device_carry/s47l.
# sass (scripts/sass_compare.py, main -> diff): 41 of 45 grouped GEMM kernels identical; the 4 fp8 two-wave
# tokens-as-M ones +160 instructions, no new local memory. CPU: test_half_tile_walk 4/4 (the halves cover the walk and
# shorten an equal-item list schedule), ctest 40/40.
# Predicted (numpy draws of the bench's routing, items of equal length, a half 0.55 of an item): the gate/up at T=2048
# 5-6% faster on qwen3-30b-a3b (921-969 items on 132 CTAs) and qwen3.5-35b-a3b, ~2% at T=4096, 0-2% at T=8192;
# unchanged where nothing halves (then the knob changes nothing: the same walk).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s47l; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
s=$SECONDS; timeout 200 $V/test_layer_gpu --gtest_filter='*LastWave*:*NarrowTail*:*DynamicItems*:*StaticTile*:*Sanitizer*' \
  > $R/tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests.txt | tr '\n' ' ')"
grep -E "Failure|expected|differs" $R/tests.txt | head -8
for i in 1 2; do for h in 1 0; do
  FMOE_LAST_WAVE_HALVES=$h timeout 120 $V/fusedmoe bench --op layer --stages on --mode both \
    --presets qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 --tokens 2048,4096,8192 \
    --json $R/h${h}_$i.json > $R/h${h}_$i.txt 2>&1; echo "halves=$h round $i rc=$?"
done
python3 scripts/bench_compare.py whole=$R/h0_$i.json halves=$R/h1_$i.json 2>&1 | grep -E "^layer(\.gate_up|\.down)? |geomean"
tar cJf $OUT/r.txz -C $OUT r
done
echo "t=$SECONDS s"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
# If the gate/up gains: the gpu_check call (~9 min) on the same binaries, as docs/calls/session46_call4.sh with
# G=.device_carry/s47l.
