#!/usr/bin/env bash
# DRAFT (not run), ~8 min: the first GPU run of layer_wide_tiles' e2m1 branch (98b945b: 4-bit layers take BLOCK_T=128
# two-wave tiles from 8 rows per expert at H >= 7168, from 32 at H >= 4096). Binaries: main at 98b945b's code + its
# GPU test (fusedmoe, test_layer_gpu) in .device_carry/s48; main before the rule (93e48d0) in .device_carry/s47e.
# Carry both. Rebuild s48: ninja -C build fusedmoe test_layer_gpu, strip -o + xz -T2 -3 into .device_carry/s48.
# Expected: test_layer_gpu 25/25 (new: FourBitLongKTakesWideTilesFromEightRows). deepseek-v3 NVFP4 T=256 / 512 /
# 1024 ~2084 / 2340 / 2960 us against 2454 / 2801 / 3698 (session 47's tuning run), qwen3-235b T=512 ~790 vs 836;
# T=128 and 2048 unchanged. Then even loads (--routing unbiased), where the 8-row line was not measured.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s48; O=.device_carry/s47e; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $N/*.xz $O/*.xz; chmod +x $N/* $O/*
s=$SECONDS; timeout 280 $N/test_layer_gpu > $R/layer_tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/layer_tests.txt | tr '\n' ' ')"
grep -E "Failure|expected|differs" $R/layer_tests.txt | head -8
for rt in model unbiased; do
  for v in old new; do
    B=$O/fusedmoe; [ $v = new ] && B=$N/fusedmoe
    timeout 100 $B bench --op layer --precision nvfp4 --stages off --mode both --routing $rt \
      --presets deepseek-v3,qwen3-235b-a22b --tokens 128,192,256,512,1024,2048 \
      --json $R/${rt}_$v.json > $R/${rt}_$v.txt 2>&1; echo "$rt $v rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py old=$R/${rt}_old.json new=$R/${rt}_new.json 2>&1 | grep -E "^layer |geomean"
  tar cJf $OUT/r.txz -C $OUT r
done
# The tuning run's leads (docs/performance.md "Session 47"), under even loads this time, on the new binary:
# qwen3-235b NVFP4 at 16-32 rows (BLOCK_T=32 1.135x ahead of 64 at 24 rows under model routing), gpt-oss MXFP4 at
# 8 / 32 rows, the fp8 qwen3-30b T=2048 staged-rows down twin (1.042).
for a in "nvfp4 qwen3-235b-a22b 256,384,512" "mxfp4 gpt-oss-120b 256,1024" "fp8 qwen3-30b-a3b 2048"; do
  set -- $a; [ $SECONDS -lt 480 ] || { echo "tune $2 skipped: $SECONDS s gone"; continue; }
  timeout 60 $N/fusedmoe bench --op layer --stages off --configs all --routing unbiased --precision $1 --presets $2 \
    --tokens $3 > $R/tune_$1_$2.txt 2>&1; echo "tune $1 $2 rc=$?"
  grep "^# tune" $R/tune_$1_$2.txt | sed 's/fastest of/|/; s/: the automatic choice takes/ ->/' | cut -c1-230
done
echo "t=$SECONDS s"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
