#!/usr/bin/env bash
# Session 37 call 5: the tried down-epilogue variant (docs/tried/tokens_m_epilogue_no_bias.diff,
# built here as .device_carry/s37/fusedmoe_var) against the base binary (.device_carry/s37/
# fusedmoe_wl) again, in both orders, at T=8192; then ncu (speed of light, instruction counts) of
# both binaries' gate/up and down kernels on deepseek-v3 T=8192.
set -u
export FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R; S=.device_carry/s37
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3 --tokens 8192 --stages on)
for v in var base base var; do
  s=$SECONDS; timeout 40 $S/fusedmoe_$( [ $v = base ] && echo wl || echo var ) "${A[@]}" --json $R/$v.$SECONDS.json > /dev/null 2>&1; echo "$v rc=$? $((SECONDS-s)) s"
done
ls $R/*.json | tr '\n' ' '; echo
python3 scripts/bench_compare.py $(ls $R/*.json | awk -F/ '{split($NF,a,"."); print a[1] "_" NR "=" $0}') 2>&1 | grep -E "down|gate_up|^layer |geomean" | head -20
for v in wl var; do
  timeout 50 "$NCU" --kernel-name regex:grouped_gemm_kernel --launch-count 2 --section SpeedOfLight --section InstructionStats \
    --clock-control none $S/fusedmoe_$v bench --op layer --presets deepseek-v3 --tokens 8192 --mode fast --stages off > $R/ncu_$v.txt 2>&1
  echo "ncu $v rc=$?"; grep -E "grouped_gemm_kernel|Duration|SM Frequency|Compute \(SM\)|L2 Cache Throughput|DRAM Throughput|Executed Instructions  " $R/ncu_$v.txt | sed 's/fusedmoe::detail:://g' | cut -c1-110
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
