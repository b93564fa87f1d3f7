#!/usr/bin/env bash
# Session 47 call 4 (as run), 162 s, main's fusedmoe (.device_carry/s47; carry it). Two profiles:
# (1) qwen3-30b-a3b T=1024 with static numbering (the rule) and numbered from the routing (FMOE_STATIC_TILES=0): session
#     46 measured the layer 1.047x slower numbered from the routing (gate/up 116.7 -> 121.4 us) even with the expert
#     search done by a warp (docs/tried/walk_warp_search.diff), so the search is not the whole cost. Compare the two
#     GEMMs' duration, instructions, SM active cycles, DRAM bytes and the stall tables (_stalls.txt).
# (2) qwen3-30b-a3b T=8192 (issue 10's compute-bound size): where the GEMMs' warps wait today (session 37's region
#     table predates the staged-rows down GEMM and the thread-order swiglu epilogue).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s47; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe
for st in 1 0; do
  FMOE_STATIC_TILES=$st timeout 150 scripts/ncu_layer.sh $V/fusedmoe qwen3-30b-a3b 1024 $R/st$st
  grep -E "grouped_gemm_kernel<|Duration|Executed Instructions  |SM Active Cycles|DRAM Throughput|Memory Throughput" \
    $R/st$st/*.txt | head -24
done
timeout 200 scripts/ncu_layer.sh $V/fusedmoe qwen3-30b-a3b 8192 $R/t8192
head -60 $R/t8192/*_stalls.txt
rm -f $R/*/*.ncu-rep  # the text pages and the csv come back; the reports are large
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
