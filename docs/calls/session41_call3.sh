#!/usr/bin/env bash
# Session 41 call 3 (~7-8 min). Carry .device_carry/s41/n (branch s41: main + the schedule's wide grid
# (FMOE_SCHEDULE_ROUTES) + finalize_shared_arithmetic + cluster_multicast with a relaxed remote release) and
# .device_carry/q/base (main's device code).
# 1. Tests of the changed stages; racecheck + memcheck of their sanitizer cases.
# 2. Layer A/B: base; new (wide schedule, no clusters); sched8 (new, FMOE_SCHEDULE_ROUTES=8: the old grid);
#    cl (new, FMOE_CLUSTER=1). Then decode/mid T, base against new.
# 3. The schedule kernel's own duration under ncu, new (rule) against sched8.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s41/n; Q=.device_carry/q/base; R=$OUT/r; mkdir -p $R
for f in $N/*.xz $Q/*.xz; do xz -d -f -T0 $f; done; chmod +x $N/* $Q/*
s=$SECONDS; timeout 120 $N/test_moe_fp8_stages_gpu > $R/stages.txt 2>&1; echo "stages tests rc=$? $((SECONDS-s)) s"
grep -E "^\[  (PASSED|FAILED) |Failure|seed" $R/stages.txt | head -5
s=$SECONDS; timeout 200 $N/test_layer_gpu --gtest_filter='LayerGpu.LargeT*:LayerGpu.GraphReplays*:LayerGpu.EveryCompiledLayerConfigRuns:LayerGpu.Clusters*:LayerGpu.SanitizerSmall:LayerGpu.GivenRouting*:LayerGpu.EveryPresetShrunk:LayerGpu.FinalizeByBulk*:LayerGpu.FastModeBf16RouteRows' > $R/layer.txt 2>&1
echo "layer tests rc=$? $((SECONDS-s)) s"; grep -E "^\[  (PASSED|FAILED) |Failure" $R/layer.txt | head -8
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for b in test_moe_fp8_stages_gpu test_layer_gpu; do for tool in racecheck memcheck; do
  s=$SECONDS; n=$(timeout 90 scripts/sanitize_binary.sh $SAN $tool $N/$b $R/${b}_$tool.txt); echo "$b $tool rc=$? reports=$n $((SECONDS-s)) s"
done; done
A="--presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on"
bench() {  # label binary env...
  local l=$1 b=$2; shift 2
  s=$SECONDS; env "$@" timeout 70 $b bench --op layer $A --json $R/ab_$l.json > $R/ab_$l.txt 2>&1; echo "bench $l rc=$? $((SECONDS-s)) s"
}
bench base $Q/fusedmoe FMOE_X=0
bench new $N/fusedmoe FMOE_X=0
bench sched8 $N/fusedmoe FMOE_SCHEDULE_ROUTES=8
bench cl $N/fusedmoe FMOE_CLUSTER=1
python3 scripts/bench_compare.py base=$R/ab_base.json new=$R/ab_new.json sched8=$R/ab_sched8.json cl=$R/ab_cl.json > $R/compare.txt 2>&1
grep -E "schedule|gate_up|^layer  |geomean" $R/compare.txt
for l in base new; do b=$Q/fusedmoe; [ $l = new ] && b=$N/fusedmoe
  timeout 60 $b bench --op layer --presets qwen3-30b-a3b,deepseek-v3 --tokens 1,64,256,512,1024 --json $R/small_$l.json > $R/small_$l.txt 2>&1; echo "small $l rc=$?"
done
python3 scripts/bench_compare.py base=$R/small_base.json new=$R/small_new.json 2>&1 | grep -E "^layer  |geomean"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for l in new sched8; do
  e=FMOE_X=0; [ $l = sched8 ] && e=FMOE_SCHEDULE_ROUTES=8
  for p in "qwen3-30b-a3b 2048" "qwen3-30b-a3b 8192" "deepseek-v3 8192"; do set -- $p
    env $e timeout 60 $NCU --kernel-name regex:schedule_kernel --launch-count 1 --metrics gpu__time_duration.sum,launch__grid_size \
      $N/fusedmoe bench --op layer --presets $1 --tokens $2 --stages off > $R/ncu_${l}_$1_$2.txt 2>&1
    echo "ncu $l $1 T=$2: $(grep -E 'gpu__time_duration|launch__grid_size' $R/ncu_${l}_$1_$2.txt | awk '{print $1, $NF}' | tr '\n' ' ')"
  done
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
