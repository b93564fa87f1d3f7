#!/usr/bin/env bash
# As run in session 44, ~5 min, only once the fix of next_call_s44.sh holds (the bf16 layer runs): knob-only measurements
# on .device_carry/s44/fix/fusedmoe. 1. The bf16 layer's rows16 line (FMOE_ROWS16_MIN_T=1 against the rule, which
# keeps 50 MiB for bf16 weights; FP8 moved to 4 MiB in session 43). 2. The token-tile rule under skewed routing:
# deepseek-v3 with the bench's model routing at 4 and 8 rows per expert (T=128 / 256), the rule against BLOCK_T=128
# forced (session 42: 0.70-0.73 at 16-32 rows; the wide rule now covers 16+ where H >= 4096).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s44/fix; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe
for v in rule rows16; do
  e=FMOE_X=0; [ $v = rows16 ] && e=FMOE_ROWS16_MIN_T=1
  s=$SECONDS; env $e timeout 90 $V/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b,qwen3.5-35b-a3b \
    --tokens 256,512,1024,2048,4096 --routing unbiased --stages off --json $R/b_$v.json > $R/b_$v.txt 2>&1
  echo "bf16 $v rc=$? $((SECONDS-s)) s"
done
python3 scripts/bench_compare.py rule=$R/b_rule.json rows16=$R/b_rows16.json 2>&1 | grep -E "^layer |geomean"
tar cJf $OUT/r.txz -C $OUT r
for v in rule wide; do
  e=FMOE_X=0; [ $v = wide ] && e=FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_s4
  s=$SECONDS; env $e timeout 90 $V/fusedmoe bench --op layer --presets deepseek-v3 --tokens 128,256 --stages off \
    --json $R/d_$v.json > $R/d_$v.txt 2>&1; echo "deepseek model routing $v rc=$? $((SECONDS-s)) s"
done
python3 scripts/bench_compare.py rule=$R/d_rule.json wide=$R/d_wide.json 2>&1 | grep -E "^layer |geomean"
grep -hE "^layer " $R/d_*.txt | awk '{print $2, $3, $4, $5}'
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
