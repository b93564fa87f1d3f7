#!/usr/bin/env bash
# Session 46 call 3 (~4 min): (a) static numbering on / off (main's binary, FMOE_STATIC_TILES) on the fp8 presets whose
# experts straddle the new 8 MiB line: qwen3-235b-a22b (12.6 MB of gate/up an expert), gpt-oss-120b (16.6 MB),
# llama4-maverick (84 MB; top-1, so static up to T=8192); (b) the new binary (static_tile_numbering + the bf16 down's
# two waves) against main on the bf16 qwen presets at T=1024 / 2048. Carry .device_carry/s46/base, .device_carry/s46c.
set -u
export FMOE_NO_SETUP=1
B=.device_carry/s46/base; N=.device_carry/s46c; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $B/fusedmoe.xz $N/fusedmoe.xz; chmod +x $B/fusedmoe $N/fusedmoe
for v in "qwen3-235b-a22b 128,512,1024" "gpt-oss-120b 512,2048" "llama4-maverick 2048,8192"; do
  set -- $v
  for st in 1 0; do
    FMOE_STATIC_TILES=$st timeout 45 $B/fusedmoe bench --op layer --precision fp8 --stages on --presets $1 --tokens $2 \
      --json $R/st_$1_$st.json > $R/st_$1_$st.txt 2>&1 || echo "$1 static=$st rc=$?"
  done
  python3 scripts/bench_compare.py static=$R/st_$1_1.json routing=$R/st_$1_0.json 2>&1 | grep -E "^layer(\.gate_up|\.down)? "
  echo "t=$SECONDS s"
done
tar cJf $OUT/r.txz -C $OUT r
for i in 1 2; do for d in base new; do
  [ $d = base ] && X=$B || X=$N
  timeout 45 $X/fusedmoe bench --op layer --precision bf16 --stages on --presets qwen3-30b-a3b,qwen3.5-35b-a3b \
    --tokens 1024,2048 --json $R/bf_${d}_$i.json > $R/bf_${d}_$i.txt 2>&1 || echo "bf16 $d $i rc=$?"
done
python3 scripts/bench_compare.py base=$R/bf_base_$i.json new=$R/bf_new_$i.json 2>&1 | grep -E "^layer(\.down)? |geomean"
done
grep -h "^layer " $R/bf_new_1.txt | awk '{print $2, $4, $5}'
echo "t=$SECONDS s"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
