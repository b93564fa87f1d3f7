#!/usr/bin/env bash
# Session 47 call 3 (~8 min): main + the e2m1 down GEMM's two waves at N >= 2048 (select_waves; call 1 measured the
# forced two-wave tile 0.90-0.96 of the one-wave one at qwen shapes). Binaries .device_carry/s47e (fusedmoe,
# test_layer_gpu with the forced w2 e2m1 down in both modes). (1) the rule against the old tile forced, both modes,
# incl. qwen3-235b-a22b (K=1536, not measured before); (2) test_layer_gpu in full; (3) memcheck + racecheck of its
# *Sanitizer* cases.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s47e; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
for c in auto w1; do
  if [ $c = w1 ]; then export FMOE_FORCE_CONFIG=down_e2m1_bt128_s8; else unset FMOE_FORCE_CONFIG; fi
  timeout 150 $V/fusedmoe bench --op layer --precision nvfp4 --stages on --mode both \
    --presets qwen3-30b-a3b,qwen3.5-35b-a3b,qwen3-235b-a22b --tokens 2048,8192 --json $R/e_$c.json > $R/e_$c.txt 2>&1
  echo "$c rc=$? t=$SECONDS s"
done
unset FMOE_FORCE_CONFIG
python3 scripts/bench_compare.py w1=$R/e_w1.json w2=$R/e_auto.json 2>&1 | grep -E "^layer(\.down)? |geomean"
grep -h "^layer " $R/e_auto.txt | awk '{print $2, $4, $5, $NF}' | head -12
tar cJf $OUT/r.txz -C $OUT r
s=$SECONDS; timeout 240 $V/test_layer_gpu > $R/layer_tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/layer_tests.txt | tr '\n' ' ')"
grep -E "Failure|expected|differs" $R/layer_tests.txt | head -8
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  s=$SECONDS; n=$(timeout 100 scripts/sanitize_binary.sh $SAN $tool $V/test_layer_gpu $R/san_$tool.log)
  echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
echo "t=$SECONDS s"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
