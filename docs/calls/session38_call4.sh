#!/usr/bin/env bash
# Session 38 call 4 (timing experiment, not a candidate as is): the SwiGLU sigmoid as
# 0.5 + 0.5 tanh(x / 2) (one MUFU.TANH per value instead of MUFU.EX2 + MUFU.RCP) on top of
# 10a21ff (.device_carry/s38/tanh, built here with /tmp/s38/tanh_act.diff = docs/performance.md
# "Session 38") against 10a21ff (.device_carry/s38/thread), in turn, twice. Carry .device_carry/s38.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s38; R=$OUT/r; mkdir -p $R
for n in thread tanh; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on)
for n in thread tanh tanh thread; do
  i=$((${i:-0}+1)); s=$SECONDS; timeout 80 $V/$n/fusedmoe "${A[@]}" --json $R/${n}_$i.json > $R/${n}_$i.txt 2>&1
  echo "$n ($i) rc=$? $((SECONDS-s)) s"; grep -iE "mismatch|error|fail" $R/${n}_$i.txt | head -3
done
python3 scripts/bench_compare.py thread=$R/thread_1.json tanh=$R/tanh_2.json tanh2=$R/tanh_3.json thread2=$R/thread_4.json > $R/compare.txt 2>&1
grep -E "gate_up|^layer  |geomean" $R/compare.txt | head -30
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
