#!/usr/bin/env bash
# Session 49 call 9 (as run, ~2.5 min, the last of the budget): on main's binary (b778748 code, .device_carry/s49m):
# ncu of deepseek-v3 NVFP4 T=128 under even loads (the per-weight instruction count after the one-warp wait), then
# the tuning run at deepseek-v3's 10-row line (T=320, even loads): the two-block BLOCK_T=16 tiles got cheaper.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s49m; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $G/fusedmoe.xz; chmod +x $G/fusedmoe
timeout 60 scripts/ncu_layer.sh $G/fusedmoe deepseek-v3 128 $R --precision nvfp4 --routing unbiased
rm -f $R/*.ncu-rep; tar cJf $OUT/r.txz -C $OUT r
timeout $((165-SECONDS)) $G/fusedmoe bench --op layer --stages off --configs all --routing unbiased --precision nvfp4 \
  --presets deepseek-v3 --tokens 320 > $R/tune.txt 2>&1; echo "tune rc=$? t=$SECONDS s"
grep "^# tune" $R/tune.txt | cut -c1-300; grep -E "^layer" $R/tune.txt | awk '{print $1,$5,$6,$7}' | head -20
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
