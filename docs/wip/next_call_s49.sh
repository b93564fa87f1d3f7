#!/usr/bin/env bash
# DRAFT (not run), ~9 min: the first GPU run of docs/wip/e2m1_two_kblock_stages.diff (branch wip-e2m1-k2: e2m1
# stages of two 64-K blocks, four forced-only configs *_k2_*). Binaries: the branch's fusedmoe + test_layer_gpu in
# .device_carry/s49w; main at 1b997b8's code (fusedmoe, test_layer_gpu) in .device_carry/s48d. Carry both.
# Rebuild s49w: git checkout wip-e2m1-k2 (or git apply the diff), ninja -C build fusedmoe test_layer_gpu, strip -o +
# xz -T2 -3 into .device_carry/s49w. Why: ncu (session 48 call 8) put the consumers' per-k-block overhead at 38.5 of
# 116.5 instructions per 1024 weights and the producer at ~74 a stage plus its retry loop; two blocks a stage
# should cut ~15% of the instructions. Expected: the NVFP4 GEMMs at T=32-512 ~10% faster where issue-bound.
set -u
export FMOE_NO_SETUP=1
W=.device_carry/s49w; M=.device_carry/s48d; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $W/*.xz $M/*.xz; chmod +x $W/* $M/*
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; timeout 240 $W/test_layer_gpu --gtest_filter='*TwoKBlock*:*EveryCompiledLayerConfigRuns*:*SanitizerSmall*:*FourBitTileWidths*' \
  > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests.txt | tr '\n' ' ')"
grep -E "Failure|FAILED  \] Layer|differs" $R/tests.txt | head -8
# Each GEMM's two-block config forced against the automatic one-block config (same BLOCK_T), stages timed, even loads.
for v in auto up16 down16 up32 down32; do
  [ $SECONDS -lt 420 ] || { echo "bench $v skipped: $SECONDS s gone"; continue; }
  case $v in auto) f="";; up16) f=up_e2m1_bt16_c2_k2_s4;; down16) f=down_e2m1_bt16_c2_k2_s4;;
             up32) f=up_e2m1_bt32_c2_k2_s3;; down32) f=down_e2m1_bt32_c2_k2_s3;; esac
  case $v in *16|auto) tok=32,128;; *) tok=256;; esac
  [ $v = auto ] && tok=32,128,256
  FMOE_FORCE_CONFIG=$f timeout 90 $W/fusedmoe bench --op layer --precision nvfp4 --routing unbiased --mode fast \
    --presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens $tok --json $R/$v.json > $R/$v.txt 2>&1
  echo "bench $v rc=$? t=$SECONDS s"
done
for v in up16 down16 up32 down32; do
  [ -f $R/$v.json ] && python3 scripts/bench_compare.py auto=$R/auto.json $v=$R/$v.json 2>&1 | grep -E "^layer|geomean" | head -30
done
tar cJf $OUT/r.txz -C $OUT r
for tool in memcheck racecheck; do
  [ $SECONDS -lt 520 ] || { echo "$tool skipped: $SECONDS s gone"; continue; }
  n=$(timeout $((590-SECONDS)) scripts/sanitize_binary.sh $SAN $tool $W/test_layer_gpu $R/$tool.log); echo "$tool rc=$? reports=$n"
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
