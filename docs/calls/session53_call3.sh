#!/usr/bin/env bash
# Session 53 call 3 (~5 min): the decode GEMVs' activations by 16-byte cp.async into a 3-buffer ring, two chunks ahead,
# read by ldmatrix (.device_carry/s53b/new) against 97c4f4e (s53b/base, call 2's new). new's decode-GEMV / 4-bit /
# sanitizer / full-size cases, the four sanitizers on its sanitizer cases, an ABBA A/B on the decode sizes, then ncu of
# deepseek-v3 T=1's two GEMVs on new.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s53b; N=$D/new; R=$OUT/r; mkdir -p $R
for v in base new; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
s=$SECONDS; timeout 200 $N/test_layer_gpu --gtest_filter='*DecodeGemv*:*FourBit*:*Sanitizer*:*FullSizePresetsAtDecode*:*Mxfp4OddSizes*' > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/tests.txt | tr '\n' ' ')"; grep -E "Failure|out of tolerance|FAILED" $R/tests.txt | head -6
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh "$SAN" $tool $N/test_layer_gpu "$R/$tool.log"); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60 VARIANTS="base new"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b,qwen3.5-35b-a3b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
echo "t=$SECONDS s"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
echo "t=$SECONDS s"
NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 100 scripts/ncu_layer.sh $N/fusedmoe deepseek-v3 1 $R/ncu --precision nvfp4 --routing unbiased
for f in $R/ncu/*.txt; do echo "== $f"; grep -E "decode_gemv_kernel|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Achieved Occupancy" $f | head -14; done
rm -f $R/*/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
