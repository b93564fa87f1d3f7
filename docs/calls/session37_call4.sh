#!/usr/bin/env bash
# Session 37 call 4 (the machine still warm from call 3, its build kept): synccheck + initcheck on
# the same build of the final tree.
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1; ls build/fusedmoe >/dev/null && timeout 330 scripts/gpu_check.sh --no-build --tools "synccheck initcheck" > /tmp/gc4.txt 2>&1; echo "rc=$?"; grep -E "^\[gpu_check\]" /tmp/gc4.txt; grep -E "FAILED|Failure" -A3 /tmp/gc4.txt | head
