#!/usr/bin/env bash
# Session 48 call 5 (one line, on the machine call 4 left warm): the tuning run under the model routing at the
# points where call 4 (even loads) disagreed with the rules or found the automatic pair off.
export FMOE_NO_SETUP=1; G=.device_carry/s48c; xz -d -f -T0 $G/fusedmoe.xz; chmod +x $G/fusedmoe; for a in "deepseek-v3 288,320" "qwen3-30b-a3b 576,640" "qwen3.5-35b-a3b 1152,1280"; do set -- $a; timeout 100 $G/fusedmoe bench --op layer --stages off --configs all --routing model --precision nvfp4 --presets $1 --tokens $2 > /tmp/t.txt 2>&1; echo "$1 rc=$? t=$SECONDS"; grep "layer.tune" /tmp/t.txt | awk '{print $4,$5,$6}'; grep "^# tune" /tmp/t.txt | cut -c1-200; done
