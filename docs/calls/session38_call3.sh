#!/usr/bin/env bash
# Session 38 call 3 (the machine still warm from call 2, its build kept): synccheck + initcheck on
# the same build of 10a21ff. Run as one command line, as here.
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1; ls build/fusedmoe >/dev/null && timeout 400 scripts/gpu_check.sh --no-build --no-tests --tools "synccheck initcheck" > /tmp/gc3.txt 2>&1; echo "rc=$?"; grep -E "^\[gpu_check\]" /tmp/gc3.txt; grep -E "FAILED|Failure" -A3 /tmp/gc3.txt | head
