#!/usr/bin/env bash
# DRAFT (not run), ~6 min: timing of the two WIP diffs (see next_call_s49.sh; run that first). NVFP4 layer under even
# loads at decode sizes, stages timed: main (.device_carry/s48d, 1b997b8's code) against the WIP binary's default
# (the same configs: any difference is the restructured code), its lean producer (FMOE_LEAN_PRODUCER=1: the down
# GEMM's instructions -~10%, ncu session 48), and each GEMM's two-block config forced (static SASS count: ~12%
# fewer instructions in the gate/up, ~7% in the down, nearly all in the producer; docs/status.md). Carry .device_carry/s49w and s48d.
set -u
export FMOE_NO_SETUP=1
W=.device_carry/s49w; M=.device_carry/s48d; R=$OUT/r; mkdir -p $R
for d in $W $M; do [ -x $d/fusedmoe ] || xz -d -f -T0 $d/fusedmoe.xz; chmod +x $d/fusedmoe; done
A="--op layer --precision nvfp4 --routing unbiased --mode fast"
P=deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b
run() {  # name binary env tokens presets
  [ $SECONDS -lt 480 ] || { echo "bench $1 skipped: $SECONDS s gone"; return; }
  env $3 timeout 90 $2/fusedmoe bench $A --presets $5 --tokens $4 --json $R/$1.json > $R/$1.txt 2>&1
  echo "bench $1 rc=$? t=$SECONDS s"
}
# (T=32 / 128: BLOCK_T=16 on all three; T=256 on qwen3-30b-a3b: 16 rows, BLOCK_T=32)
run main $M "FMOE_NO_SETUP=1" 32,128,256 $P
run auto $W "FMOE_NO_SETUP=1" 32,128,256 $P
run lean $W "FMOE_LEAN_PRODUCER=1" 32,128,256 $P
run up16 $W "FMOE_FORCE_CONFIG=up_e2m1_bt16_c2_k2_s4" 32,128 $P
run down16 $W "FMOE_FORCE_CONFIG=down_e2m1_bt16_c2_k2_s4" 32,128 $P
run up32 $W "FMOE_FORCE_CONFIG=up_e2m1_bt32_c2_k2_s3" 256 qwen3-30b-a3b
run down32 $W "FMOE_FORCE_CONFIG=down_e2m1_bt32_c2_k2_s3" 256 qwen3-30b-a3b
for v in auto lean up16 down16 up32 down32; do
  b=auto; [ $v = auto ] && b=main
  [ -f $R/$v.json ] && { echo "== $b -> $v"; python3 scripts/bench_compare.py $b=$R/$b.json $v=$R/$v.json 2>&1 | grep -E "^layer|geomean" | head -40; }
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
