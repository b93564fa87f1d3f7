#!/usr/bin/env bash
# DRAFT for session 54 (not run, ~5 min): the per-buffer mbarrier GEMV (docs/wip/gemv_mbarrier_chunks.diff) against
# main. Build both (a fresh checkout has no build/: ./scripts/setup.sh, ~15 min on 2 cores):
#   D=.device_carry/s54m; mkdir -p $D/base $D/new
#   strip -o $D/base/fusedmoe build/fusedmoe; strip -o $D/base/test_layer_gpu build/tests/test_layer_gpu
#   git apply docs/wip/gemv_mbarrier_chunks.diff && ninja -C build fusedmoe test_layer_gpu
#   strip -o $D/new/fusedmoe build/fusedmoe; strip -o $D/new/test_layer_gpu build/tests/test_layer_gpu
#   git checkout src && ninja -C build; xz -T2 -3 -f $D/*/*
# Carry [".device_carry/s54m"]. Then, if it wins, the full gpu_check on the commit (session49_call5.sh).
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s54m; N=$D/new; R=$OUT/r; mkdir -p $R
for v in base new; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
s=$SECONDS; timeout 200 $N/test_layer_gpu --gtest_filter='*DecodeGemv*:*FourBit*:*Sanitizer*:*FullSizePresetsAtDecode*:*Mxfp4OddSizes*' > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED|^\[  FAILED' $R/tests.txt | tr '\n' ' ')"; grep -E "Failure|out of tolerance|FAILED" $R/tests.txt | head -6
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh "$SAN" $tool $N/test_layer_gpu "$R/$tool.log"); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60 VARIANTS="base new"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b,qwen3.5-35b-a3b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 100 scripts/ncu_layer.sh $N/fusedmoe deepseek-v3 1 $R/ncu --precision nvfp4 --routing unbiased
for f in $R/ncu/*.txt; do echo "== $f"; grep -E "decode_gemv_kernel|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Achieved Occupancy" $f | head -14; done
head -24 $R/ncu/*_stalls.txt
rm -f $R/*/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
