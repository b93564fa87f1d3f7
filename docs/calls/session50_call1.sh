#!/usr/bin/env bash
# Session 50 call 1 (as run), ~8 min: gpu_check on main (session 49's last device-code commit b778748 ran only as SASS-identical
# kernels, and the two-block test's new check, a forced config's other GEMM following the rules, never ran on a
# GPU). Build here first: ninja -C build fusedmoe $(cd build && ls tests | grep '_gpu$' | sed 's|^|tests/|'), then
#   D=.device_carry/s50g; mkdir -p $D; strip -o $D/fusedmoe build/fusedmoe;
#   for b in build/tests/test_*_gpu; do strip -o $D/$(basename $b) $b; done; xz -T2 -3 -f $D/*
# and carry .device_carry/s50g. Then next_call_s50b.sh on the warm machine.
G=.device_carry/s50g bash docs/calls/session49_call5.sh
