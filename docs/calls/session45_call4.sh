#!/usr/bin/env bash
# Session 45 call 4 (as run), ~4-5 min: where the staged bf16 rows start to pay. Call 3's tuning run (qwen3-30b-a3b
# T=2048 = 128 routes per expert, model routing) had the route-order twin down_fp8_bt128_w2_tm_h128_s4 at 318.3 us
# against the automatic staged s3's 329.7 (layer.cpp takes the staged twin from 128 routes per expert; session 39
# measured 64 and 256-512 only). Forced s3 / s4 at 128, 192, 256 routes per expert on two presets, two rounds.
# Binary: main's (carry .device_carry/s45/base).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s45/base; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
run() {  # name preset tokens
  for i in 1 2; do for c in s3 s4; do
    FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_$c timeout 100 $V/fusedmoe bench --op layer --presets $2 --tokens $3 \
      --stages off --json $R/$1_${c}_$i.json > $R/$1_${c}_$i.txt 2>&1; echo "$1 $c round $i rc=$?"
  done; done
  for i in 1 2; do python3 scripts/bench_compare.py s3=$R/$1_s3_$i.json s4=$R/$1_s4_$i.json 2>&1 | grep -E "^layer |geomean"; done
}
run qwen3 qwen3-30b-a3b 2048,3072,4096
run qwen35 qwen3.5-35b-a3b 4096,6144,8192
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
