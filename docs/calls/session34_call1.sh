#!/usr/bin/env bash
# Session 34 call 1: sorted scales and 2-CTA clusters (tests + prefill A/B), the half-weights
# bound, the l2_feed ceiling, ncu --set full of the sorted variant at real clocks.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
V=.device_carry/v; R=$OUT/r; mkdir -p $R/p
for n in base sorted halfw cluster; do for f in $V/$n/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
# the cluster test alone first (hang risk), then each new variant's full suite
s=$SECONDS; timeout 60 $V/cluster/test_layer_gpu --gtest_filter='LayerGpu.Clusters*' > $R/cluster_only.test.txt 2>&1; rc=$?
echo "cluster test alone rc=$rc $((SECONDS-s)) s"; grep -E '^\[  (PASSED|FAILED)|Failure|seed' $R/cluster_only.test.txt | head -20
nv=(base sorted)
s=$SECONDS; timeout 150 $V/sorted/test_layer_gpu > $R/sorted.test.txt 2>&1; echo "sorted full tests rc=$? $((SECONDS-s)) s"; grep -E '^\[  (PASSED|FAILED)|Failure' $R/sorted.test.txt | head
if [ $rc = 0 ]; then
  s=$SECONDS; timeout 150 $V/cluster/test_layer_gpu > $R/cluster.test.txt 2>&1; crc=$?; echo "cluster full tests rc=$crc $((SECONDS-s)) s"; grep -E '^\[  (PASSED|FAILED)|Failure' $R/cluster.test.txt | head
fi
P="--presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,4096,8192 --stages on"
s=$SECONDS; timeout 100 $V/base/fusedmoe bench --op layer $P --json $R/p/base.json > $R/p/base.txt 2>&1; echo "base bench $? $((SECONDS-s)) s"
s=$SECONDS; timeout 100 $V/sorted/fusedmoe bench --op layer $P --json $R/p/sorted.json > $R/p/sorted.txt 2>&1; echo "sorted bench $? $((SECONDS-s)) s"
if [ $rc = 0 ] && [ ${crc:-1} = 0 ]; then
  s=$SECONDS; FMOE_CLUSTER=1 timeout 100 $V/cluster/fusedmoe bench --op layer $P --json $R/p/cl.json > $R/p/cl.txt 2>&1; echo "cluster bench $? $((SECONDS-s)) s"
fi
s=$SECONDS; timeout 100 $V/halfw/fusedmoe bench --op layer $P --json $R/p/halfw.json > $R/p/halfw.txt 2>&1; echo "halfw bench $? $((SECONDS-s)) s"
s=$SECONDS; timeout 60 $V/sorted/fusedmoe bench --op l2_feed --json $R/l2.json > $R/l2.txt 2>&1; echo "l2_feed $? $((SECONDS-s)) s"; cat $R/l2.txt | tail -30
cols=(base=$R/p/base.json sorted=$R/p/sorted.json halfw=$R/p/halfw.json)
[ -f $R/p/cl.json ] && cols+=(cluster=$R/p/cl.json)
python3 scripts/bench_compare.py "${cols[@]}" | tee $R/compare.txt
# deepseek-v3 small T: the counter (3) against the round robin (0), twice for the drift
for D in 3 0 3 0; do s=$SECONDS; FMOE_DYNAMIC_ITEMS=$D timeout 60 $V/base/fusedmoe bench --op layer --presets deepseek-v3 --tokens 8,16,32,64 --stages on --json $R/d$D.$SECONDS.json > /dev/null 2>&1; echo "small T D=$D $? $((SECONDS-s)) s"; done
python3 scripts/bench_compare.py $(ls $R/d[03].*.json | sort -t. -k2 -n | awk '{split($0,a,"/"); n=a[length(a)]; sub(/\.json$/,"",n); print n"="$0}') | tee $R/small_compare.txt
tar cJf $OUT/r1.txz -C $OUT r
s=$SECONDS; NCU_ARGS="--clock-control none" timeout 120 scripts/ncu_layer.sh $V/sorted/fusedmoe deepseek-v3 8192 $R/ncu; echo "ncu full $((SECONDS-s)) s"
head -40 $R/ncu/*_stalls.txt
rm -f $R/ncu/*.ncu-rep.tmp
tar cJf $OUT/r.txz -C $OUT r
ls -la $OUT
