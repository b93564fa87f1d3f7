#!/usr/bin/env bash
# DRAFT (not run), ~7-8 min. Binaries: .device_carry/s42/{base,rq,cl} (fusedmoe, test_layer_gpu, test_moe_fp8_gpu,
# test_moe_fp8_stages_gpu), built at session 41's end with
#   BUILD_TARGETS="fusedmoe test_layer_gpu test_moe_fp8_gpu test_moe_fp8_stages_gpu" scripts/build_variants.sh \
#     .device_carry/s42 rq=docs/wip/route_quant_fewer_instructions.diff cl=docs/wip/cluster_multicast.diff
# (base = main 9715f72; cl built on 5a8dc8f, the same device code; rebuild if main's device code changed or the folder is gone, ~20 min here). Carry .device_carry/s42.
# 1. rq: its routing and stage tests, racecheck / memcheck / synccheck / initcheck of their sanitizer cases, and the
#    layer A/B against base (route_quant at T = 2048 / 8192, three presets; decode sizes too: the routing runs there).
# 2. cl (the relaxed cluster form, FMOE_CLUSTER=1): both gate/ups under ncu at real clocks (qwen3-30b-a3b T=8192):
#    what is left after the membar (session 41: parity).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s42; R=$OUT/r; mkdir -p $R
for d in base rq cl; do for f in $V/$d/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$d/*; done
s=$SECONDS; timeout 150 $V/rq/test_moe_fp8_gpu > $R/rq_moe.txt 2>&1; echo "rq test_moe_fp8_gpu rc=$? $((SECONDS-s)) s"
grep -E "^\[  (PASSED|FAILED) |Failure" $R/rq_moe.txt | head -5
timeout 60 $V/rq/test_moe_fp8_stages_gpu > $R/rq_stages.txt 2>&1; echo "rq stages rc=$?"
timeout 120 $V/rq/test_layer_gpu --gtest_filter='LayerGpu.GivenRouting*:LayerGpu.EveryPresetShrunk:LayerGpu.SanitizerSmall:LayerGpu.Nvfp4*' > $R/rq_layer.txt 2>&1
echo "rq layer rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $R/rq_stages.txt $R/rq_layer.txt | head -6
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck initcheck; do
  n=$(timeout 60 scripts/sanitize_binary.sh $SAN $tool $V/rq/test_moe_fp8_gpu $R/rq_$tool.txt); echo "rq $tool rc=$? reports=$n"
done
A="--presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 1,64,2048,8192 --stages on"
for d in base rq; do
  timeout 80 $V/$d/fusedmoe bench --op layer $A --json $R/ab_$d.json > $R/ab_$d.txt 2>&1; echo "bench $d rc=$?"
done
python3 scripts/bench_compare.py base=$R/ab_base.json rq=$R/ab_rq.json > $R/compare.txt 2>&1
grep -E "route_quant|^layer  |geomean" $R/compare.txt
tar cJf $OUT/r.txz -C $OUT r
for d in base cl; do
  env_cl=""; [ $d = cl ] && env_cl="FMOE_CLUSTER=1"
  env $env_cl NCU_KERNELS=1 NCU_ARGS="--clock-control none" timeout 120 \
    scripts/ncu_layer.sh $V/$d/fusedmoe qwen3-30b-a3b 8192 $R/ncu_$d
  grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Grid Size|Cluster Size" $R/ncu_$d/*.txt | head -8
  head -16 $R/ncu_$d/*_stalls.txt; rm -f $R/ncu_$d/*.ncu-rep
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
