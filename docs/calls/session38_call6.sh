#!/usr/bin/env bash
# Session 38 call 6 (timing experiment): what the combine epilogue costs the down GEMM, measured
# by running it twice per tile (.device_carry/s38/dbl: 10a21ff + docs/tried/double_combine_epilogue.diff,
# built here; fp32-atomic outputs double, so only T=8192, which the bench does not check beyond
# "finite") against 10a21ff (.device_carry/s38/thread), in turn, twice. Carry .device_carry/s38.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s38; R=$OUT/r; mkdir -p $R
for n in thread dbl; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 8192 --mode both --stages on)
i=0
for n in thread dbl dbl thread; do
  i=$((i+1)); s=$SECONDS; timeout 90 $V/$n/fusedmoe "${A[@]}" --json $R/${n}_$i.json > $R/${n}_$i.txt 2>&1
  echo "$n ($i) rc=$? $((SECONDS-s)) s"; grep -iE "error|not finite" $R/${n}_$i.txt | head -3
done
python3 scripts/bench_compare.py thread=$R/thread_1.json dbl=$R/dbl_2.json dbl2=$R/dbl_3.json thread2=$R/thread_4.json > $R/compare.txt 2>&1
grep -E "down|geomean" $R/compare.txt | head -30
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
