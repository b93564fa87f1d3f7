#!/usr/bin/env bash
# Session 41 call 5 (the last ~200 s of device time): part 2 of docs/wip/next_call_s42.sh only. qwen's down GEMM
# at short K with the ring holding the whole K (one wave, 6 stages) forced, against the rule (two waves, 3
# stages) and two waves with 4 stages. Carry .device_carry/c2/base (main's device code).
set -u
V=.device_carry/c2; R=$OUT/r; mkdir -p $R
for f in $V/base/fusedmoe.xz; do xz -d -f -T0 $f; done; chmod +x $V/base/fusedmoe
for c in rule down_fp8_bt128_tm_h128_s6 down_fp8_bt128_w2_tm_h128_s4; do
  e=FMOE_X=0; [ $c = rule ] || e=FMOE_FORCE_CONFIG=$c
  env $e timeout 50 $V/base/fusedmoe bench --op layer --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,4096 \
    --stages on --json $R/down_$c.json > $R/down_$c.txt 2>&1; echo "down $c rc=$?"
  tar cJf $OUT/r.txz -C $OUT r
done
python3 scripts/bench_compare.py rule=$R/down_rule.json w1s6=$R/down_down_fp8_bt128_tm_h128_s6.json \
  w2s4=$R/down_down_fp8_bt128_w2_tm_h128_s4.json 2>&1 | grep -E "down|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
