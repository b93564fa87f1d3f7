#!/usr/bin/env bash
# Session 41 call 1 (run as is, H200, 210 s): docs/wip/route_quant_bulk_rows.diff on the GPU, ~5-6 min; then the schedule timed in place and the qwen T=2048 down GEMM under ncu. Before it, here (~8 min on 2 cores):
#   BUILD_TARGETS="fusedmoe test_layer_gpu test_moe_fp8_stages_gpu" \
#     scripts/build_variants.sh .device_carry/q rqb=docs/wip/route_quant_bulk_rows.diff
# Carry .device_carry/q. rqb0 / rqb2 are the same binary with FMOE_ROUTE_QUANT_BULK=0 (the register loads: the
# clean A/B of the kernel) / 2 (the bulk kernel bounded to two CTAs an SM, with spills).
# If rqb wins: apply it on main, then scripts/gpu_check.sh ("memcheck racecheck", then at once
# --no-build --no-tests "synccheck initcheck"; or carry binaries built here for the second call).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/q; R=$OUT/r; mkdir -p $R
for f in $V/rqb/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/rqb/*
timeout 120 $V/rqb/test_moe_fp8_stages_gpu > $R/stages.txt 2>&1; echo "stages tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure" $R/stages.txt | head
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh $SAN $tool $V/rqb/test_moe_fp8_stages_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
VARIANTS="base rqb rqb0:rqb rqb2:rqb" VARIANT_ENV="rqb0=FMOE_ROUTE_QUANT_BULK=0 rqb2=FMOE_ROUTE_QUANT_BULK=2" \
  BENCH_TIMEOUT=80 TEST_TIMEOUT=150 \
  TEST_FILTER='LayerGpu.LargeT*:LayerGpu.GraphReplaysAndDeterminism' \
  scripts/variants_check.sh $V $R/ab --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on |
  grep -E "^\[variants\]|route_quant|^layer  |geomean"
# Each non-GEMM kernel's own duration in the layer (ncu serializes the launches, flushes the caches
# before each): the schedule's cost in place (the stage bench's 17-19 us includes two memsets and
# a graph's node latencies), route_quant with and without the bulk rows. ~1 min.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for b in base rqb; do
  timeout 100 $NCU --kernel-name regex:'route_quant|schedule_kernel|finalize|grouped_gemm' --launch-count 5 \
    --metrics gpu__time_duration.sum $V/$b/fusedmoe bench --op layer --presets qwen3-30b-a3b --tokens 8192 \
    --stages off > $R/ncu_$b.txt 2>&1
  echo "ncu $b rc=$?"; grep -E "^  [a-z_]+.*\(|gpu__time_duration" $R/ncu_$b.txt | head -12
done
# The down GEMM at qwen3-30b-a3b T=2048 (fp32 atomics, K = 768: ~27% of the FP8 rate): is it the L2's
# reductions (128 KB a tile, 134 MB in all) or the short k-loop? ncu of base's down kernel (the second
# grouped_gemm launch), its L2 reduction sectors and throughputs beside the stall split. ~1 min.
NCU_KERNELS=1 NCU_ARGS="--clock-control none --launch-skip 1 --metrics lts__t_sectors_op_red.sum,lts__t_sectors_op_atom.sum,lts__throughput.avg.pct_of_peak_sustained_elapsed" \
  timeout 150 scripts/ncu_layer.sh $V/base/fusedmoe qwen3-30b-a3b 2048 $R/ncu_down2k
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|lts__t_sectors_op|lts__throughput" $R/ncu_down2k/*.txt | head -12
head -25 $R/ncu_down2k/*_stalls.txt; rm -f $R/ncu_down2k/*.ncu-rep
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
