#!/usr/bin/env bash
# Session 45 call 7 (as run), ~2 min: why call 6's dynamic numbering (FMOE_STATIC_TILES=0) lost 2.5-6% on the qwen
# presets at T=128-1024 (bt16 / bt32 weights-as-M configs and bt128 two-wave tokens-as-M ones): the same A/B with
# the narrow tails off too (FMOE_NARROW_TAILS=0: no half tiles, no narrower wgmmas). Binary: call 6's (s45s).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s45s; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe
for v in "1 1" "0 1" "1 0" "0 0"; do set -- $v
  FMOE_STATIC_TILES=$1 FMOE_NARROW_TAILS=$2 timeout 60 $V/fusedmoe bench --op layer --stages off \
    --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 128,512,1024 --json $R/s$1_n$2.json > $R/s$1_n$2.txt 2>&1
  echo "static=$1 narrow=$2 rc=$?"
done
python3 scripts/bench_compare.py s1n1=$R/s1_n1.json s0n1=$R/s0_n1.json s1n0=$R/s1_n0.json s0n0=$R/s0_n0.json 2>&1 | grep -E "^layer |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
