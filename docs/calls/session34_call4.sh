#!/usr/bin/env bash
# Session 34 call 4: gpu_check (memcheck) at main, then the new counter rule on deepseek-v3
# decode sizes against the round robin, and l2_feed from the main build.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
s=$SECONDS; scripts/gpu_check.sh --tools memcheck 2>&1 | tail -15 | tee $R/gpu_check_memcheck.txt; echo "gpu_check $((SECONDS-s)) s"
B=build/fusedmoe
for D in 3 0; do s=$SECONDS; FMOE_DYNAMIC_ITEMS=$D timeout 80 $B bench --op layer --presets deepseek-v3 --tokens 1,2,4,8,16,32,64,96,128,256 --stages on --json $R/rule_d$D.json > $R/rule_d$D.txt 2>&1; echo "D=$D $? $((SECONDS-s)) s"; done
python3 scripts/bench_compare.py rule=$R/rule_d3.json round_robin=$R/rule_d0.json --ops layer,layer.gate_up | tee $R/rule_compare.txt | cut -c1-120
timeout 60 $B bench --op l2_feed --json $R/l2.json 2>&1 | tail -3
tar cJf $OUT/r.txz -C $OUT r
