#!/usr/bin/env bash
# DRAFT (not run), ~7 min. Binaries: .device_carry/c2/{base,cl} (fusedmoe, test_layer_gpu), built at session 41's
# end with `scripts/build_variants.sh .device_carry/c2 cl=docs/wip/cluster_multicast.diff` (base = main e9ab434,
# whose device code is 905d893 + 4090264's; rebuild if main's device code changed or the folder is gone, ~15 min).
# Carry .device_carry/c2.
# 1. The relaxed cluster form: its tests, racecheck of SanitizerSmall (it forces the cluster config), and both
#    gate/ups under ncu at real clocks (qwen3-30b-a3b T=8192): what is left after the membar (session 41: parity).
# 2. qwen's down GEMM at short K (K = 768: six k-blocks) with the ring holding the whole K: the one-wave 6-stage
#    config forced against the rule's two-wave 3-stage one and the two-wave 4-stage one (T = 2048, 4096).
# 3. route_quant's stalls at qwen3-30b-a3b T=8192 (36 us against a ~12 us floor; two forms lost blind).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/c2; R=$OUT/r; mkdir -p $R
for d in base cl; do for f in $V/$d/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$d/*; done
timeout 120 $V/cl/test_layer_gpu --gtest_filter='LayerGpu.Clusters*:LayerGpu.SanitizerSmall' > $R/test.txt 2>&1
echo "cl tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $R/test.txt | head
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
n=$(timeout 90 scripts/sanitize_binary.sh $SAN racecheck $V/cl/test_layer_gpu $R/racecheck.txt); echo "cl racecheck rc=$? reports=$n"
for d in base cl; do
  env_cl=""; [ $d = cl ] && env_cl="FMOE_CLUSTER=1"
  env $env_cl NCU_KERNELS=1 NCU_ARGS="--clock-control none" timeout 120 \
    scripts/ncu_layer.sh $V/$d/fusedmoe qwen3-30b-a3b 8192 $R/ncu_$d
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Grid Size|Cluster Size" $R/ncu_$d/*.txt | head -8
  head -16 $R/ncu_$d/*_stalls.txt; rm -f $R/ncu_$d/*.ncu-rep
done
for c in rule down_fp8_bt128_tm_h128_s6 down_fp8_bt128_w2_tm_h128_s4; do
  e=FMOE_X=0; [ $c = rule ] || e=FMOE_FORCE_CONFIG=$c
  env $e timeout 60 $V/base/fusedmoe bench --op layer --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,4096 \
    --stages on --json $R/down_$c.json > $R/down_$c.txt 2>&1; echo "down $c rc=$?"
done
python3 scripts/bench_compare.py rule=$R/down_rule.json w1s6=$R/down_down_fp8_bt128_tm_h128_s6.json \
  w2s4=$R/down_down_fp8_bt128_w2_tm_h128_s4.json 2>&1 | grep -E "down|^layer  |geomean"
NCU_REGEX=route_quant NCU_KERNELS=1 timeout 100 scripts/ncu_layer.sh $V/base/fusedmoe qwen3-30b-a3b 8192 $R/ncu_rq
grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit" $R/ncu_rq/*.txt | head -8
head -20 $R/ncu_rq/*_stalls.txt; rm -f $R/ncu_rq/*.ncu-rep
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
