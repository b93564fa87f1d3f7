#!/usr/bin/env bash
# Session 49 call 6 (as run, ~2 min, warm machine): the lean down producer at BLOCK_T=32 (call 4: qwen3-235b-a22b
# T=256's down GEMM 1.010 of main under the model routing, where call 3's two-block down alone had 0.979):
# the new default against FMOE_LEAN_PRODUCER=0 on the same binary (.device_carry/s49g), 16 rows per expert.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s49g; R=$OUT/r; mkdir -p $R
[ -x $G/fusedmoe ] || xz -d -f -T0 $G/fusedmoe.xz; chmod +x $G/fusedmoe
for rt in unbiased model; do
  for v in lean0 auto; do
    e=FMOE_NO_SETUP=1; [ $v = lean0 ] && e=FMOE_LEAN_PRODUCER=0
    env $e timeout 100 $G/fusedmoe bench --op layer --precision nvfp4 --routing $rt --mode fast \
      --presets qwen3-235b-a22b,qwen3-30b-a3b --tokens 256 --json $R/${rt}_$v.json > $R/${rt}_$v.txt 2>&1
    echo "$rt $v rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py lean0=$R/${rt}_lean0.json lean=$R/${rt}_auto.json 2>&1 | grep -E "^layer |^layer.down|geomean"
done
env FMOE_LEAN_PRODUCER=0 timeout 60 $G/fusedmoe bench --op layer --precision mxfp4 --routing unbiased --presets gpt-oss-120b --tokens 512 --json $R/oss_lean0.json > $R/oss0.txt 2>&1
timeout 60 $G/fusedmoe bench --op layer --precision mxfp4 --routing unbiased --presets gpt-oss-120b --tokens 512 --json $R/oss_auto.json > $R/oss1.txt 2>&1
python3 scripts/bench_compare.py lean0=$R/oss_lean0.json lean=$R/oss_auto.json 2>&1 | grep -E "^layer |^layer.down|geomean"
grep -m1 -oE "(up|down)_e2m1_[a-z0-9_]+\+(up|down)_e2m1_[a-z0-9_]+" $R/oss1.txt
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
