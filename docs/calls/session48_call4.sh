#!/usr/bin/env bash
# Session 48 call 4 (~5 min): the tuning run under even loads (`--routing unbiased`) around the 4-bit tile lines on
# main at ca77275 (.device_carry/s48c, as gpu_checked in call 3): where the rules were set from the model routing or
# a single point. Prints each point's automatic pair against the fastest of the others.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s48c; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $G/fusedmoe.xz; chmod +x $G/fusedmoe
for a in "nvfp4 qwen3-30b-a3b 512,640" "nvfp4 qwen3.5-35b-a3b 1024,1280" "mxfp4 gpt-oss-120b 256,512,1024,1280" \
         "nvfp4 qwen3-235b-a22b 576,640" "nvfp4 deepseek-v3 288"; do
  set -- $a; [ $SECONDS -lt 330 ] || { echo "tune $2 skipped: $SECONDS s gone"; continue; }
  timeout $((380-SECONDS)) $G/fusedmoe bench --op layer --stages off --configs all --routing unbiased --precision $1 \
    --presets $2 --tokens $3 > $R/tune_$2.txt 2>&1; echo "tune $2 rc=$? t=$SECONDS"
  grep "^# tune" $R/tune_$2.txt | sed 's/fastest of/|/; s/: the automatic choice takes/ ->/' | cut -c1-230
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
