#!/usr/bin/env bash
# Session 34 call 3: deepseek-v3 decode sizes, the counter (3) against the round robin (0), twice;
# ncu of the cluster variant's gate/up at deepseek-v3 T=8192 (why it loses).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
V=.device_carry/v; R=$OUT/r; mkdir -p $R
for n in base cluster; do for f in $V/$n/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
P=.device_carry/probe/tma_probe; chmod +x $P
for c in "1000 56 0 0" "1000 56 900 55" "1000 56 1100 0" "1000 56 -50 3" "1000 56 0 60" "1001 56 0 0" "8 2 0 0" "65536 56 65500 10"; do timeout 20 $P $c; done 2>&1 | tee $R/probe.txt
for D in 3 0 3 0; do s=$SECONDS; FMOE_DYNAMIC_ITEMS=$D timeout 80 $V/base/fusedmoe bench --op layer --presets deepseek-v3 --tokens 1,2,4,8,16,32,64,96,128,192,256 --stages on --json $R/d$D.$SECONDS.json > /dev/null 2>&1; echo "D=$D $? $((SECONDS-s)) s"; done
python3 scripts/bench_compare.py $(ls $R/d[03].*.json | sort -t. -k2 -n | awk '{split($0,a,"/"); n=a[length(a)]; sub(/\.json$/,"",n); print n"="$0}') --ops layer,layer.gate_up,layer.down > $R/small_compare.txt
cat $R/small_compare.txt | cut -c1-130
s=$SECONDS; FMOE_CLUSTER=1 NCU_ARGS="--clock-control none" timeout 150 scripts/ncu_layer.sh $V/cluster/fusedmoe deepseek-v3 8192 $R/ncu_cl; echo "ncu $((SECONDS-s)) s"
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Block Limit|Cluster" $R/ncu_cl/*.txt | head -30
head -30 $R/ncu_cl/*_stalls.txt
rm -f $R/ncu_cl/*.ncu-rep
tar cJf $OUT/r.txz -C $OUT r
