#!/usr/bin/env bash
# Session 39 call 6 (call 5 found a fresh machine: call 4's build was gone, and 269 s of device
# time could not rebuild): with binaries of d292b68 built here (stripped, .device_carry/h/head),
# synccheck + initcheck of test_layer_gpu's sanitizer cases, then the layer at T=2048 / 4096 on
# deepseek-v3 and qwen3.5-35b-a3b, main 6615fb2 (.device_carry/h/fusedmoe.xz) against it.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/h; R=$OUT/r; mkdir -p $R
for f in $V/*.xz $V/head/*.xz; do xz -d -f -T0 $f; done; chmod +x $V/fusedmoe $V/head/*
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in synccheck initcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh $SAN $tool $V/head/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
ROUNDS=1 BENCH_TIMEOUT=60 scripts/layer_ab.sh $V/fusedmoe $V/head/fusedmoe $R/ab \
  --presets deepseek-v3,qwen3.5-35b-a3b --tokens 2048,4096 --stages on | grep -E "layer_ab|down|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
