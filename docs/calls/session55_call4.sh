#!/usr/bin/env bash
# Session 55 call 4 (~9.5 min): the gpu_check of b9280f7 (block routing for grouped sigmoid routing),
# then, in what time is left, one pass of the layer at the presets the rule changed (deepseek-v3 block,
# kimi-k2 back on the warp path) against main a012853 (base/). Carry .device_carry/s55h (G layout of
# session49_call5.sh plus base/fusedmoe.xz).
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s55h bash docs/calls/session49_call5.sh
xz -d -f .device_carry/s55h/base/fusedmoe.xz; chmod +x .device_carry/s55h/base/fusedmoe
for v in base new; do
  b=.device_carry/s55h/fusedmoe; [ $v = base ] && b=.device_carry/s55h/base/fusedmoe
  left=$((585 - SECONDS)); [ $left -gt 10 ] || break
  echo "== $v"; timeout $left $b bench --op layer --precision nvfp4 --mode fast --presets deepseek-v3,kimi-k2 --tokens 1,2 --routing unbiased 2>&1 | grep -E "^layer |^layer.route"
done
echo "t=$SECONDS s"
