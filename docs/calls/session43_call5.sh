#!/usr/bin/env bash
# Session 43 call 5: what stalls the bf16 layer bench at BLOCK_T=64 (qwen3-30b-a3b T=384 / 512 ran > 25 s after the
# first forward and its check, in the graph replays; T=256 (bt32) and T=1024 (bt128) fine; deterministic mode,
# model routing and FMOE_DYNAMIC_ITEMS=0 stall as well). One knob at a time, then ncu's kernel durations.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s43/new; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
hang() {  # name timeout env args...
  local n=$1 t=$2 e=$3; shift 3
  s=$SECONDS; env $e timeout $t $V/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b --stages off "$@" \
    > $R/h_$n.txt 2>&1; rc=$?
  echo "hang $n ($e) rc=$rc $((SECONDS-s)) s: $(grep -E '^layer ' $R/h_$n.txt | awk '{print $4, $5, $6}' | tr '\n' ' ') $(grep -iE 'error|fail' $R/h_$n.txt | head -2)"
}
hang nopdl 20 FMOE_NO_PDL=1 --tokens 512 --routing unbiased
hang tails0 20 FMOE_NARROW_TAILS=0 --tokens 512 --routing unbiased
hang sched0 20 FMOE_FUSED_SCHEDULE=0 --tokens 512 --routing unbiased
hang bulk0 20 FMOE_FINALIZE_BULK=0 --tokens 512 --routing unbiased
hang up32 20 FMOE_FORCE_CONFIG=up_bf16_bt32_s9 --tokens 512 --routing unbiased
hang dn64 20 FMOE_FORCE_CONFIG=down_bf16_bt64_s8 --tokens 256 --routing unbiased
tar cJf $OUT/r.txz -C $OUT r
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout 60 $NCU --launch-count 40 --metrics gpu__time_duration.sum,launch__grid_size \
  $V/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b --stages off --tokens 512 --routing unbiased \
  > $R/ncu.txt 2>&1; echo "ncu rc=$?"
grep -E "^  [^ ]|gpu__time_duration" $R/ncu.txt | sed -E 's/\(.*\) \(/ (/' | cut -c1-110 | head -80
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
