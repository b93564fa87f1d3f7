#!/usr/bin/env bash
# Session 48 call 6 (one line, warm machine): the H = 2048 presets at 34 / 36 rows (the qwen presets have no router
# bias, so --routing unbiased routes as the model routing does).
export FMOE_NO_SETUP=1; G=.device_carry/s48c; [ -x $G/fusedmoe ] || { xz -d -f -T0 $G/fusedmoe.xz; chmod +x $G/fusedmoe; }; for a in "qwen3-30b-a3b 544,576" "qwen3.5-35b-a3b 1088,1152"; do set -- $a; timeout 100 $G/fusedmoe bench --op layer --stages off --configs all --routing unbiased --precision nvfp4 --presets $1 --tokens $2 > /tmp/t.txt 2>&1; echo "$1 rc=$? t=$SECONDS"; grep "layer.tune" /tmp/t.txt | awk '{print $5,$6,$7}'; grep "^# tune" /tmp/t.txt | cut -c1-200; done
