#!/usr/bin/env bash
# Session 49 call 7 (~2 min): the same ncu as session 48 call 8 on the new defaults (two-block stages, lean down producer):
# misses most: deepseek-v3 NVFP4 T=128 (4 rows per expert, BLOCK_T=16 c2_s8, ~2400 GB/s = 52% of the copy ceiling),
# even loads; gate/up and down, --set full with source counters (scripts/ncu_layer.sh).
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s49g; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $G/fusedmoe.xz; chmod +x $G/fusedmoe
timeout 140 scripts/ncu_layer.sh $G/fusedmoe deepseek-v3 128 $R --precision nvfp4 --routing unbiased
echo "t=$SECONDS s"; rm -f $R/*.ncu-rep; ls -la $R; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
