#!/usr/bin/env bash
# Session 46 call 2 (~6-7 min). Binaries: main's fusedmoe (.device_carry/s46/base) and test_layer_gpu with the
# first_route_differing fix (carry .device_carry/s46b).
# (1) LayerGpu.StaticTileNumberingWithHotExperts, its first full run (call 1 segfaulted in the test's bf16 compare).
# (2) Static tile numbering on / off on the presets call 1 did not cover, where the rule numbers statically: which
#     per-expert weight sizes lose to the static walk's re-reads (deepseek-v3 fp8 T=2048: 0.948 routing-numbered;
#     qwen presets 2 / 3 MB per expert: 1.01-1.06 routing-numbered).
# (3) docs/wip/next_call_s46_bf16down.sh (the bf16 two-wave down tile forced against the rule, two rounds).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s46b; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
s=$SECONDS; timeout 120 $V/test_layer_gpu --gtest_filter='*StaticTile*:*NarrowTail*:*DynamicItems*' > $R/static_test.txt 2>&1
echo "StaticTile+NarrowTail+DynamicItems rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/static_test.txt | tr '\n' ' ')"
grep -E "Failure|expected|differs" $R/static_test.txt | head -8
for v in "fp8 qwen3-235b-a22b 128,512,1024" "fp8 gpt-oss-120b 128,512,2048" "fp8 kimi-k2 512,2048,3072" \
         "fp8 llama4-maverick 512,2048,8192" "nvfp4 deepseek-v3 512,1024,2048" "bf16 deepseek-v3 1024,2048" \
         "nvfp4 qwen3-235b-a22b 512,1024"; do
  set -- $v; p=$1; pr=$2; t=$3
  [ $p = fp8 ] && pp=fp8_block || pp=$p
  for st in 1 0; do
    FMOE_STATIC_TILES=$st timeout 60 $V/fusedmoe bench --op layer --precision $pp --stages on --presets $pr --tokens $t \
      --json $R/st_${pr}_${p}_$st.json > $R/st_${pr}_${p}_$st.txt 2>&1 || echo "$pr $p static=$st rc=$?"
  done
  python3 scripts/bench_compare.py static=$R/st_${pr}_${p}_1.json routing=$R/st_${pr}_${p}_0.json 2>&1 \
    | grep -E "^layer(\.gate_up|\.down)? "
done
tar cJf $OUT/r.txz -C $OUT r
echo "t=$SECONDS s"
if [ $SECONDS -lt 380 ]; then
for i in 1 2; do for c in auto w2; do
  if [ $c = w2 ]; then export FMOE_FORCE_CONFIG=down_bf16_bt128_w2_s4; else unset FMOE_FORCE_CONFIG; fi
  timeout 100 $V/fusedmoe bench --op layer --precision bf16 --stages on --presets qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 \
    --tokens 2048,4096,8192 --json $R/${c}_$i.json > $R/${c}_$i.txt 2>&1; echo "$c round $i rc=$?"
done; done
unset FMOE_FORCE_CONFIG
for i in 1 2; do python3 scripts/bench_compare.py auto=$R/auto_$i.json w2=$R/w2_$i.json 2>&1 | grep -E "^layer(\.down)? |geomean"; done
fi
echo "t=$SECONDS s"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
