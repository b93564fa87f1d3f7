#!/usr/bin/env bash
# Session 47 call 7 (as run, one command line, 33 s on the warm machine): where the 4-bit wide tiles start (deepseek-v3
# 5-7 rows per expert; qwen3-235b-a22b 24 and 48).
export FMOE_NO_SETUP=1; V=.device_carry/s47e; xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe; mkdir -p $OUT/r; for a in "nvfp4 deepseek-v3 160,192,224" "nvfp4 qwen3-235b-a22b 384,768"; do set -- $a; s=$SECONDS; timeout 70 $V/fusedmoe bench --op layer --stages off --configs all --precision $1 --presets $2 --tokens $3 > $OUT/r/tune7_$1_$2.txt 2>&1; echo "$1 $2 rc=$? $((SECONDS-s)) s"; grep "^# tune" $OUT/r/tune7_$1_$2.txt | sed 's/fastest of/|/; s/: the automatic choice takes/ ->/' | cut -c1-230; done
