#!/usr/bin/env bash
# Session 47 call 5 (~7.5 min, the session's last device time): the tuning run (`--configs all`: every compiled config
# of either layer GEMM forced in turn, each pair checked and timed end to end against the automatic choice) on main
# with the e2m1 two-wave down (.device_carry/s47e). Rules changed since the last full run (session 29): static
# numbering, waves, staged rows. Each step bounded; results saved after each.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s47e; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe
step() {  # name timeout args...
  local n=$1 t=$2; shift 2; local s=$SECONDS
  timeout $t $V/fusedmoe bench --op layer --stages off --configs all "$@" > $R/tune_$n.txt 2>&1
  echo "tune $n rc=$? $((SECONDS-s)) s"
  grep -E "^# tune" $R/tune_$n.txt | cut -c1-260
  tar cJf $OUT/r.txz -C $OUT r
}
step nvfp4_qwen 140 --precision nvfp4 --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 512,1024,2048,8192
step fp8_qwen 110 --precision fp8 --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 1024,2048,4096
step bf16_qwen 80 --precision bf16 --presets qwen3-30b-a3b --tokens 1024,2048,8192
step nvfp4_ds 80 --precision nvfp4 --presets deepseek-v3 --tokens 1024,2048
echo "t=$SECONDS s"
