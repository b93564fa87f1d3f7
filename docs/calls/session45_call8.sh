#!/usr/bin/env bash
# Session 45 call 8 (typed inline, as run), ~15 s: which stage loses with FMOE_STATIC_TILES=0 on the qwen presets.
# Binary: call 6's (carry .device_carry/s45s).
V=.device_carry/s45s; xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe; for st in 1 0; do FMOE_NO_SETUP=1 FMOE_STATIC_TILES=$st timeout 50 $V/fusedmoe bench --op layer --stages on --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 128,512 --json /tmp/st$st.json > /tmp/st$st.txt 2>&1; echo rc=$?; done; python3 scripts/bench_compare.py static=/tmp/st1.json dynamic=/tmp/st0.json 2>&1 | grep -E "^layer|geomean"
