#!/usr/bin/env bash
# DRAFT for the next session (not run): why the staged bf16 route rows (docs/tried/staged_route_rows.diff)
# ran the fast-mode down GEMM 5-7% slower (session 38, call 8). Before it, here:
#   ninja -C build fusedmoe && mkdir -p .device_carry/n/base && strip -o .device_carry/n/base/fusedmoe build/fusedmoe
#   git apply docs/tried/staged_route_rows.diff && ninja -C build fusedmoe &&
#     mkdir -p .device_carry/n/staged && strip -o .device_carry/n/staged/fusedmoe build/fusedmoe &&
#     git apply -R docs/tried/staged_route_rows.diff && ninja -C build fusedmoe
#   (one ninja at a time: two at once left an object without header dependencies in session 38)
# Carry .device_carry/n. About 2-3 minutes: ncu --set full of both down kernels at qwen3-30b-a3b
# T=8192 (the second grouped_gemm launch of the bench's checked forward), then the stall regions.
set -u
export FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
for n in base staged; do
  chmod +x .device_carry/n/$n/fusedmoe
  NCU_ARGS="--clock-control none" timeout 200 scripts/ncu_layer.sh .device_carry/n/$n/fusedmoe qwen3-30b-a3b 8192 $R/$n
  grep -E "Duration|SM Frequency|Executed Instructions  " $R/$n/*.txt | tail -3
  grep -A12 "GemmEpilogue)0" $R/$n/*_stalls.txt | head -14
done
rm -f $R/*/*.ncu-rep; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
