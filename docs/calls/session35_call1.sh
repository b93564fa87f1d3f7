#!/usr/bin/env bash
# Session 35 call 1: the three wip variants (pingpong consumers, sorted scales by token tile,
# clusters with the peer wait in thread 0) tested, then timed on the prefill presets against
# base and base with the gate/up on the round robin (the clusters' fair partner).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
V=.device_carry/v; R=$OUT/r; mkdir -p $R
for n in base sorted cluster pingpong; do for f in $V/$n/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
t() { local name=$1 to=$2; shift 2; local s=$SECONDS; timeout $to "$@" > $R/$name.txt 2>&1; local rc=$?
  echo "$name rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/$name.txt | tr '\n' ' ')"
  grep -E '^\[  FAILED|Failure|seed' $R/$name.txt | head -8; return $rc; }
ok=(base)
t pingpong_test 90 $V/pingpong/test_layer_gpu --gtest_filter='LayerGpu.Pingpong*:LayerGpu.SanitizerSmall' && ok+=(pingpong)
t cluster_test 100 $V/cluster/test_layer_gpu --gtest_filter='LayerGpu.Clusters*:LayerGpu.SanitizerSmall' && ok+=(cluster)
t sorted_test 150 $V/sorted/test_layer_gpu && ok+=(sorted)
ok+=(rr_up:base)
echo "timed: ${ok[*]}"
TEST_FILTER=none BENCH_TIMEOUT=100 VARIANTS="${ok[*]}" VARIANT_ENV="cluster=FMOE_CLUSTER=1 rr_up=FMOE_DYNAMIC_ITEMS=2" \
  scripts/variants_check.sh $V $R/p 2>&1 | grep -v '^\[variants\] .*tests rc=0 .* 0 s' | tail -60
tar cJf $OUT/r.txz -C $OUT r
