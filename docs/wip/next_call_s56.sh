#!/usr/bin/env bash
# DRAFT for session 56 (not run, ~6-7 min): is route_quant bound by fetching its code (session 55, call 3:
# per-stage clock64 times follow code size, not work)? Three variants against main, and all together:
#   rolled: docs/wip/route_block_rolled.diff  - the block ranks (stage 2) in rolled loops; expect that
#           stage 3.4k -> well under 1k cycles if the fetch is the cost, no change if it is not;
#   warm:   docs/wip/route_warm_before_wait.diff - the routing code (one __noinline__ copy) runs once
#           on no data before cudaGridDependencySynchronize, while the previous kernel still runs
#           (PDL), so the real run finds its code cached; decode-size kernels only;
#   flat:   docs/wip/route_block_flat_ranks.diff - the final ranks (stage 4, 4.5k cycles, little code)
#           count every entry of the other lists, four loads in flight, instead of stopping at the
#           first worse one (each step waited on the last load).
# Build here (compiled and ptxas-checked in session 55, never run: `warm` makes the routing functions
# __noinline__, 112-144 B stack frames, 12-28 B spills in the double E <= 128 / 384 warp kernels):
#   BUILD_TARGETS="fusedmoe test_moe_fp8_gpu" scripts/build_variants.sh .device_carry/s56v \
#     rolled=docs/wip/route_block_rolled.diff warm=docs/wip/route_warm_before_wait.diff \
#     flat=docs/wip/route_block_flat_ranks.diff \
#     all3=docs/wip/route_block_rolled.diff,docs/wip/route_warm_before_wait.diff,docs/wip/route_block_flat_ranks.diff
# (Session 55 built it from 14977c0: .device_carry/s56v/COMMIT.) Carry [".device_carry/s56v"]. For per-stage cycles on a winner: `patch -p1 --fuzz 3` the
# docs/wip/route_quant_clock64.diff on top (it applies to main as is) and grep "^\[rt\]".
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s56v; R=$OUT/r; mkdir -p $R
for v in base rolled warm flat all3; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
# The probe first: the cost of a cold pass through 2048 straight-line instructions (docs/wip/icache_probe.cu).
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o $R/probe docs/wip/icache_probe.cu && timeout 60 $R/probe; rm -f $R/probe
for v in rolled warm flat all3; do
  timeout 90 $D/$v/test_moe_fp8_gpu --gtest_filter='*BlockRouting*:*EveryRoutingFunction*:*GroupedRouting*:*TopkTies*:*SanitizerSmall*' > $R/$v.test.txt 2>&1
  echo "$v test_moe_fp8_gpu rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$v.test.txt | tr '\n' ' ')"
done
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=90 VARIANTS="base rolled warm flat all3"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,kimi-k2 --tokens 1,2,8 --routing unbiased 2>&1 | grep -E "^layer |^layer.route|geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,8 --routing unbiased 2>&1 | grep -E "^layer |^layer.route|geomean"
scripts/variants_check.sh $D $R/f --precision fp8 --mode fast --presets deepseek-v3 --tokens 1,8 --routing unbiased 2>&1 | grep -E "^layer |^layer.route|geomean"
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
