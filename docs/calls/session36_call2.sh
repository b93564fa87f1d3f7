#!/usr/bin/env bash
# Session 36 call 2: which test_layer_gpu case failed in call 1 (weight blocks with their own
# powers of two), on the warm build if it is still there.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
if [ ! -x build/tests/test_layer_gpu ]; then
  s=$SECONDS; (cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release && ninja -C build test_layer_gpu) > $R/build.txt 2>&1
  echo "build rc=$? $((SECONDS-s)) s"
fi
s=$SECONDS; timeout 300 build/tests/test_layer_gpu > $R/layer.txt 2>&1; echo "test rc=$? $((SECONDS-s)) s"
grep -E "^\[  FAILED|^\[  PASSED" $R/layer.txt
grep -E "Failure|FAILED" -A12 $R/layer.txt | head -80
