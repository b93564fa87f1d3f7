#!/usr/bin/env bash
# Session 43 call 3: rows16 from T=1 against the default rule for the bf16 and NVFP4 / MXFP4 layers (call 2 was FP8),
# wide-tile binary. Decides whether the lower rows16 threshold (sums >= 4 MiB) holds for every precision.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s43/wide; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
run() {  # name precision presets tokens
  for v in rule rows16; do
    e=FMOE_X=0; [ $v = rows16 ] && e=FMOE_ROWS16_MIN_T=1
    s=$SECONDS; env $e timeout 120 $V/fusedmoe bench --op layer --precision $2 --presets $3 --tokens $4 \
      --routing unbiased --stages off --json $R/$1_$v.json > $R/$1_$v.txt 2>&1; echo "bench $1 $v rc=$? $((SECONDS-s)) s"
  done
  python3 scripts/bench_compare.py rule=$R/$1_rule.json rows16=$R/$1_rows16.json 2>&1 | grep -E "^layer |geomean"
  tar cJf $OUT/r.txz -C $OUT r
}
run b bf16 qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 256,512,1024,2048
run n nvfp4 qwen3-30b-a3b,qwen3.5-35b-a3b,deepseek-v3 256,512,1024,2048
run x mxfp4 gpt-oss-120b 256,512,1024,2048
grep -hE "^layer " $R/*.txt | awk '{print $2,$3,$4,$5}' | sort -u | head -40
grep -hE "rel L2 err" $R/*.txt | grep -oE "^layer +[^ ]+ +[^ ]+ +[^ ]+ +[0-9]+|rel L2 err [0-9.e-]+" | paste - - | head -40
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
