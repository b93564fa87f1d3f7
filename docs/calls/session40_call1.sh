#!/usr/bin/env bash
# Session 40 call 1 (from docs/wip/next_call_partial_tiles.sh, T=512 dropped: neither wip changes it): two wips on the GPU in one call, ~8-9 minutes (estimated: tests ~40 s, sanitizers ~100 s, four A/Bs ~390 s).
#  - part: docs/wip/sorted_rows_partial_tiles.diff (the sorted rows' partial and half-height tiles by 8-row TMA boxes),
#    and where the sorted rows' threshold belongs (each binary also forced onto the 3-stage twin);
#  - rq:   docs/wip/route_quant_router_writes.diff (route_quant's routing warp also quantizes at T >= 1024).
# Before it, here (one ninja at a time; ~8 min on 2 cores):
#   scripts/build_variants.sh .device_carry/p part=docs/wip/sorted_rows_partial_tiles.diff \
#     rq=docs/wip/route_quant_router_writes.diff fin=docs/wip/finalize_bulk_rows.diff
# (fin is for docs/wip/next_call_finalize_bulk.sh, which carries the same folder.)
# Carry .device_carry/p. If a variant wins: apply it on main, then scripts/gpu_check.sh in two calls
# (session 38's calls 2 and 3: "memcheck racecheck" ~360-435 s, then at once --no-build --no-tests
# "synccheck initcheck"; the second call needs the first's warm machine: call it immediately).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/p; R=$OUT/r; mkdir -p $R
# Tests of every variant (a union filter), then base / part / rq at T = 512, 2048, 8192 twice (route_quant
# changes from T >= 1024; T = 512 runs the 4-warp kernel, unchanged code; the sorted rows from 128 routes per expert).
VARIANTS="base part rq" ROUNDS=2 BENCH_TIMEOUT=80 TEST_TIMEOUT=150 \
  TEST_FILTER='LayerGpu.FastModeBf16RouteRows:LayerGpu.SanitizerSmall:LayerGpu.TokensOnMDownGemmBiasesAndAPartialWave:LayerGpu.LargeT*:LayerGpu.Nvfp4OddSizesSharedChunksAndLargeT' \
  scripts/variants_check.sh $V $R/big --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on |
  grep -E "^\[variants\]|route_quant|down|finalize|^layer  |geomean"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh $SAN $tool $V/part/test_layer_gpu $R/$tool.txt); echo "part $tool rc=$? reports=$n $((SECONDS-s)) s"
done
# The threshold: T = 2048 / 4096 (64 / 128 routes per expert on deepseek-v3 and qwen3.5; 128 / 256 on qwen3-30b-a3b).
AB_ENV=FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_s3 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/part/fusedmoe $R/mid \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,4096 --stages on | grep -E "layer_ab|down|finalize|^layer  |geomean"
# bf16 rows (in slot order, by TMA) where the fp32 sums fit the L2 too: qwen T=2048 runs fp32 atomics today, and its
# down GEMM is at ~27% of the FP8 rate (qwen3-30b-a3b 131.6 µs for 51.5 GFLOP: K = 768, ~128 KB of reductions a tile).
# The twin is forced (qwen3.5 has 64 routes per expert there, below its threshold); layer_ab splits AB_ENV into words.
AB_ENV="FMOE_ROWS16_MIN_T=1 FMOE_FORCE_CONFIG=down_fp8_bt128_w2_tm_h128_s3" BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/part/fusedmoe $R/rows16 \
  --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048 --stages on | grep -E "layer_ab|down|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
