#!/usr/bin/env bash
# Session 43 call 7 (as run, inline): the bf16 BLOCK_T=64 bench once plainly (model routing, T=384) and once with
# FMOE_DEBUG_SYNC=1, sampling nvidia-smi every 2 s. The plain run finished (324.35 us a layer); the other stalled
# at 100% utilization and ~120 W (threads spinning).
V=.device_carry/s43/new; xz -d -f -T0 $V/*.xz; chmod +x $V/*; export FMOE_NO_SETUP=1
for e in FMOE_X=0 FMOE_DEBUG_SYNC=1; do
  (env $e timeout 16 $V/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b --stages off --tokens 384 > /tmp/o.txt 2>&1; echo "$e rc=$?") &
  for i in 1 2 3 4 5 6 7; do sleep 2; nvidia-smi --query-gpu=utilization.gpu,power.draw,clocks.sm,memory.used --format=csv,noheader; done
  wait; grep -vE "^#|^measuring|^device|^ceilings|^op " /tmp/o.txt | cut -c1-200 | tail -3
done
