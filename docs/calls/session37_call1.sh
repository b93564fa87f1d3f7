#!/usr/bin/env bash
# Session 37 call 1: (1) `bench --op wgmma_loop` (docs/wip/wgmma_loop.diff, built here and carried as
# .device_carry/s37/fusedmoe_wl): our two-wave batch structure against DeepGEMM's one n192 batch
# per k-block with nothing loaded; (2) ncu with the SASS export of DeepGEMM's gate/up and down on
# qwen3-30b-a3b T=8192 and ours beside them (scripts/ncu_stalls.py on both).
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1 PYTHONUNBUFFERED=1
R=$OUT/r; D=$R/ncu; mkdir -p $D; P=.device_carry/peer; B=.device_carry/s37/fusedmoe_wl
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
scripts/peer_deepgemm.sh build $P/deepgemm_src.tar.xz /tmp/dg > $R/dg_build.txt 2>&1 &
DGB=$!
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv
for i in 1 2; do timeout 90 $B bench --op wgmma_loop --json $R/wgmma_loop$i.json 2>&1 | tee $R/wgmma_loop$i.txt | grep -vE "^#" | tail -12; done
wait $DGB; tail -2 $R/dg_build.txt
export PYTHONPATH=/tmp/dg/DeepGEMM
ncu_dg() {  # $1 name, $2 routes, $3 gemm
  timeout 150 "$NCU" --kernel-name regex:fp8_gemm --launch-count 1 --set full --import-source no \
    --clock-control none -f -o $D/dg_$1 \
    python3 python/bench/deepgemm_peer.py $2 --gemms $3 --launches 1 --reps 1 > $D/dg_$1.log 2>&1
  echo "ncu dg $1 rc=$?"; "$NCU" -i $D/dg_$1.ncu-rep --page details > $D/dg_$1.txt 2>&1
  "$NCU" -i $D/dg_$1.ncu-rep --page source --csv --print-source sass > $D/dg_$1_sass.csv 2>&1
  python3 scripts/ncu_stalls.py $D/dg_$1_sass.csv --top 40 > $D/dg_$1_stalls.txt 2>&1
}
s=$SECONDS
ncu_dg qwen_up $P/qwen8192.jsonl up; ncu_dg qwen_down $P/qwen8192.jsonl down
NCU_ARGS="--clock-control none" timeout 200 scripts/ncu_layer.sh $B qwen3-30b-a3b 8192 $D
echo "ncu $((SECONDS-s)) s"
rm -f $D/*.ncu-rep
for f in $D/*_stalls.txt; do echo "== $f"; head -24 $f; done
mkdir -p $OUT/sass && mv $D/*_sass.csv $OUT/sass/; tar cJf $OUT/sass.txz -C $OUT sass; rm -rf $OUT/sass
tar cJf $OUT/r.txz -C $OUT r
rm -rf $OUT/r
