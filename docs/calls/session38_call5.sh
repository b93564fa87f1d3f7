#!/usr/bin/env bash
# Session 38 call 5: (1) no regression at decode sizes from the thread order (its weights-as-M
# swiglu stores pick the staging column at run time): main before (base, 1737a69) and after
# (thread, = 10a21ff's kernels) at T = 1, 16, 128, 512, in turn, twice; (2) ncu of the gate/up
# and down GEMMs after the change, qwen3-30b-a3b T=8192 (as session 37 call 1: the card's clocks,
# scripts/ncu_stalls.py regions). Carry .device_carry/s38.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s38; R=$OUT/r; mkdir -p $R/ncu
for n in base thread; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 1,16,128,512)
i=0
for n in base thread thread base; do
  i=$((i+1)); s=$SECONDS; timeout 80 $V/$n/fusedmoe "${A[@]}" --json $R/${n}_$i.json > $R/${n}_$i.txt 2>&1
  echo "$n ($i) rc=$? $((SECONDS-s)) s"
done
python3 scripts/bench_compare.py base=$R/base_1.json thread=$R/thread_2.json thread2=$R/thread_3.json base2=$R/base_4.json > $R/compare.txt 2>&1
grep -E "^layer  |geomean" $R/compare.txt | head -30
s=$SECONDS; NCU_ARGS="--clock-control none" timeout 200 scripts/ncu_layer.sh $V/thread/fusedmoe qwen3-30b-a3b 8192 $R/ncu; echo "ncu $((SECONDS-s)) s"
grep -E "^  [a-z_]+.*grouped_gemm_kernel|Duration|SM Frequency|Executed Instructions  " $R/ncu/*.txt | head -12
head -40 $R/ncu/*_stalls.txt
rm -f $R/ncu/*.ncu-rep; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
