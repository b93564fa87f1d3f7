#!/usr/bin/env bash
# DRAFT for session 38's first device call (not run). Before it, here:
#   ninja -C build fusedmoe && strip -o .device_carry/s38/fusedmoe_main build/fusedmoe
#   git apply docs/wip/tokens_m_epilogue_no_bias.diff && ninja -C build fusedmoe &&
#     strip -o .device_carry/s38/fusedmoe_var build/fusedmoe && git checkout src/gemm/sm90_gemm_epilogue.cuh
#   (check: nvcc -ptx of src/gemm/sm90_grouped_gemm_fp8.cu has no `call`; docs/performance.md "Session 37")
# Carry: .device_carry/s38. About 3-4 minutes. If the variant wins, ship it, then run
# scripts/gpu_check.sh on the tree that has it: all four tools in two calls, the second on the
# still-warm machine as `scripts/gpu_check.sh --no-build --no-tests --tools "synccheck initcheck"`.
set -u
export FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R; S=.device_carry/s38
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on)
n=0
for v in var main main var; do
  n=$((n+1)); s=$SECONDS; timeout 70 $S/fusedmoe_$v "${A[@]}" --json $R/${v}_$n.json > $R/${v}_$n.txt 2>&1
  echo "$v ($n) rc=$? $((SECONDS-s)) s"
done
python3 scripts/bench_compare.py main=$R/main_2.json var=$R/var_1.json main2=$R/main_3.json var2=$R/var_4.json > $R/compare.txt 2>&1
grep -E "down|^layer |geomean" $R/compare.txt | head -30
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
