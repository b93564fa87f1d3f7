#!/usr/bin/env bash
# Session 47 call 2 (as run), 241 s: the last wave's items in halves, where a grouped GEMM runs whole tiles only (the gate/up;
# the down in deterministic mode and on fast mode's bf16 route rows) and the last wave would keep at most half the
# CTAs busy (knob FMOE_LAST_WAVE_HALVES, default on in both variants):
#   lwh = main + docs/wip/last_wave_halves.diff: the two-wave tokens-as-M tiles (fp8) at half height (HalfTile);
#   nar = lwh + docs/wip/last_wave_halves_narrow.diff: also the weights-as-M tiles at half width (TileWidth: the NVFP4
#         and fp8 one-wave configs), and the GPU test's NVFP4 case.
# Binaries (carry all three): .device_carry/s47l (lwh: fusedmoe, test_layer_gpu), .device_carry/s47n (nar: fusedmoe and
# all 13 GPU test binaries, for a gpu_check after), main in .device_carry/s47. Rebuild: git apply the diffs in order,
# ninja -C build, strip + xz -3 into the folder, git checkout -- README.md src tests.
# sass (scripts/sass_compare.py, main -> lwh / nar): 41 / 27 of 45 grouped GEMM kernels identical, the others +150-260
# instructions, no new local memory. CPU: test_half_tile_walk 4/4 (the halves cover the walk and shorten an equal-item
# list schedule), ctest 40/40 with each.
# Predicted (scripts/last_wave_model.py: numpy draws of the bench's routing, equal items, a half 0.55 of an item): the
# fp8 gate/up at T=2048 5-6% faster on the qwen presets, ~2% at T=4096; NVFP4 (nar) less (a half decodes the same
# weights); unchanged where nothing halves (the knob then changes nothing: the same walk).
set -u
export FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
for d in s47l s47n; do xz -d -f -T0 .device_carry/$d/*.xz; chmod +x .device_carry/$d/*; done
s=$SECONDS; timeout 200 .device_carry/s47n/test_layer_gpu \
  --gtest_filter='*LastWave*:*NarrowTail*:*DynamicItems*:*StaticTile*:*Sanitizer*' > $R/tests_nar.txt 2>&1
echo "nar test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests_nar.txt | tr '\n' ' ')"
grep -E "Failure|expected|differs" $R/tests_nar.txt | head -8
# Layer, knob on / off, same binary (the off walk is main's).
for d in s47l s47n; do for h in 1 0; do
  p=fp8; ps=qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3
  [ $d = s47n ] && p=nvfp4 && ps=qwen3-30b-a3b,qwen3.5-35b-a3b  # (its fp8 kernels are lwh's plus the one-wave ones)
  FMOE_LAST_WAVE_HALVES=$h timeout 120 .device_carry/$d/fusedmoe bench --op layer --precision $p --stages on --mode both \
    --presets $ps --tokens 2048,4096,8192 \
    --json $R/${d}_h$h.json > $R/${d}_h$h.txt 2>&1; echo "$d $p halves=$h rc=$?"
done
python3 scripts/bench_compare.py whole=$R/${d}_h0.json halves=$R/${d}_h1.json 2>&1 | grep -E "^layer(\.gate_up|\.down)? |geomean"
tar cJf $OUT/r.txz -C $OUT r
done
echo "t=$SECONDS s"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
# If it gains: the gpu_check call (~9 min) on nar's binaries, as docs/calls/session46_call4.sh with G=.device_carry/s47n.
