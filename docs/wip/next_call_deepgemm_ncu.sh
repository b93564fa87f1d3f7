#!/usr/bin/env bash
# DRAFT for session 37's first device call (not run). Before it, here:
#   fetch deepseek-ai/DeepGEMM, NVIDIA/cutlass, fmtlib/fmt (the session tool), then
#   scripts/peer_deepgemm.sh pack .device_carry/peer/deepgemm_src.tar.xz
#   git apply docs/wip/wgmma_loop.diff          (and build it here once: it must compile)
#   routes: the T=8192 lines of a `bench --op layer --routes` file, or let step 2 write them.
# Carry: .device_carry/peer. About 8 minutes.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R/ncu; P=.device_carry/peer
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
scripts/peer_deepgemm.sh build $P/deepgemm_src.tar.xz /tmp/dg > $R/dg_build.txt 2>&1 &
DGB=$!
s=$SECONDS; (cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release && ninja -C build fusedmoe) > $R/build.txt 2>&1
echo "build rc=$? $((SECONDS-s)) s"
# 1. the batch structure with nothing loaded (docs/wip/wgmma_loop.diff)
timeout 60 build/fusedmoe bench --op wgmma_loop --json $R/wgmma_loop.json 2>&1 | grep -E "wgmma_loop|rror" | tee $R/wgmma_loop.txt
# 2. the routes (and our stage times beside them)
timeout 120 build/fusedmoe bench --op layer --presets qwen3-30b-a3b,deepseek-v3 --tokens 8192 --stages on \
  --routes $R/routes.jsonl --json $R/ours.json > $R/ours.txt 2>&1; echo "ours rc=$?"
grep qwen3-30b $R/routes.jsonl > $R/qwen.jsonl; grep deepseek $R/routes.jsonl > $R/dsv3.jsonl
wait $DGB; tail -1 $R/dg_build.txt
export PYTHONPATH=/tmp/dg/DeepGEMM
# 3. DeepGEMM's gate/up with per-instruction samples, then ours the same way
for c in qwen dsv3; do
  timeout 150 "$NCU" --kernel-name regex:fp8_gemm --launch-count 1 --set full --import-source no \
    --clock-control none -f -o $R/ncu/dg_$c python3 python/bench/deepgemm_peer.py $R/$c.jsonl --gemms up \
    --launches 1 --reps 1 > $R/ncu/dg_$c.log 2>&1
  "$NCU" -i $R/ncu/dg_$c.ncu-rep --page source --csv --print-source sass > $R/ncu/dg_${c}_sass.csv 2>&1
  python3 scripts/ncu_stalls.py $R/ncu/dg_${c}_sass.csv > $R/ncu/dg_${c}_stalls.txt 2>&1
  "$NCU" -i $R/ncu/dg_$c.ncu-rep --page details > $R/ncu/dg_$c.txt 2>&1
done
NCU_KERNELS=1 NCU_ARGS="--clock-control none" timeout 200 scripts/ncu_layer.sh build/fusedmoe qwen3-30b-a3b 8192 $R/ncu
head -30 $R/ncu/*_stalls.txt
rm -f $R/ncu/*.ncu-rep
tar cJf $OUT/r.txz -C $OUT r
