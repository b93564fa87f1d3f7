#!/usr/bin/env bash
# Session 45 call 3 (as run), ~8-9 min, knobs and ncu only, on main's own build (carry .device_carry/s45/base: BUILD_TARGETS=
# "fusedmoe" scripts/build_variants.sh .device_carry/s45). Where the mid-T prefill layers lose against their byte
# floors (session 44 call 8, model routing): deepseek-v3 T=2048 3337.5 µs = 1.78x (gate/up 2119, down 1194),
# qwen3-30b-a3b T=2048 325.5 µs = 2.37x (gate/up 174, down 108). 1. The tuning run at those sizes (does any
# compiled config pair beat the rule under skewed routing?). 2. ncu of both GEMMs at the card's clocks: DRAM bytes
# against the weight bytes of the experts hit, tensor-pipe and DRAM throughput, where the warps wait.
# 3. The bf16 layer's tuning run where it is furthest from 70% of BF16 (qwen3.5-35b-a3b T=8192, 45%).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s45/base; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
s=$SECONDS; timeout 200 $V/fusedmoe bench --op layer --presets deepseek-v3,qwen3-30b-a3b --tokens 2048 --configs all \
  > $R/tune_fp8.txt 2>&1; echo "tune fp8 rc=$? $((SECONDS-s)) s"
grep -E "^# tune|^layer\.tune" $R/tune_fp8.txt | cut -c1-220 | head -60
tar cJf $OUT/r.txz -C $OUT r
M="dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum"
for p in "deepseek-v3 2048" "qwen3-30b-a3b 2048"; do
  [ $SECONDS -lt 420 ] || { echo "ncu $p skipped: $SECONDS s gone"; continue; }
  s=$SECONDS; NCU_ARGS="--clock-control none --metrics $M" timeout 150 scripts/ncu_layer.sh $V/fusedmoe $p $R/ncu
  echo "ncu $p rc=$? $((SECONDS-s)) s"
  n=$R/ncu/ncu_${p% *}_T${p#* }.txt
  grep -E "grouped_gemm_kernel|dram__bytes|sector_hit|tensor_op|gpu__time_duration|Duration|DRAM Throughput|Compute \(SM\)" $n | head -24
  head -30 $R/ncu/ncu_${p% *}_T${p#* }_stalls.txt
  rm -f $R/ncu/*.ncu-rep $R/ncu/*_sass.csv; tar cJf $OUT/r.txz -C $OUT r
done
if [ $SECONDS -lt 470 ]; then
  s=$SECONDS; timeout 100 $V/fusedmoe bench --op layer --precision bf16 --presets qwen3.5-35b-a3b --tokens 8192 \
    --configs all > $R/tune_bf16.txt 2>&1; echo "tune bf16 rc=$? $((SECONDS-s)) s"
  grep -E "^# tune|^layer\.tune" $R/tune_bf16.txt | cut -c1-220 | head -30
fi
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
