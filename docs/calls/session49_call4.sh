#!/usr/bin/env bash
# Session 49 call 4 (as run), ~5 min: the new defaults (4-bit tiles of 16 / 32 tokens in two-block stages, a lean
# down producer; .device_carry/s49g = wip-e2m1-k2 at the rule commit) against main (.device_carry/s48d), layer
# end to end and by stage: NVFP4 even loads, fast mode, T=16-256; deterministic mode; the model routing; MXFP4
# gpt-oss-120b. First the touched GPU test cases on the new binary.
set -u
export FMOE_NO_SETUP=1
W=.device_carry/s49g; M=.device_carry/s48d; R=$OUT/r; mkdir -p $R
for d in $W $M; do for b in fusedmoe test_layer_gpu; do [ -x $d/$b ] || xz -d -f -T0 $d/$b.xz; chmod +x $d/$b; done; done
s=$SECONDS; timeout 200 $W/test_layer_gpu --gtest_filter='*TwoKBlock*:*SanitizerSmall*:*LeanProducer*:*FourBitTileWidths*' > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests.txt | tr '\n' ' ')"
grep -E "Failure|forced|out of tolerance" $R/tests.txt | head -8
run() {  # name args
  n=$1; shift
  for b in main new; do
    [ $SECONDS -lt 540 ] || { echo "bench $n skipped: $SECONDS s gone"; return; }
    d=$M; [ $b = new ] && d=$W
    timeout 100 $d/fusedmoe bench --op layer "$@" --json $R/${n}_$b.json > $R/${n}_$b.txt 2>&1; echo "bench ${n}_$b rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py main=$R/${n}_main.json new=$R/${n}_new.json 2>&1 | grep -E "^layer |^layer.gate_up|^layer.down|geomean"
  grep -m2 -oE "(up|down)_e2m1_[a-z0-9_]+\+(up|down)_e2m1_[a-z0-9_]+" $R/${n}_new.txt | sort -u | tr '\n' ' '; echo
}
run even --precision nvfp4 --routing unbiased --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 16,32,128,256
run oss --precision mxfp4 --routing unbiased --mode fast --presets gpt-oss-120b --tokens 16,64,256
run det --precision nvfp4 --routing unbiased --mode deterministic --presets deepseek-v3,qwen3-30b-a3b --tokens 32,128
run model --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-235b-a22b --tokens 64,256
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
