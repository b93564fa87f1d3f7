#!/usr/bin/env bash
# DRAFT (not run), ~6 min: docs/wip/decode_fma_pipe.diff (the decode's shifts on the FMA pipe) against main.
# Build here first (2 cores, ~8 min in all):
#   ninja -C build fusedmoe tests/test_layer_gpu tests/test_e2m1_gpu tests/test_e2m1_prepare_gpu tests/test_nvfp4_grouped_gemm_gpu
#   M=.device_carry/s51m; mkdir -p $M; strip -o $M/fusedmoe build/fusedmoe; xz -T2 -3 -f $M/*
#   git apply docs/wip/decode_fma_pipe.diff; ninja -C build fusedmoe tests/test_layer_gpu tests/test_e2m1_gpu \
#     tests/test_e2m1_prepare_gpu tests/test_nvfp4_grouped_gemm_gpu
#   N=.device_carry/s51w; mkdir -p $N; strip -o $N/fusedmoe build/fusedmoe
#   for b in test_layer_gpu test_e2m1_gpu test_e2m1_prepare_gpu test_nvfp4_grouped_gemm_gpu; do strip -o $N/$b build/tests/$b; done
#   xz -T2 -3 -f $N/*; git checkout src   # (or keep the patch on a branch)
# and carry both. (Session 50 left these two already built as .device_carry/s50s = main's kernels, fusedmoe + 4 test
# binaries, and .device_carry/s50w = the patch, without test_e2m1_prepare_gpu; use them if they survived:
# N=.device_carry/s50w M=.device_carry/s50s.)
# The A/B, tests and sanitizers are session 50 call 4's, on these carries.
N=${N:-.device_carry/s51w} M=${M:-.device_carry/s51m} bash docs/calls/session50_call4.sh
