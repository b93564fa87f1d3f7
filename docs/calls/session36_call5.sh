#!/usr/bin/env bash
# Session 36 call 5 (the device time left, ~5 min): synccheck and initcheck on test_layer_gpu's
# *Sanitizer* cases at 78c7cc6 (the swiglu epilogue change; call 4 ran memcheck and racecheck on
# all 7 binaries). test_layer_gpu runs the swiglu epilogue of every GEMM config and the decode GEMVs.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
s=$SECONDS; (cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release && timeout 130 ninja -C build test_layer_gpu) > /tmp/build.txt 2>&1
echo "build rc=$? $((SECONDS-s)) s"; tail -2 /tmp/build.txt
for tool in synccheck initcheck; do
  s=$SECONDS; n=$(timeout 60 scripts/sanitize_binary.sh "$SAN" $tool build/tests/test_layer_gpu /tmp/$tool.log); rc=$?
  echo "$tool: rc=$rc reports=$n $((SECONDS-s)) s"; grep -E "SUMMARY|PASSED|FAILED" /tmp/$tool.log | head -4
done
