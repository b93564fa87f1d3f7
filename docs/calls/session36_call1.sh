#!/usr/bin/env bash
# Session 36 call 1: build + every test (the layer tests' weight blocks now get their own power of
# two: docs/wip/test_weight_block_magnitudes.diff applied; c682133's first_route_differing by bits),
# DeepGEMM built beside it (carried source: .device_carry/peer/deepgemm_src.tar.xz = DeepGEMM
# 54e2261 + CUTLASS f3fde58 include/ + fmt 553ec11 include/, its pinned submodules), then our layer
# bench with --routes and DeepGEMM's grouped GEMMs on the same routes.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
( s=$SECONDS; mkdir -p /tmp/dg && tar xJf .device_carry/peer/deepgemm_src.tar.xz -C /tmp/dg && cd /tmp/dg/DeepGEMM &&
  ln -sf $PWD/third-party/cutlass/include/cutlass deep_gemm/include/ &&
  ln -sf $PWD/third-party/cutlass/include/cute deep_gemm/include/ &&
  python3 setup.py build_ext --inplace; echo "deepgemm build rc=$? $((SECONDS-s)) s" ) > $R/dg_build.txt 2>&1 &
DGB=$!
s=$SECONDS; timeout 400 scripts/gpu_check.sh --tools "" > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; grep -E "FAILED|Failure" -A3 $R/gpu_check.txt | head -20
wait $DGB; tail -3 $R/dg_build.txt
s=$SECONDS; timeout 150 build/fusedmoe bench --op layer --presets deepseek-v3,qwen3-30b-a3b --tokens 2048,8192 \
  --stages on --routes $R/routes.jsonl --json $R/ours.json > $R/ours.txt 2>&1; echo "ours rc=$? $((SECONDS-s)) s"
grep -E "gate/up|down|layer " $R/ours.txt | grep -v "^#" | head -20
s=$SECONDS; PYTHONPATH=/tmp/dg/DeepGEMM timeout 240 python3 python/bench/deepgemm_peer.py $R/routes.jsonl \
  --json $R/dg.json > $R/dg.txt 2>&1; echo "deepgemm rc=$? $((SECONDS-s)) s"; tail -15 $R/dg.txt
tar cJf $OUT/r.txz -C $OUT r
