#!/usr/bin/env bash
# Session 39 call 3: the shipped sorted rows before the >= 128 routes-per-expert rule and its test (call 1's sorted rows; the down GEMM
# writes each route's row to route_row, which finalize loads beside route_slot (32 registers, as
# base); the staged config as the 3-stage twin of the 4-stage one, taken only for bf16 route rows). Binaries built here from the working tree
# (strip + xz into .device_carry/n/sorted3); base = main 6615fb2 (.device_carry/n/base).
# All of test_layer_gpu, racecheck / memcheck / synccheck, layer A/B fast (2 rounds), deterministic T=8192 (1 round).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/n; R=$OUT/r; mkdir -p $R
for n in base sorted3; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
s=$SECONDS; timeout 300 $V/sorted3/test_layer_gpu  > $R/test.txt 2>&1
echo "test rc=$? $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/test.txt | tr '\n' ' ')"; grep -E "Failure|FAILED" -A3 $R/test.txt | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck; do
  s=$SECONDS; n=$(timeout 100 scripts/sanitize_binary.sh $SAN $tool $V/sorted3/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
ROUNDS=2 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/sorted3/fusedmoe $R/ab \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on | grep -E "layer_ab|down|finalize|^layer  |geomean"
ROUNDS=1 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/sorted3/fusedmoe $R/det \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 8192 --stages on --mode deterministic | grep -E "layer_ab|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
