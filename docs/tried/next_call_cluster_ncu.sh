#!/usr/bin/env bash
# DRAFT (not run): why the 2-CTA clusters' gate/up is 1.28-1.58x slower (docs/wip/cluster_multicast.diff, measured
# three times in sessions 34-35, never profiled in its last form). ~5-6 min. Before it, here (~8 min on 2 cores):
#   scripts/build_variants.sh .device_carry/c cl=docs/wip/cluster_multicast.diff
# Carry .device_carry/c. Both binaries' gate/up under ncu at real clocks (qwen3-30b-a3b T=8192; cl with FMOE_CLUSTER=1),
# side by side: duration, clocks, throughputs, the grid, and where each kernel's warps wait (ncu_stalls.py).
# Questions (status.md): does each CTA pair run in step (rounds with an idle rank, a loose window), how many clusters
# are resident (cudaOccupancyMaxActiveClusters), and do the consumers wait on full stages more than in base?
set -u
export FMOE_NO_SETUP=1
V=.device_carry/c; R=$OUT/r; mkdir -p $R
for d in base cl; do for f in $V/$d/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$d/*; done
timeout 100 $V/cl/test_layer_gpu --gtest_filter='LayerGpu.Clusters*:LayerGpu.SanitizerSmall' > $R/test.txt 2>&1
echo "cl tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $R/test.txt | head
for d in base cl; do
  env_cl=""; [ $d = cl ] && env_cl="FMOE_CLUSTER=1"
  env $env_cl FMOE_PRINT_CONFIG=1 NCU_KERNELS=1 NCU_ARGS="--clock-control none" timeout 170 \
    scripts/ncu_layer.sh $V/$d/fusedmoe qwen3-30b-a3b 8192 $R/ncu_$d
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Registers Per|Achieved Occupancy|Grid Size|Cluster Size|Waves Per SM" $R/ncu_$d/*.txt | head -20
  grep -m2 "^\[fusedmoe\]" $R/ncu_$d/*.log
  head -30 $R/ncu_$d/*_stalls.txt
  rm -f $R/ncu_$d/*.ncu-rep
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
