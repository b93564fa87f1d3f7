#!/usr/bin/env bash
# Session 50 call 2 (as run), ~4 min, after next_call_s50.sh on the same carry (.device_carry/s50g, already unpacked there):
# the lean down producer where session 49 did not measure it (docs/status.md next step 2): FMOE_LEAN_PRODUCER=1
# against the default (four warps) for bf16 weights at decode and prefill sizes and for 4-bit tiles of 64 / 128
# tokens; even loads, fast mode. A rule moves only on two rounds that agree.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s50g; R=$OUT/r; mkdir -p $R
[ -x $G/fusedmoe ] || xz -d -f -T0 $G/fusedmoe.xz; chmod +x $G/fusedmoe
ab() {  # name precision presets tokens
  for v in def lean; do
    [ $SECONDS -lt 520 ] || { echo "bench $1 $v skipped: $SECONDS s gone"; return; }
    e=FMOE_NO_SETUP=1; [ $v = lean ] && e=FMOE_LEAN_PRODUCER=1
    env $e timeout 100 $G/fusedmoe bench --op layer --precision $2 --routing unbiased --mode fast --presets $3 \
      --tokens $4 --json $R/$1_$v.json > $R/$1_$v.txt 2>&1; echo "bench $1 $v rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py def=$R/$1_def.json lean=$R/$1_lean.json 2>&1 | grep -E "^layer |^layer.down|geomean"
}
ab bf16 bf16 qwen3-30b-a3b,qwen3.5-35b-a3b 32,256,2048
ab wide nvfp4 qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 1024,2048
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
