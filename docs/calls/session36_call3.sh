#!/usr/bin/env bash
# Session 36 call 3: (1) the fixed rows16 allowance (SanitizerSmall, 3 fresh seeds); (2) DeepGEMM's
# chosen configs (DG_PRINT_CONFIGS) and times again at T=8192; (3) ncu (--set full, the card's own
# clocks) of DeepGEMM's and our gate/up and down GEMMs on qwen3-30b-a3b T=8192 (ours 1.46x / 1.35x
# slower in call 1), and both gate/ups on deepseek-v3 T=8192 (1.21x).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1 PYTHONUNBUFFERED=1
R=$OUT/r; mkdir -p $R; P=.device_carry/peer
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
( s=$SECONDS; mkdir -p /tmp/dg && tar xJf $P/deepgemm_src.tar.xz -C /tmp/dg && cd /tmp/dg/DeepGEMM &&
  ln -sf $PWD/third-party/cutlass/include/cutlass deep_gemm/include/ &&
  ln -sf $PWD/third-party/cutlass/include/cute deep_gemm/include/ &&
  python3 setup.py build_ext --inplace; echo "deepgemm build rc=$? $((SECONDS-s)) s" ) > $R/dg_build.txt 2>&1 &
DGB=$!
s=$SECONDS; (cmake -G Ninja -S . -B build -DCMAKE_BUILD_TYPE=Release && ninja -C build fusedmoe test_layer_gpu) > $R/build.txt 2>&1
echo "build rc=$? $((SECONDS-s)) s"
for i in 1 2 3; do timeout 60 build/tests/test_layer_gpu --gtest_filter=LayerGpu.SanitizerSmall 2>&1 | grep -E "^\[  (PASSED|FAILED)|Failure|tolerance" | head -4; done
wait $DGB; tail -1 $R/dg_build.txt
export PYTHONPATH=/tmp/dg/DeepGEMM
s=$SECONDS; DG_PRINT_CONFIGS=1 timeout 120 python3 python/bench/deepgemm_peer.py $P/routes8192.jsonl > $R/dg_cfg.txt 2>&1
echo "deepgemm rc=$? $((SECONDS-s)) s"; grep -v "^#" $R/dg_cfg.txt | head -40
D=$R/ncu; mkdir -p $D
ncu_dg() {  # $1 name, $2 routes, $3 gemm
  timeout 150 "$NCU" --kernel-name regex:fp8_gemm --launch-count 1 --set full --clock-control none -f -o $D/dg_$1 \
    python3 python/bench/deepgemm_peer.py $2 --gemms $3 --launches 1 --reps 1 > $D/dg_$1.log 2>&1
  echo "ncu dg $1 rc=$?"; "$NCU" -i $D/dg_$1.ncu-rep --page details > $D/dg_$1.txt 2>&1
}
s=$SECONDS
ncu_dg qwen_up $P/qwen8192.jsonl up; ncu_dg qwen_down $P/qwen8192.jsonl down
NCU_ARGS="--clock-control none" timeout 200 scripts/ncu_layer.sh build/fusedmoe qwen3-30b-a3b 8192 $D
ncu_dg dsv3_up $P/dsv3_8192.jsonl up
NCU_KERNELS=1 NCU_ARGS="--clock-control none" timeout 200 scripts/ncu_layer.sh build/fusedmoe deepseek-v3 8192 $D
echo "ncu $((SECONDS-s)) s"
rm -f $D/*.ncu-rep
for f in $D/*.txt; do echo "== $f"; grep -E "^  [a-z_]+.*\(|Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Registers Per|Dynamic Shared|Grid Size|Block Size|Cluster Size|Issue Slots Busy|Executed Ipc A" $f | head -40; done
tar cJf $OUT/r.txz -C $OUT r
