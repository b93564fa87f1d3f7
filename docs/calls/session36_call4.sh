#!/usr/bin/env bash
# Session 36 call 4: the swiglu epilogue on one MUFU instruction per exponential / reciprocal and
# without the zero-bias additions (device code change): gpu_check (build, every test, memcheck +
# racecheck), then the layer bench A/B against the session-35 base binary (.device_carry/v/base,
# the same kernels as 7bcaebf), two rounds, each binary in its own process.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
s=$SECONDS; timeout 420 scripts/gpu_check.sh --tools "memcheck racecheck" > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; grep -E "Failed|FAILED|Failure" -A3 $R/gpu_check.txt | head -20
xz -dc .device_carry/v/base/fusedmoe.xz > /tmp/base_fusedmoe && chmod +x /tmp/base_fusedmoe
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on)
for round in 1 2; do
  for v in base new; do
    bin=build/fusedmoe; [ $v = base ] && bin=/tmp/base_fusedmoe
    s=$SECONDS; timeout 80 $bin "${A[@]}" --json $R/${v}_$round.json > $R/${v}_$round.txt 2>&1; echo "$v round $round rc=$? $((SECONDS-s)) s"
  done
done
python3 scripts/bench_compare.py base=$R/base_1.json new=$R/new_1.json base2=$R/base_2.json new2=$R/new_2.json > $R/compare.txt 2>&1
grep -E "gate_up|layer |geomean" $R/compare.txt | head -40
tar cJf $OUT/r.txz -C $OUT r
