#!/usr/bin/env bash
# Session 49 call 8 (as run, ~5 min, the rest of the budget): the 4-bit gate/up producer's empty-barrier wait by one
# warp, the other three at named barrier 3 (branch wip-producer-gate; .device_carry/s49p) against main's s49g
# (07aaf6d). The touched GPU cases (the 600-forward hang test first), the contest grouped GEMM binary,
# memcheck / racecheck / synccheck on SanitizerSmall, then the NVFP4 layer A/B (even loads; decode and prefill).
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s49p; M=.device_carry/s49g; R=$OUT/r; mkdir -p $R
for f in $N/*.xz $M/fusedmoe.xz; do xz -d -f -T0 $f; done; chmod +x $N/* $M/fusedmoe
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; timeout 170 $N/test_layer_gpu --gtest_filter='*RepeatedForwards*:*SanitizerSmall*:*FourBitTileWidths*:*TwoKBlock*:*EveryCompiledLayerConfigRuns*' > $R/tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/tests.txt | tr '\n' ' ')"
grep -E "Failure|out of tolerance|did not finish" $R/tests.txt | head -6
timeout 40 $N/test_nvfp4_grouped_gemm_gpu > $R/grouped.txt 2>&1; echo "test_nvfp4_grouped_gemm_gpu rc=$?: $(grep -E '^\[  PASSED|^\[  FAILED' $R/grouped.txt | tr '\n' ' ')"
for tool in memcheck racecheck synccheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh $SAN $tool $N/test_layer_gpu $R/$tool.log)
  echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
tar cJf $OUT/r.txz -C $OUT r
for a in "dq deepseek-v3,qwen3.5-35b-a3b 128" "q qwen3-30b-a3b 32,128,2048"; do
  set -- $a
  for b in main new; do
    [ $SECONDS -lt 330 ] || { echo "bench $1 $b skipped: $SECONDS s gone"; continue; }
    d=$M; [ $b = new ] && d=$N
    timeout 80 $d/fusedmoe bench --op layer --precision nvfp4 --routing unbiased --mode fast --presets $2 --tokens $3 \
      --json $R/$1_$b.json > $R/$1_$b.txt 2>&1; echo "bench $1 $b rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py main=$R/$1_main.json new=$R/$1_new.json 2>&1 | grep -E "^layer |^layer.gate_up|^layer.down|geomean"
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
