#!/usr/bin/env bash
# DRAFT (not run), ~2-3 min, knobs only (main's fusedmoe: carry .device_carry/s46/base). Session 45's bf16 tuning run
# (qwen3.5-35b-a3b T=8192, one run) had the down GEMM's two-wave tile `down_bf16_bt128_w2_s4` 1.020x ahead of the
# automatic `down_bf16_bt128_s6` (1282.7 against 1308.7 us). Two rounds, forced against the rule, on three presets
# where the bf16 layer runs BLOCK_T=128 tiles: if the two-wave down tile wins everywhere by > 1%, select_waves'
# bf16 down branch takes it (with this table as its reason).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s46/base; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe
for i in 1 2; do for c in auto w2; do
  if [ $c = w2 ]; then export FMOE_FORCE_CONFIG=down_bf16_bt128_w2_s4; else unset FMOE_FORCE_CONFIG; fi
  timeout 100 $V/fusedmoe bench --op layer --precision bf16 --stages on --presets qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 \
    --tokens 2048,4096,8192 --json $R/${c}_$i.json > $R/${c}_$i.txt 2>&1; echo "$c round $i rc=$?"
done; done
unset FMOE_FORCE_CONFIG
for i in 1 2; do python3 scripts/bench_compare.py auto=$R/auto_$i.json w2=$R/w2_$i.json 2>&1 | grep -E "^layer(\.down)? |geomean"; done
grep -h "^layer " $R/auto_1.txt | awk '{print $2, $4, $5}'
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
