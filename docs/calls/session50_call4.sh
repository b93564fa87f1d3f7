#!/usr/bin/env bash
# Session 50 call 4 (~6 min): the e2m1 decode's block scales as one (r0, r1) pair per k16 step, each multiply taking
# its row's half by an operand selector (.device_carry/s50s: 4 fewer integer-pipe instructions per 8 weights, the
# same bits) against main (s50g). The NVFP4 / MXFP4 layer A/B first (decode GEMVs at T=1 / 8, the engine at 32 / 128,
# BLOCK_T=128 at 2048; the decode sizes in two ABBA rounds, even loads), then the e2m1 GPU tests and the layer's
# 4-bit cases, and the four sanitizers on SanitizerSmall.
set -u
export FMOE_NO_SETUP=1
N=${N:-.device_carry/s50s}; M=${M:-.device_carry/s50g}; R=$OUT/r; mkdir -p $R  # (N, M: other carries, as next_call_s51.sh)
for f in $N/*.xz $M/fusedmoe.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $N/* $M/fusedmoe
ab() {  # name order precision presets tokens [more bench args]
  local name=$1 order=$2 prec=$3 presets=$4 tokens=$5; shift 5
  for b in $order; do
    [ $SECONDS -lt 230 ] || { echo "bench $name $b skipped: $SECONDS s gone"; return; }
    d=$M; [ $b = new ] && d=$N
    timeout 90 $d/fusedmoe bench --op layer --precision $prec --mode fast --presets $presets --tokens $tokens "$@" \
      --json $R/${name}_$b.json > $R/${name}_$b.txt 2>&1; echo "bench $name $b rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py main=$R/${name}_main.json new=$R/${name}_new.json 2>&1 | grep -E "^layer |^layer.gate_up|^layer.down|geomean"
}
ab d4a "main new" nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b 1,8,32,128 --routing unbiased
ab d4b "new main" nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b 1,8,32,128 --routing unbiased
ab mx "main new" mxfp4 gpt-oss-120b 1,64,2048 --routing unbiased
ab pf "main new" nvfp4 qwen3-30b-a3b,qwen3.5-35b-a3b 2048
scripts/four_bit_checks.sh $N $R  # (as run, these checks were inline; same commands)
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
