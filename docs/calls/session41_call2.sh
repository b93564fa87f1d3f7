#!/usr/bin/env bash
# Session 41 call 2 (~5-6 min). Carry .device_carry/s41/f (main 1c6162c + route_quant_bulk_rows.diff +
# finalize_shared_arithmetic.diff; with FMOE_ROUTE_QUANT_BULK=0 its route_quant is main's) and .device_carry/c.
# 1. finalize_shared_arithmetic: the finalize tests and sanitizer cases on its binary, and a layer A/B against
#    main (FMOE_ROUTE_QUANT_BULK=0, so only finalize's register numbers differ).
# 2. The schedule kernel under ncu (20.4 us in place at qwen3-30b-a3b T=8192 for 16 CTAs, 18 us at T=2048 for 4:
#    a latency chain, not bytes): where its warps wait.
# 3. The cluster gate/up against base under ncu (docs/wip/next_call_cluster_ncu.sh, as drafted).
set -u
export FMOE_NO_SETUP=1
F=.device_carry/s41/f; Q=.device_carry/q;  # only q/base is carried
 R=$OUT/r; mkdir -p $R
for f in $F/*.xz $Q/base/*.xz; do xz -d -f -T0 $f; done; chmod +x $F/* $Q/base/*
export FMOE_ROUTE_QUANT_BULK=0
timeout 150 $F/test_layer_gpu --gtest_filter='LayerGpu.FinalizeByBulk*:LayerGpu.FastModeBf16RouteRows:LayerGpu.Bf16RouteRows*:LayerGpu.GraphReplaysAndDeterminism:LayerGpu.LargeT*:LayerGpu.Sanitizer*' > $R/fin_test.txt 2>&1
echo "fin tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $R/fin_test.txt | head
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh $SAN $tool $F/test_layer_gpu $R/fin_$tool.txt); echo "fin $tool rc=$? reports=$n $((SECONDS-s)) s"
done
mkdir -p $R/v/base $R/v/fin; cp $Q/base/fusedmoe $R/v/base/; cp $F/fusedmoe $R/v/fin/
for b in base fin; do
  timeout 70 $R/v/$b/fusedmoe bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 \
    --stages on --json $R/ab_$b.json > $R/ab_$b.txt 2>&1; echo "bench $b rc=$?"
done
python3 scripts/bench_compare.py base=$R/ab_base.json fin=$R/ab_fin.json 2>&1 | grep -E "finalize|^layer  |geomean" | head -20
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for T in 2048 8192; do
  NCU_REGEX=schedule_kernel NCU_KERNELS=1 timeout 100 scripts/ncu_layer.sh $Q/base/fusedmoe qwen3-30b-a3b $T $R/ncu_sched
  grep -E "Duration|Elapsed Cycles|SM Frequency|Registers Per|Achieved Occupancy" $R/ncu_sched/ncu_qwen3-30b-a3b_T$T.txt | head -6
  head -24 $R/ncu_sched/ncu_qwen3-30b-a3b_T${T}_stalls.txt; rm -f $R/ncu_sched/*.ncu-rep
done
tar cJf $OUT/r.txz -C $OUT r
OUT2=$OUT/c; mkdir -p $OUT2
OUT=$OUT2 bash docs/wip/next_call_cluster_ncu.sh
