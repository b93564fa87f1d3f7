#!/usr/bin/env bash
# Session 55 call 3 (as run, 35 s): the clock64 build (docs/wip/route_quant_clock64.diff on b9280f7~ = the block routing before the FMOE_ROUTE_BLOCK rule), carry .device_carry/s55t.
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s55t; xz -d -f $D/fusedmoe.xz; chmod +x $D/fusedmoe
run() { echo "== $*"; timeout 60 "$@" 2>&1 | grep -E "^\[rt\]|^layer" | head -14; }
run $D/fusedmoe bench --op layer --precision nvfp4 --mode fast --presets deepseek-v3 --tokens 1 --routing unbiased
FMOE_ROUTE_BLOCK_MAX_T=0 run $D/fusedmoe bench --op layer --precision nvfp4 --mode fast --presets deepseek-v3 --tokens 1 --routing unbiased
run $D/fusedmoe bench --op layer --precision nvfp4 --mode fast --presets qwen3-30b-a3b --tokens 1 --routing unbiased
run $D/fusedmoe bench --op layer --precision nvfp4 --mode fast --presets deepseek-v3 --tokens 8 --routing unbiased
echo "t=$SECONDS"
