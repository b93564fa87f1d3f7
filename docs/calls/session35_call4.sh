#!/usr/bin/env bash
# Session 35 call 4 (warm machine, build from call 3): memcheck + racecheck at main, then ncu of
# the cluster variant's gate/up at real clocks (why it runs 1.4-1.58x slower).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R; V=.device_carry/v
s=$SECONDS; timeout 380 scripts/gpu_check.sh --no-build --tools "memcheck racecheck" > $R/gpu_check_b.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check_b.txt
for f in $V/cluster/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/cluster/*
left=$((560 - SECONDS)); echo "ncu budget $left s"
if [ $left -gt 90 ]; then
  FMOE_CLUSTER=1 NCU_KERNELS=1 NCU_ARGS="--clock-control none" timeout $left scripts/ncu_layer.sh $V/cluster/fusedmoe deepseek-v3 8192 $R/ncu_cl
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Grid Size|Cluster Size|Waves Per SM" $R/ncu_cl/*.txt | head -20
  head -40 $R/ncu_cl/*_stalls.txt
  rm -f $R/ncu_cl/*.ncu-rep $R/ncu_cl/*_sass.csv
fi
tar cJf $OUT/r.txz -C $OUT r
