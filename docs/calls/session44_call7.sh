#!/usr/bin/env bash
# Session 44 call 7: call 6's EveryPresetShrunk failure (FP8 end-to-end rel L2 0.0206 > 0.02, seed 18056237742469677340,
# qwen3-30b / qwen3-235b shrunk to H=256 I=128 E=32, T=128, h_block 128): that seed again with a test binary that names
# the worst tokens (.device_carry/s44d/test_layer_gpu, main + the diagnostic), then four fresh seeds.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s44d; xz -d -f -T0 $V/*.xz; chmod +x $V/*
FMOE_SEED=18056237742469677340 timeout 60 $V/test_layer_gpu --gtest_filter='*EveryPresetShrunk' 2>&1 | grep -E "seed|Failure|relative|PASSED|FAILED" | cut -c1-600
for i in 1 2 3 4; do timeout 60 $V/test_layer_gpu --gtest_filter='*EveryPresetShrunk' 2>&1 | grep -E "run seed|relative|^\[  PASSED|^\[  FAILED" | cut -c1-400; done
