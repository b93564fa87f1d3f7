#!/usr/bin/env bash
# Session 52 calls 1-2 (as run): call 1 `bash docs/calls/session52_call1.sh` (gpu_check, 417 s), call 2 `... ncu` (28 s); carry [".device_carry/s52g"] (e008657's kernels = 00995d1's). Written as:
# 1. (~8 min) gpu_check on main (c6af952 or later: the new e2m1 word layout had its touched GPU tests and
#    sanitizers in session 51's call 5, not the whole check). Build here and pack as session 51 did:
#      ninja -C build; G=.device_carry/s52g; mkdir -p $G; strip -o $G/fusedmoe build/fusedmoe
#      for b in build/tests/test_*_gpu; do strip -o $G/$(basename $b) $b; done; xz -T2 -3 -f $G/*
#    then run this script with carry [".device_carry/s52g"]. (Session 51 left it packed at e008657, its COMMIT file
#    says so; if it survived and main's kernels have not changed since, use it as is.)
# 2. (~2 min, same warm machine) session 50 call 7's ncu on the same binary: `bash docs/wip/next_call_s52.sh ncu`.
#    Compare with session 50's: ALU 61.6%, FMA 26.5%, issue 68.7% (gate/up), 922 M warp instructions.
set -u
export FMOE_NO_SETUP=1
G=${G:-.device_carry/s52g}
if [ "${1:-}" = ncu ]; then
  N=$G bash docs/calls/session50_call7.sh
else
  G=$G bash docs/calls/session49_call5.sh
fi
