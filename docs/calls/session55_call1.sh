#!/usr/bin/env bash
# Session 55 call 1 (as run, 522 s; drafted as, ~9 min: over one call's 10-minute limit with margin only if the gpu_check stays near
# call 2's 446 s; split it into two calls if the device is slow to start). Step 0, the gpu_check of main (c98f212
# or later), then step 1's first look: ncu of route_quant at deepseek-v3 T=1 (NVFP4, 8.05 µs alone, on the decode
# critical path) and, for comparison, qwen3-30b-a3b T=1 (3.04 µs, float routing).
# Build here first (a fresh checkout has no build/: ./scripts/setup.sh, ~15 min on 2 cores), then:
#   G=.device_carry/s55g; mkdir -p $G; strip -o $G/fusedmoe build/fusedmoe
#   for t in build/tests/test_*_gpu; do strip -o $G/$(basename $t) $t; done; git rev-parse HEAD > $G/COMMIT
#   xz -T2 -3 -f $G/fusedmoe $G/test_*
# Carry [".device_carry/s55g"].
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s55g; R=$OUT/q; mkdir -p $R  # (session49_call5.sh packs its own $OUT/r into $OUT/r.txz)
G=$G bash docs/calls/session49_call5.sh  # decompresses G, runs scripts/gpu_check.sh --no-build --direct, prints [gpu_check] lines
for p in deepseek-v3 qwen3-30b-a3b; do
  NCU_REGEX=route_quant NCU_KERNELS=1 timeout 60 scripts/ncu_layer.sh $G/fusedmoe $p 1 $R/ncu --precision nvfp4 --routing unbiased
done
for f in $R/ncu/*.txt; do echo "== $f"; grep -E "route_quant_kernel|Duration|Issue Slots Busy|Executed Ipc A|Registers Per" $f | head -8; done
head -30 $R/ncu/*_stalls.txt
rm -f $R/ncu/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/q.txz -C $OUT q; rm -rf $OUT/q
