#!/usr/bin/env bash
# Session 42 call 2 (~4 min): what the GEMM epilogues cost (docs/wip/exp_epilogue_costs.diff, a timing experiment,
# binary .device_carry/s42/x/exp/fusedmoe = main 3c96531 + the EXP_EPI knob). One process per variant, order
# 0 1 2 3 4 0: 1 = the down GEMM's fp32 reductions as plain stores, 2 = as bf16x2 reductions (half the bytes),
# 3 = no down epilogue, 4 = no gate/up epilogue (its down time then confounded: stale intermediate).
set -u
export FMOE_NO_SETUP=1
X=.device_carry/s42/x/exp; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $X/fusedmoe.xz; chmod +x $X/fusedmoe
A="--presets qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 --tokens 2048,4096,8192 --stages on"
i=0
for v in 0 1 2 3 4 0; do
  i=$((i + 1)); s=$SECONDS
  EXP_EPI=$v timeout 90 $X/fusedmoe bench --op layer $A --json $R/e${i}_v$v.json > $R/e${i}_v$v.txt 2>&1
  echo "variant $v rc=$? $((SECONDS-s)) s"
done
cd $R && python3 $OLDPWD/scripts/bench_compare.py v0=e1_v0.json v1=e2_v1.json v2=e3_v2.json v3=e4_v3.json \
  v4=e5_v4.json v0b=e6_v0.json > compare.txt 2>&1; cd $OLDPWD
grep -E "^layer(\.gate_up|\.down)? |geomean|^op" $R/compare.txt
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
