#!/usr/bin/env bash
# Session 52 call 4 (as run, ~2 min): ncu of the decode GEMVs at T=1 (deepseek-v3, even loads; qwen3-30b-a3b), main's
# binary (.device_carry/s52g): gate/up 63.6 us and down 33.7 us at ~2.3 TB/s, half the copy ceiling (call 3).
set -u
export FMOE_NO_SETUP=1
N=${N:-.device_carry/s52g}; R=$OUT/r; mkdir -p $R
[ -x $N/fusedmoe ] || { xz -d -f -T0 $N/fusedmoe.xz; chmod +x $N/fusedmoe; }
NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 200 scripts/ncu_layer.sh $N/fusedmoe deepseek-v3 1 $R --precision nvfp4 --routing unbiased
NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 150 scripts/ncu_layer.sh $N/fusedmoe qwen3-30b-a3b 1 $R --precision nvfp4 --routing unbiased
for f in $R/*.txt; do echo "== $f"; grep -E "decode_gemv_kernel|Duration|DRAM Throughput|Memory Throughput|Issue Slots Busy|Executed Ipc A|Achieved Occupancy|Registers Per|Eligible Warps|Waves Per SM|Block Limit Registers|Theoretical Occ" $f | head -40; done
for f in $R/*_stalls.txt; do echo "== $f"; head -30 $f; done
rm -f $R/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
