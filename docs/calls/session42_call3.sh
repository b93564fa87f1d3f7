#!/usr/bin/env bash
# Session 42 call 3 (~6 min): the pipelined combine epilogue (one-wave tokens-as-M fp8 down tiles send a tile's fp32
# reductions during the next tile's first k-blocks; FMOE_PIPE_EPILOGUE). Binaries built here: .device_carry/s42/p
# (main 3c96531 + the change, uncommitted) and .device_carry/s42/g (main 3c96531, the base). Its tests, racecheck /
# memcheck of test_layer_gpu's SanitizerSmall, then the layer: base (rule) / new (rule: the two-wave config, no pipe)
# / new with the one-wave config forced, pipe 0 / pipe 1.
set -u
export FMOE_NO_SETUP=1
P=.device_carry/s42/p; G=.device_carry/s42/g; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $P/fusedmoe.xz $P/test_layer_gpu.xz $G/fusedmoe.xz; chmod +x $P/* $G/fusedmoe
s=$SECONDS; timeout 200 $P/test_layer_gpu --gtest_filter='LayerGpu.PipelinedCombineEpilogue:LayerGpu.TokensOnMDownGemm*:LayerGpu.SanitizerSmall:LayerGpu.EveryCompiledLayerConfigRuns' > $R/tests.txt 2>&1
echo "tests rc=$? $((SECONDS-s)) s"; grep -E "^\[  (PASSED|FAILED|  OK) |Failure" $R/tests.txt | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck; do
  s=$SECONDS; n=$(timeout 150 scripts/sanitize_binary.sh $SAN $tool $P/test_layer_gpu $R/san_$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
tar cJf $OUT/r.txz -C $OUT r
A="--presets qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 --tokens 1024,2048,4096 --stages on"
F=FMOE_FORCE_CONFIG=down_fp8_bt128_tm_h128_s6
i=0
for v in "base" "new" "w1pipe0" "w1pipe1" "base"; do
  i=$((i + 1)); s=$SECONDS
  case $v in
    base) timeout 80 $G/fusedmoe bench --op layer $A --json $R/b${i}_$v.json > $R/b${i}_$v.txt 2>&1 ;;
    new) timeout 80 $P/fusedmoe bench --op layer $A --json $R/b${i}_$v.json > $R/b${i}_$v.txt 2>&1 ;;
    w1pipe0) env $F FMOE_PIPE_EPILOGUE=0 timeout 80 $P/fusedmoe bench --op layer $A --json $R/b${i}_$v.json > $R/b${i}_$v.txt 2>&1 ;;
    w1pipe1) env $F FMOE_PIPE_EPILOGUE=1 timeout 80 $P/fusedmoe bench --op layer $A --json $R/b${i}_$v.json > $R/b${i}_$v.txt 2>&1 ;;
  esac
  echo "bench $v rc=$? $((SECONDS-s)) s"
done
cd $R && python3 $OLDPWD/scripts/bench_compare.py base=b1_base.json new=b2_new.json w1p0=b3_w1pipe0.json \
  w1p1=b4_w1pipe1.json base2=b5_base.json > compare.txt 2>&1; cd $OLDPWD
grep -E "^layer(\.down)? |geomean|^op" $R/compare.txt
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
