#!/usr/bin/env bash
# Session 51 call 4 (as run, ~9 min): gpu_check on .device_carry/s51g (fusedmoe and the 13 test_*_gpu at 0d343b2: the
# e2m1 decode's scale pairs by IMAD from a kernel parameter, in the engine and the decode GEMV).
G=.device_carry/s51g bash docs/calls/session49_call5.sh
