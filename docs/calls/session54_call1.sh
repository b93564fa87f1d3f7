#!/usr/bin/env bash
# Session 54 call 1 (as run, ~4 min): the per-buffer mbarrier GEMV (docs/tried/gemv_mbarrier_chunks.diff) against
# main. Build both (a fresh checkout has no build/: ./scripts/setup.sh, ~15 min on 2 cores):
#   D=.device_carry/s54m; mkdir -p $D/base $D/new; B="fusedmoe tests/test_layer_gpu tests/test_e2m1_gpu
#     tests/test_e2m1_prepare_gpu tests/test_nvfp4_grouped_gemm_gpu"
#   for b in $B; do strip -o $D/base/$(basename $b) build/$b; done
#   git apply docs/wip/gemv_mbarrier_chunks.diff && ninja -C build
#   for b in $B; do strip -o $D/new/$(basename $b) build/$b; done
#   git checkout src && ninja -C build; xz -T2 -3 -f $D/*/*
# Carry [".device_carry/s54m"]. Then, if it wins, the full gpu_check on the commit (session49_call5.sh).
set -u
export FMOE_NO_SETUP=1
D=.device_carry/s54m; N=$D/new; R=$OUT/r; mkdir -p $R
for v in base new; do for f in $D/$v/*.xz; do xz -d -f -T0 $f; done; chmod +x $D/$v/*; done
scripts/four_bit_checks.sh $N $R/checks  # test_layer_gpu's 4-bit cases, the e2m1 binaries, the four sanitizers
export TEST_FILTER=none ORDER=abba ROUNDS=2 BENCH_TIMEOUT=60 VARIANTS="base new"
scripts/variants_check.sh $D $R/n --precision nvfp4 --mode fast --presets deepseek-v3,qwen3-30b-a3b,qwen3-235b-a22b,qwen3.5-35b-a3b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
scripts/variants_check.sh $D $R/m --precision mxfp4 --mode fast --presets gpt-oss-120b --tokens 1,2,4,8 --routing unbiased 2>&1 | grep -E "^\[variants\]|^layer |^layer.gate|^layer.down|geomean"
NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 100 scripts/ncu_layer.sh $N/fusedmoe deepseek-v3 1 $R/ncu --precision nvfp4 --routing unbiased
for f in $R/ncu/*.txt; do echo "== $f"; grep -E "decode_gemv_kernel|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Achieved Occupancy" $f | head -14; done
head -24 $R/ncu/*_stalls.txt
rm -f $R/*/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
