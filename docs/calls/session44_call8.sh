#!/usr/bin/env bash
# Session 44 call 8: main at the oracle-3 bound commit (.device_carry/s44t/base: fusedmoe, test_layer_gpu,
# test_ep_layer_gpu, test_checkpoint_gpu; BUILD_TARGETS=... scripts/build_variants.sh .device_carry/s44t).
# The GPU tests that include layer_test_util.hpp (test_layer_gpu without the 600-forward test, EveryPresetShrunk 3 more
# seeds), then the FP8 prefill rows of issue 10 at this tree (stages on).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s44t/base; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
s=$SECONDS; timeout 200 $V/test_layer_gpu --gtest_filter='-*RepeatedForwards*' > $R/layer.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|relative L2' $R/layer.txt | cut -c1-300 | tr '\n' ' ')"
for i in 1 2 3; do timeout 60 $V/test_layer_gpu --gtest_filter='*EveryPresetShrunk' > $R/shrunk$i.txt 2>&1
  echo "shrunk $i rc=$?: $(grep -E 'run seed|^\[  PASSED|^\[  FAILED|relative L2' $R/shrunk$i.txt | cut -c1-300 | tr '\n' ' ')"; done
for b in test_ep_layer_gpu test_checkpoint_gpu; do timeout 60 $V/$b > $R/$b.txt 2>&1
  echo "$b rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED|^\[  SKIPPED' $R/$b.txt | tr '\n' ' ')"; done
s=$SECONDS; timeout 120 $V/fusedmoe bench --op layer --presets qwen3-30b-a3b,deepseek-v3 --tokens 2048,8192 \
  --stages on > $R/fp8.txt 2>&1; echo "fp8 prefill rc=$? $((SECONDS-s)) s"
grep -E "^ceilings|^layer" $R/fp8.txt | cut -c1-170
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
