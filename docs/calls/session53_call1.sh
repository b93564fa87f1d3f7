#!/usr/bin/env bash
# Session 53 call 1 (~6 min): the decode GEMVs' L2 prefetch (FMOE_GEMV_L2_AHEAD k-blocks past the register ring;
# off by default in this binary). One binary, .device_carry/s53l/base (fusedmoe + test_layer_gpu): its decode-GEMV /
# 4-bit / sanitizer cases with the prefetch at 16 and memcheck on them, an ABBA A/B of 0 / 8 / 16 / 32 on the decode
# sizes, then ncu of deepseek-v3 T=1's two GEMVs with 0 and 16.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s53l; B=$D/base; R=$OUT/r; mkdir -p $R
for f in $B/*.xz; do xz -d -f -T0 $f; done; chmod +x $B/*
s=$SECONDS; FMOE_GEMV_L2_AHEAD=16 timeout 120 $B/test_layer_gpu --gtest_filter='*DecodeGemv*:*FourBit*:*SanitizerSmall*:*FullSizePresetsAtDecode*' > $R/tests.txt 2>&1
echo "tests l16 rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/tests.txt | tr '\n' ' ')"; grep -E "Failure|out of tolerance" $R/tests.txt | head -4
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; n=$(FMOE_GEMV_L2_AHEAD=16 timeout 60 scripts/sanitize_binary.sh "$SAN" memcheck $B/test_layer_gpu "$R/memcheck.log"); echo "memcheck l16 rc=$? reports=$n $((SECONDS-s)) s"
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60 VARIANTS="base l8:base l16:base l32:base"
export VARIANT_ENV="l8=FMOE_GEMV_L2_AHEAD=8 l16=FMOE_GEMV_L2_AHEAD=16 l32=FMOE_GEMV_L2_AHEAD=32"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
echo "t=$SECONDS s"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
echo "t=$SECONDS s"
for a in 0 16; do
  FMOE_GEMV_L2_AHEAD=$a NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 100 scripts/ncu_layer.sh $B/fusedmoe deepseek-v3 1 $R/ncu$a --precision nvfp4 --routing unbiased
  for f in $R/ncu$a/*.txt; do echo "== $f"; grep -E "decode_gemv_kernel|Duration|DRAM Throughput|Issue Slots Busy|L2 Hit|Eligible Warps" $f | head -14; done
done
rm -f $R/*/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
