#!/usr/bin/env bash
# Session 40 call 2 (as drafted): docs/wip/finalize_bulk_rows.diff on the GPU (~4 min). Its binaries come from the
# build_variants line of docs/wip/next_call_partial_tiles.sh (variant fin). Carry .device_carry/p.
# scripts/variants_check.sh tests and times the variants; fin0 is the same binary with
# FMOE_FINALIZE_BULK=0 (the clean A/B of the kernel). The sanitizer cases run at small T, so they
# take the bulk kernel only with FMOE_FINALIZE_BULK=2.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/p; R=$OUT/r; mkdir -p $R
export VARIANTS="base fin fin0:fin" VARIANT_ENV="fin0=FMOE_FINALIZE_BULK=0" BENCH_TIMEOUT=80 TEST_TIMEOUT=200
export TEST_FILTER='LayerGpu.FinalizeByBulkCopiesGivesTheSameBits:LayerGpu.LargeT*:LayerGpu.FastModeBf16RouteRows:LayerGpu.GraphReplaysAndDeterminism'
scripts/variants_check.sh $V $R/fast --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on |
  grep -E "^\[variants\]|finalize|^layer  |geomean"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck initcheck; do
  s=$SECONDS; n=$(FMOE_FINALIZE_BULK=2 timeout 90 scripts/sanitize_binary.sh $SAN $tool $V/fin/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
TEST_FILTER=-* scripts/variants_check.sh $V $R/det --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 \
  --stages on --mode deterministic | grep -E "^\[variants\]|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
