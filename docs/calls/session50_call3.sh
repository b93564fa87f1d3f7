#!/usr/bin/env bash
# Session 50 call 3 (~7 min): the gathered activations' proxy fence moved from the consumers (after every full-barrier
# wait) to the producer (each thread: its copies of the previous stage landed, fence, arrive), every gathered-rows
# config (.device_carry/s50f) against main (s50g). The layer A/B first (NVFP4 decode in two rounds, ABBA; FP8 decode
# and prefill; BF16; MXFP4), then the touched GPU cases and memcheck / racecheck / synccheck on SanitizerSmall.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s50f; M=.device_carry/s50g; R=$OUT/r; mkdir -p $R
for f in $N/*.xz $M/fusedmoe.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $N/* $M/fusedmoe
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
ab() {  # name order precision presets tokens [routing]
  local name=$1 order=$2 prec=$3 presets=$4 tokens=$5; shift 5
  for b in $order; do
    [ $SECONDS -lt 370 ] || { echo "bench $name $b skipped: $SECONDS s gone"; return; }
    d=$M; [ $b = new ] && d=$N
    timeout 90 $d/fusedmoe bench --op layer --precision $prec --mode fast --presets $presets --tokens $tokens "$@" \
      --json $R/${name}_$b.json > $R/${name}_$b.txt 2>&1; echo "bench $name $b rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py main=$R/${name}_main.json new=$R/${name}_new.json 2>&1 | grep -E "^layer |^layer.gate_up|geomean"
}
ab d4a "main new" nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b 32,128 --routing unbiased
ab d4b "new main" nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b 32,128 --routing unbiased
ab f8 "main new" fp8 qwen3-30b-a3b,deepseek-v3 128,2048,8192
ab bf "main new" bf16 qwen3-30b-a3b 128,2048
ab mx "main new" mxfp4 gpt-oss-120b 64,2048
s=$SECONDS; timeout 210 $N/test_layer_gpu --gtest_filter='*SanitizerSmall*:*FourBitTileWidths*:*EveryCompiledLayerConfigRuns*:*LargeT*:*NarrowTail*:*OddSizes*:*GraphReplays*' > $R/tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests.txt | tr '\n' ' ')"
grep -E "Failure|out of tolerance|did not finish" $R/tests.txt | head -6
for t in test_nvfp4_grouped_gemm_gpu test_moe_fp8_gpu; do
  timeout 60 $N/$t > $R/$t.txt 2>&1; echo "$t rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $R/$t.txt | tr '\n' ' ')"
done
for tool in memcheck racecheck synccheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh $SAN $tool $N/test_layer_gpu $R/$tool.log)
  echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
