#!/usr/bin/env bash
# As run in session 44, ~7-9 min (worst case with stalls ~9.5): the bf16 BLOCK_T=64 stall (session 43: 14 of 15 bench runs of `--precision bf16
# --presets qwen3-30b-a3b --tokens 384|512` spun forever after the first forward). Binaries in .device_carry/s44
# (built at session 43's end by
#   BUILD_TARGETS="fusedmoe test_*_gpu (all 13)" scripts/build_variants.sh .device_carry/s44 \
#     rep=docs/wip/repeat_forwards_600.diff fix=docs/wip/repeat_forwards_600.diff,docs/wip/producer_threads_drive_full.diff
# base = main 89e208e (device code of 3c96531); rep = base + the 600-forward test; fix = rep + every producer thread
# arriving on the full barrier). Carry .device_carry/s44/{base,rep,fix} (base and rep: fusedmoe + test_layer_gpu only).
# 1. Does the 600-forward test reproduce the stall on main's kernels (rep)? 2. Does the fix pass it and the rest of
# test_layer_gpu? 3. The bench line that stalled, 3 times each at T=384 and 512 on fix (a stall: rc 124), once on
# base as the control. 4. What the fix costs where it changes the kernels (the bf16 and e2m1 down GEMMs: 128 more
# arrivals a stage), base / fix at sizes base runs. Then next_call_s44_gpu_check.sh.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s44; R=$OUT/r; mkdir -p $R
for d in base rep fix; do xz -d -f -T0 $V/$d/*.xz; chmod +x $V/$d/*; done
t() {  # name binary filter timeout
  s=$SECONDS; timeout $4 $2 --gtest_filter="$3" > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/$1.txt | tr '\n' ' ') $(grep -E 'did not finish|Failure' $R/$1.txt | head -2 | cut -c1-220)"
}
t rep_repeat $V/rep/test_layer_gpu '*RepeatedForwards*' 120
t fix_repeat $V/fix/test_layer_gpu '*RepeatedForwards*' 120
t fix_layer $V/fix/test_layer_gpu '-*RepeatedForwards*' 200
tar cJf $OUT/r.txz -C $OUT r
B="bench --op layer --precision bf16 --presets qwen3-30b-a3b --stages off"
for T in 384 512; do for i in 1 2 3; do
  s=$SECONDS; timeout 25 $V/fix/fusedmoe $B --tokens $T > $R/fixb_${T}_$i.txt 2>&1
  echo "fix bench T=$T run $i rc=$? $((SECONDS-s)) s: $(grep -E '^layer ' $R/fixb_${T}_$i.txt | awk '{print $4, $5, $6}')"
done; done
s=$SECONDS; timeout 25 $V/base/fusedmoe $B --tokens 384 > $R/baseb_384.txt 2>&1
echo "base bench T=384 (control) rc=$? $((SECONDS-s)) s: $(grep -E '^layer ' $R/baseb_384.txt | awk '{print $4, $5, $6}')"
tar cJf $OUT/r.txz -C $OUT r
for d in base fix; do
  [ $SECONDS -lt 450 ] || { echo "ab $d skipped: $SECONDS s gone"; continue; }
  s=$SECONDS; timeout 45 $V/$d/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b \
    --tokens 256,1024,4096 --stages on --json $R/ab_bf16_$d.json > $R/ab_bf16_$d.txt 2>&1; echo "ab bf16 $d rc=$? $((SECONDS-s)) s"
  s=$SECONDS; timeout 45 $V/$d/fusedmoe bench --op layer --precision nvfp4 --presets qwen3-30b-a3b \
    --tokens 1,64,1024,4096 --stages on --json $R/ab_nv_$d.json > $R/ab_nv_$d.txt 2>&1; echo "ab nvfp4 $d rc=$? $((SECONDS-s)) s"
  tar cJf $OUT/r.txz -C $OUT r
done
for x in bf16 nv; do
  python3 scripts/bench_compare.py base=$R/ab_${x}_base.json fix=$R/ab_${x}_fix.json 2>&1 | grep -E "^layer(\.down)? |geomean"
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
