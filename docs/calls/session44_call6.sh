#!/usr/bin/env bash
# Session 44 call 6: main at the rules commit (bf16 rows16 from 4 MiB; FP8 wide tiles from 2 rows where H >= 7168),
# binaries .device_carry/s44r/base (BUILD_TARGETS="fusedmoe test_layer_gpu" scripts/build_variants.sh .device_carry/s44r).
# 1. test_layer_gpu without the 600-forward test (its kernels ran in calls 1-2); 2. the rules' picks and µs
# (deepseek-v3 T=64/128/256, bf16 qwen T=512-2048); 3. the bf16 layer at prefill sizes (issue 10's BF16 target).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s44r/base; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
s=$SECONDS; timeout 200 $V/test_layer_gpu --gtest_filter='-*RepeatedForwards*' > $R/layer.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/layer.txt | tr '\n' ' ')"
s=$SECONDS; timeout 90 $V/fusedmoe bench --op layer --presets deepseek-v3 --tokens 32,64,128,256 --routing unbiased \
  --stages off > $R/ds.txt 2>&1; echo "deepseek rc=$? $((SECONDS-s)) s"; grep -E "^layer " $R/ds.txt | cut -c1-140
s=$SECONDS; timeout 120 $V/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b,qwen3.5-35b-a3b \
  --tokens 256,512,1024,2048,8192 --routing unbiased --stages off > $R/bf16.txt 2>&1; echo "bf16 rc=$? $((SECONDS-s)) s"
grep -E "^ceilings|^layer " $R/bf16.txt | cut -c1-160
s=$SECONDS; timeout 120 $V/fusedmoe bench --op layer --precision bf16 --presets deepseek-v3 \
  --tokens 2048,8192 --stages off > $R/bf16_ds.txt 2>&1; echo "bf16 deepseek rc=$? $((SECONDS-s)) s"
grep -E "^ceilings|^layer " $R/bf16_ds.txt | cut -c1-160
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
