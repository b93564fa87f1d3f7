#!/usr/bin/env bash
# Session 50 call 5 (as run, ~4 min, warm machine after call 4): all of test_layer_gpu on .device_carry/s50s (the scale
# pairs; call 4 ran its 4-bit cases only).
N=.device_carry/s50s; for f in $N/*.xz; do xz -d -f -T0 $f; done; chmod +x $N/*; export FMOE_NO_SETUP=1; s=$SECONDS; timeout 320 $N/test_layer_gpu > $OUT/layer_full.txt 2>&1; echo "test_layer_gpu (all) rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \] [0-9]' $OUT/layer_full.txt | tr '\n' ' ')"; grep -E "^\[       OK|FAILED" $OUT/layer_full.txt | awk '{print $4, $5}' | tr '\n' ' '
