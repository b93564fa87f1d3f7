#!/usr/bin/env bash
# Session 42 call 5 (the last ~470 s of device time): the FP8 layer's token-tile rule (BLOCK_T=128 from 16 rows per
# expert, kFp8LayerWideRows; host code only, the kernels are main's). Binaries built here: .device_carry/s42/n (main
# 3c96531 + the rule, uncommitted) and .device_carry/s42/g (main 3c96531). The layer tests on the new rule, then the
# layer bench with even loads (--routing unbiased), old rule / new rule, then BLOCK_T=128 forced at 4-8 rows.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s42/n; G=.device_carry/s42/g; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $N/*.xz $G/fusedmoe.xz; chmod +x $N/* $G/fusedmoe
for b in test_layer_gpu test_ep_layer_gpu test_checkpoint_gpu; do
  s=$SECONDS; timeout 200 $N/$b > $R/$b.txt 2>&1; rc=$?
  echo "$b rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/$b.txt | tr '\n' ' ')"
done
tar cJf $OUT/r.txz -C $OUT r
A="--presets deepseek-v3,qwen3.5-35b-a3b,qwen3-30b-a3b,gpt-oss-120b --tokens 256,512,1024 --routing unbiased"
for v in old new; do
  B=$G/fusedmoe; [ $v = new ] && B=$N/fusedmoe
  s=$SECONDS; timeout 110 $B bench --op layer $A --json $R/r_$v.json > $R/r_$v.txt 2>&1; echo "bench $v rc=$? $((SECONDS-s)) s"
  tar cJf $OUT/r.txz -C $OUT r
done
python3 scripts/bench_compare.py old=$R/r_old.json new=$R/r_new.json 2>&1 | grep -E "^layer |geomean|^op"
s=$SECONDS; FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_s4 timeout 80 $G/fusedmoe bench --op layer \
  --presets deepseek-v3,qwen3.5-35b-a3b,qwen3-30b-a3b,gpt-oss-120b --tokens 128,256 --routing unbiased \
  --json $R/r_w2.json > $R/r_w2.txt 2>&1; echo "bench w2 rc=$? $((SECONDS-s)) s"
python3 scripts/bench_compare.py old=$R/r_old.json w2_at_4_8_rows=$R/r_w2.json 2>&1 | grep -E "^layer |^op"
grep -E "^layer " $R/r_w2.txt | head -8
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
