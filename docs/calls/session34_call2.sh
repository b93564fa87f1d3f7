#!/usr/bin/env bash
# Session 34 call 2: the clusters' A/B (one binary, FMOE_CLUSTER 1/0/1), memcheck of the sorted
# variant's first failing case.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
V=.device_carry/v; R=$OUT/r; mkdir -p $R
for n in sorted cluster; do for f in $V/$n/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
P="--presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 2048,4096,8192 --stages on"
for c in 1 0 1; do s=$SECONDS; FMOE_CLUSTER=$c timeout 100 $V/cluster/fusedmoe bench --op layer $P --json $R/cl$c.$SECONDS.json > $R/cl$c.$SECONDS.txt 2>&1; echo "cluster=$c bench $? $((SECONDS-s)) s"; done
python3 scripts/bench_compare.py $(ls $R/cl[01].*.json | sort -t. -k2 -n | awk '{split($0,a,"/"); n=a[length(a)]; sub(/\.json$/,"",n); print n"="$0}') --ops layer,layer.gate_up,layer.down | tee $R/cl_compare.txt
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; timeout 120 $SAN --tool memcheck --show-backtrace device $V/sorted/test_layer_gpu --gtest_filter=LayerGpu.LargeTSeveralTokenTilesPerExpert > $R/sorted_memcheck.txt 2>&1; echo "memcheck $? $((SECONDS-s)) s"
grep -v "^=========     Host" $R/sorted_memcheck.txt | head -40
tar cJf $OUT/r.txz -C $OUT r
