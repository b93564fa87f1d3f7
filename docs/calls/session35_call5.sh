#!/usr/bin/env bash
# Session 35 call 5 (the last ~250 s of device time): the cluster form with the consumers'
# release on both CTAs' barriers: its tests with a timeout (a wrong barrier count hangs), then
# deepseek-v3 and qwen3-30b-a3b at T=8192 against base and base on the round robin.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
V=.device_carry/v; R=$OUT/r; mkdir -p $R
for n in base cluster; do for f in $V/$n/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
s=$SECONDS; timeout 90 $V/cluster/test_layer_gpu --gtest_filter='LayerGpu.Clusters*:LayerGpu.SanitizerSmall' > $R/cl_test.txt 2>&1; rc=$?
echo "cluster tests rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/cl_test.txt | tr '\n' ' ')"; grep -E 'Failure|seed' $R/cl_test.txt | head -5
if [ $rc = 0 ]; then
  P="--presets deepseek-v3,qwen3-30b-a3b --tokens 8192 --stages on"
  for v in "base:" "cluster:FMOE_CLUSTER=1" "rr_up:FMOE_DYNAMIC_ITEMS=2"; do
    n=${v%%:*}; e=${v#*:}; b=$V/base/fusedmoe; [ $n = cluster ] && b=$V/cluster/fusedmoe
    s=$SECONDS; env $e timeout 45 $b bench --op layer $P --json $R/$n.json > $R/$n.txt 2>&1; echo "$n bench rc=$? $((SECONDS-s)) s"
  done
  python3 scripts/bench_compare.py base=$R/base.json cluster=$R/cluster.json rr_up=$R/rr_up.json --ops layer,layer.gate_up
fi
tar cJf $OUT/r.txz -C $OUT r
