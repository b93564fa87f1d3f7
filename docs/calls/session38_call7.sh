#!/usr/bin/env bash
# Session 38 call 7 (measurement for the staged-epilogue sketch in docs/status.md): the fast-mode
# down config down_fp8_bt128_w2_tm_h128 with 3 k-stages instead of 4 (what a 64 KB bf16 staging
# buffer would leave), .device_carry/s38/s3 = 10a21ff with that gemm_configs.def line changed
# (s4 -> s3), against 10a21ff (.device_carry/s38/thread), in turn, twice. Carry .device_carry/s38.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s38; R=$OUT/r; mkdir -p $R
for n in thread s3; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on)
i=0
for n in thread s3 s3 thread; do
  i=$((i+1)); s=$SECONDS; timeout 80 $V/$n/fusedmoe "${A[@]}" --json $R/${n}_$i.json > $R/${n}_$i.txt 2>&1
  echo "$n ($i) rc=$? $((SECONDS-s)) s"; grep -iE "error|mismatch" $R/${n}_$i.txt | head -3
done
python3 scripts/bench_compare.py thread=$R/thread_1.json s3=$R/s3_2.json s3b=$R/s3_3.json thread2=$R/thread_4.json > $R/compare.txt 2>&1
grep -E "down|^layer  |geomean" $R/compare.txt | head -30
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
