#!/usr/bin/env bash
# Session 40 call 6 (the last ~260 s of device time): the gate/up rows by one TMA box each
# (up_fp8_bt128_w2_tm_rb_s4, FMOE_ROW_BOXES=1), built here at c011d4c + the change, carried
# stripped (.device_carry/rb/base). Its tests (bitwise against the cp.async gather, every forced
# config, the sanitizer cases), racecheck + memcheck of those, then one A/B in one binary.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/rb; R=$OUT/r; mkdir -p $R
for f in $V/base/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/base/*
timeout 60 $V/base/test_layer_gpu --gtest_filter='LayerGpu.GateUpRowBoxesGiveTheSameBits:LayerGpu.EveryCompiledLayerConfigRuns:LayerGpu.SanitizerSmall' > $R/test.txt 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |Failure|differs" $R/test.txt | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck; do
  s=$SECONDS; n=$(timeout 45 scripts/sanitize_binary.sh $SAN $tool $V/base/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
VARIANTS="base rb:base" VARIANT_ENV="rb=FMOE_ROW_BOXES=1" TEST_FILTER=-* BENCH_TIMEOUT=40 \
  scripts/variants_check.sh $V $R/ab --presets qwen3-30b-a3b,deepseek-v3 --tokens 8192 --stages on |
  grep -E "^\[variants\]|gate_up|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
