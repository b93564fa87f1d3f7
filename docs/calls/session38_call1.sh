#!/usr/bin/env bash
# Session 38 call 1: the tokens-as-M down epilogue without the runtime bias / range tests (nobias,
# docs/wip/tokens_m_epilogue_no_bias.diff, now that consume is forced inline), the swiglu
# intermediate in thread order stored without the staging tile (thread,
# docs/wip/swiglu_thread_order.diff) and both together, against main (base). Binaries by
# scripts/build_variants.sh .device_carry/s38 nobias=... thread=... both=...,... (carry
# .device_carry/s38). test_layer_gpu of "both" (it holds both changes), then the layer bench of
# the four binaries in turn, twice.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
V=.device_carry/s38; R=$OUT/r; mkdir -p $R
for n in base nobias thread both; do for f in $V/$n/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { local name=$1 to=$2; shift 2; local s=$SECONDS; timeout $to "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.txt | tr '\n' ' ')"
  grep -E '^\[  FAILED|Failure|seed' $R/$name.txt | head -8; return $rc; }
ok=(base nobias)
t both_test 220 $V/both/test_layer_gpu && ok+=(thread both)
echo "timed: ${ok[*]}"
TEST_FILTER=none BENCH_TIMEOUT=100 ROUNDS=2 VARIANTS="${ok[*]}" \
  scripts/variants_check.sh $V $R/p --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on 2>&1 \
  | grep -v '^\[variants\] .*tests rc=0 .* 0 s' | tail -60
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
