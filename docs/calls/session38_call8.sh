#!/usr/bin/env bash
# Session 38 call 8 (the session's last ~260 s of device time): the staged bf16 route rows of the
# fast-mode down GEMM (docs/tried/staged_route_rows.diff on main 42bfdfa, whose kernels are 10a21ff's; .device_carry/s38/staged,
# built here) against 10a21ff (.device_carry/s38/thread). In order of value, each bounded: the
# layer bench at T=8192 (fast, where the rows are bf16), in turn, twice; test_layer_gpu's cases
# that run the staged path; racecheck + memcheck of SanitizerSmall. Carry .device_carry/s38/thread
# and .device_carry/s38/staged.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s38; R=$OUT/r; mkdir -p $R
for n in thread staged; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 8192 --stages on)
i=0
for n in thread staged staged thread; do
  i=$((i+1)); s=$SECONDS; timeout 40 $V/$n/fusedmoe "${A[@]}" --json $R/${n}_$i.json > $R/${n}_$i.txt 2>&1
  echo "$n ($i) rc=$? $((SECONDS-s)) s"; grep -iE "error|not finite" $R/${n}_$i.txt | head -3
done
python3 scripts/bench_compare.py thread=$R/thread_1.json staged=$R/staged_2.json staged2=$R/staged_3.json thread2=$R/thread_4.json > $R/compare.txt 2>&1
grep -E "down|^layer  |geomean" $R/compare.txt | head -20
s=$SECONDS; timeout 70 $V/staged/test_layer_gpu --gtest_filter='LayerGpu.FastModeBf16RouteRows:LayerGpu.SanitizerSmall:LayerGpu.TokensOnMDownGemmBiasesAndAPartialWave' > $R/test.txt 2>&1
echo "test rc=$? $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/test.txt | tr '\n' ' ')"; grep -E "Failure|FAILED" -A3 $R/test.txt | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh $SAN $tool $V/staged/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
