#!/usr/bin/env bash
# Session 43 call 2: fast mode's bf16 route rows (rows16) from T=1 against the default rule (sums > 50 MB), on the
# wide-tile binary (.device_carry/s43/wide, main + docs/wip/fp8_layer_wide_tiles.diff). Call 1 had rows16 at
# 0.954-0.982 of the layer at T=1024-4096 on the qwen presets; this finds where it loses.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s43/wide; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
run() {  # name presets tokens
  for v in rule rows16; do
    e=FMOE_X=0; [ $v = rows16 ] && e=FMOE_ROWS16_MIN_T=1
    s=$SECONDS; env $e timeout 120 $V/fusedmoe bench --op layer --presets $2 --tokens $3 --routing unbiased \
      --stages off --json $R/$1_$v.json > $R/$1_$v.txt 2>&1; echo "bench $1 $v rc=$? $((SECONDS-s)) s"
  done
  python3 scripts/bench_compare.py rule=$R/$1_rule.json rows16=$R/$1_rows16.json 2>&1 | grep -E "^layer |geomean"
  tar cJf $OUT/r.txz -C $OUT r
}
run q qwen3-30b-a3b,qwen3.5-35b-a3b 8,32,128,256,512,768
run g gpt-oss-120b 128,512,1024,2048,4096
run d deepseek-v3 128,512,1024,1536
run m mixtral-8x7b,qwen3-235b-a22b 128,512,1024,2048,3072
grep -hE "rel L2 err" $R/*.txt | awk '{print $1,$2,$4,$5,$6,$(NF-5),$(NF-4),$(NF-3),$(NF-2)}' | head -60
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
