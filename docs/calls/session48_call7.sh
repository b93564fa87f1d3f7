#!/usr/bin/env bash
# Session 48 call 7 (~2 min): the > 32-row e2m1 wide rule's binary (.device_carry/s48d) against call 3's (s48c):
# the GPU tile test (now also H = 2048 at 34 rows), then qwen3-30b / qwen3.5 NVFP4 at 34-36 rows, both modes.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s48d; O=.device_carry/s48c; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $N/*.xz; [ -x $O/fusedmoe ] || xz -d -f -T0 $O/fusedmoe.xz; chmod +x $N/* $O/fusedmoe
timeout 150 $N/test_layer_gpu --gtest_filter='*FourBitTileWidths*' > $R/tile_test.txt 2>&1
echo "tile test rc=$?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|OK \]' $R/tile_test.txt | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" $R/tile_test.txt | head -8
for v in old new; do
  B=$O/fusedmoe; [ $v = new ] && B=$N/fusedmoe
  timeout 60 $B bench --op layer --precision nvfp4 --stages off --mode both --presets qwen3-30b-a3b,qwen3.5-35b-a3b \
    --tokens 512,544,576,1024,1088,1152 --json $R/$v.json > $R/$v.txt 2>&1; echo "$v rc=$? t=$SECONDS s"
done
python3 scripts/bench_compare.py old=$R/old.json new=$R/new.json 2>&1 | grep -E "^layer |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
