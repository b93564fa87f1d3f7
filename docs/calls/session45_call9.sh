#!/usr/bin/env bash
# Session 45 call 9 (typed inline, as run), ~10 s: ncu of both GEMMs at qwen3.5-35b-a3b T=128, FMOE_STATIC_TILES 1 / 0.
# Binary: call 6's (carry .device_carry/s45s).
V=.device_carry/s45s; xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe; NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu); for st in 1 0; do FMOE_NO_SETUP=1 FMOE_STATIC_TILES=$st timeout 50 $NCU --kernel-name regex:grouped_gemm_kernel --launch-count 2 --clock-control none --metrics dram__bytes_read.sum,gpu__time_duration.sum,smsp__inst_executed.sum,lts__t_sector_hit_rate.pct $V/fusedmoe bench --op layer --presets qwen3.5-35b-a3b --tokens 128 --stages off 2>&1 | grep -E "grouped_gemm_kernel<|dram__|gpu__time|inst_exec|sector_hit" | cut -c1-120; done
