#!/usr/bin/env bash
# Session 52 call 6 (as run, ~6 min): the decode GEMVs' "many" kernels at 6 CTAs an SM (register cap 80, was 5 / 96):
# v6 both GEMVs (the up spills 8 bytes, loaded in its k-loop), v6d the down only (80 registers, no spill): deepseek-v3's
# T=1 down has 1008 CTAs, 1.53 rounds at 5 an SM, 1.27 at 6. GEMV A/B against main (.device_carry/s52g; ABBA, even
# loads), then each binary's decode-GEMV / 4-bit / SanitizerSmall cases and the four sanitizers on v6d.
set -u
export FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
SETS=gemv LIMIT=${LIMIT:-230} KEEP=1 V="main=.device_carry/s52g v6=.device_carry/s52v6 v6d=.device_carry/s52v6d" bash docs/calls/session51_call1.sh
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for n in s52v6 s52v6d; do N=.device_carry/$n; xz -d -f -T0 $N/test_layer_gpu.xz; chmod +x $N/test_layer_gpu
  s=$SECONDS; timeout 150 $N/test_layer_gpu --gtest_filter='*DecodeGemv*:*FourBit*:*SanitizerSmall*:*FullSizePresetsAtDecode*' > $R/$n.tests.txt 2>&1
  echo "$n tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$n.tests.txt | tr '\n' ' ')"; grep -E "Failure|out of tolerance" $R/$n.tests.txt | head -4
done
for tool in memcheck racecheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh "$SAN" $tool .device_carry/s52v6d/test_layer_gpu "$R/$tool.log")
  echo "v6d $tool rc=$? reports=$n $((SECONDS-s)) s"
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
