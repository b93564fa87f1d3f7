#!/usr/bin/env bash
# Session 43 call 8 (as run, inline): where the FMOE_DEBUG_SYNC=1 run stalls. Output: the first forward's plan
# (up_bf16_bt64_s7 + down_bf16_bt64_s8) and the CPU reference printed, then nothing for 14 s: the stall is after the
# first forward and its check, in time_graph (warm-up launch or graph replays).
V=.device_carry/s43/new; xz -d -f -T0 $V/*.xz 2>/dev/null; chmod +x $V/*; export FMOE_NO_SETUP=1
FMOE_DEBUG_SYNC=1 FMOE_PRINT_CONFIG=1 timeout 14 $V/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b \
  --stages off --tokens 384 2>&1 | cut -c1-250 | tail -12
