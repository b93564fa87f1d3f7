#!/usr/bin/env bash
# Session 52 call 7 (as run, ~4 min, the budget's last minutes): the rule from call 6 (.device_carry/s52r): the down
# decode GEMV at 6 CTAs an SM only past one round of 5. Its decode-GEMV / SanitizerSmall / full-size decode tests, the
# four sanitizers, then an ABBA A/B against main (.device_carry/s52g) on the GEMV sizes the rule touches.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s52r; R=$OUT/r; mkdir -p $R
for f in $N/*.xz .device_carry/s52g/fusedmoe.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $N/* .device_carry/s52g/fusedmoe
s=$SECONDS; timeout 120 $N/test_layer_gpu --gtest_filter='*DecodeGemv*:*FourBit*:*SanitizerSmall*:*FullSizePresetsAtDecode*' > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/tests.txt | tr '\n' ' ')"; grep -E "Failure|out of tolerance" $R/tests.txt | head -4
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh "$SAN" $tool $N/test_layer_gpu "$R/$tool.log"); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
for round in 1 2; do
  order="main rule"; [ $round = 2 ] && order="rule main"
  for l in $order; do
    b=.device_carry/s52g/fusedmoe; [ $l = rule ] && b=$N/fusedmoe
    timeout 60 $b bench --op layer --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-235b-a22b --tokens 1,2,4,8 --routing unbiased --json $R/d_${round}_$l.json > $R/d_${round}_$l.txt 2>&1
    timeout 30 $b bench --op layer --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 2,4,8 --routing unbiased --json $R/m_${round}_$l.json > $R/m_${round}_$l.txt 2>&1
    echo "bench r$round $l t=$SECONDS s"
  done
  for x in d m; do python3 scripts/bench_compare.py main=$R/${x}_${round}_main.json rule=$R/${x}_${round}_rule.json 2>&1 | grep -E "^layer |^layer.down|geomean"; done
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
