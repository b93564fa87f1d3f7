#!/usr/bin/env bash
# DRAFT (not run), ~6 min: docs/wip/decode_fma_pipe.diff (the decode's shifts on the FMA pipe) against main.
# Build here first (2 cores, ~8 min in all):
#   ninja -C build fusedmoe tests/test_layer_gpu tests/test_e2m1_gpu tests/test_nvfp4_grouped_gemm_gpu
#   M=.device_carry/s51m; mkdir -p $M; strip -o $M/fusedmoe build/fusedmoe; xz -T2 -3 -f $M/*
#   git apply docs/wip/decode_fma_pipe.diff; ninja -C build fusedmoe tests/test_layer_gpu tests/test_e2m1_gpu \
#     tests/test_nvfp4_grouped_gemm_gpu
#   N=.device_carry/s51w; mkdir -p $N; strip -o $N/fusedmoe build/fusedmoe
#   for b in test_layer_gpu test_e2m1_gpu test_nvfp4_grouped_gemm_gpu; do strip -o $N/$b build/tests/$b; done
#   xz -T2 -3 -f $N/*; git checkout src   # (or keep the patch on a branch)
# and carry both. (Session 50 left these two already built as .device_carry/s50s = main's kernels, fusedmoe + 4 test
# binaries, and .device_carry/s50w = the patch; use them if they survived: N=s50w M=s50s.)
set -u
export FMOE_NO_SETUP=1
N=${N:-.device_carry/s51w}; M=${M:-.device_carry/s51m}; R=$OUT/r; mkdir -p $R
for f in $N/*.xz $M/fusedmoe.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $N/* $M/fusedmoe
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
ab() {  # name order precision presets tokens [more bench args]
  local name=$1 order=$2 prec=$3 presets=$4 tokens=$5; shift 5
  for b in $order; do
    [ $SECONDS -lt 230 ] || { echo "bench $name $b skipped: $SECONDS s gone"; return; }
    d=$M; [ $b = new ] && d=$N
    timeout 90 $d/fusedmoe bench --op layer --precision $prec --mode fast --presets $presets --tokens $tokens "$@" \
      --json $R/${name}_$b.json > $R/${name}_$b.txt 2>&1; echo "bench $name $b rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py main=$R/${name}_main.json new=$R/${name}_new.json 2>&1 | grep -E "^layer |^layer.gate_up|^layer.down|geomean"
}
ab d4a "main new" nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b 1,8,32,128 --routing unbiased
ab d4b "new main" nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b 1,8,32,128 --routing unbiased
ab mx "main new" mxfp4 gpt-oss-120b 1,64,2048 --routing unbiased
ab pf "main new" nvfp4 qwen3-30b-a3b,qwen3.5-35b-a3b 2048
s=$SECONDS; timeout 200 $N/test_layer_gpu --gtest_filter='*Nvfp4*:*Mxfp4*:*FourBit*:*DecodeGemv*:*TwoKBlock*:*SanitizerSmall*:*EveryCompiledLayerConfigRuns*:*FullSizePresetsAtDecode*:*NarrowTail*' > $R/tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests.txt | tr '\n' ' ')"
grep -E "Failure|out of tolerance|did not finish" $R/tests.txt | head -6
for t in test_e2m1_gpu test_nvfp4_grouped_gemm_gpu; do
  timeout 60 $N/$t > $R/$t.txt 2>&1; echo "$t rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$t.txt | tr '\n' ' ')"
done
for tool in memcheck racecheck synccheck initcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh $SAN $tool $N/test_layer_gpu $R/$tool.log)
  echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
