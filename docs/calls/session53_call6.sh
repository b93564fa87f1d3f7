#!/usr/bin/env bash
# Session 53 call 6 (~2 min, the budget's last minutes): f2ff582's own test binary (.device_carry/s53f, built at
# b76b98f whose src is 5a5fd61's): the decode-GEMV / 4-bit / full-size decode cases, then memcheck and racecheck on
# its sanitizer cases, as far as the budget goes.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s53f; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $N/test_layer_gpu.xz; chmod +x $N/test_layer_gpu
s=$SECONDS; timeout 100 $N/test_layer_gpu --gtest_filter='*DecodeGemv*:*FourBit*:*FullSizePresetsAtDecode*' > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/tests.txt | tr '\n' ' ')"; grep -E "Failure|out of tolerance|FAILED" $R/tests.txt | head -6
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
  s=$SECONDS; n=$(timeout 40 scripts/sanitize_binary.sh "$SAN" $tool $N/test_layer_gpu "$R/$tool.log"); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
