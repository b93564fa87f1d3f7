#!/usr/bin/env bash
# Session 43 call 6: the new LayerGpu.RepeatedForwardsFinishAtEveryTokenTileWidth (stage by stage, then graph
# replays, full qwen3-30b-a3b shapes, bf16 and fp8, BLOCK_T 64 / 16 / 32 / 128): does the bf16 BLOCK_T=64 stall of
# calls 3-5 reproduce in a test, and in which stage.
set -u
V=.device_carry/s43/t; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
s=$SECONDS; timeout 150 $V/test_layer_gpu --gtest_filter='*RepeatedForwards*' > $R/t.txt 2>&1; echo "rc=$? $((SECONDS-s)) s"
grep -vE "^\[ *(RUN|OK) " $R/t.txt | tail -20
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
