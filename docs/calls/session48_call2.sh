#!/usr/bin/env bash
# Session 48 call 2 (~4 min): the 4-bit tile rules moved by call 1's even-load figures (main at the commit after
# 3c7c279: H >= 7168 wide from 16 rows instead of 8; H >= 4096 BLOCK_T=32 at 17-31 rows instead of 64), in
# .device_carry/s48b, against the 8-row rule's binary (.device_carry/s48). Both routings, both modes; even loads two rounds
# (old, new, old, new). Expected: deepseek-v3 T=256 (8 rows) back to the narrow 2695 us under even loads (from
# 3016) and 2430 under model routing; T=384 (12 rows) unknown; T=512 unchanged; qwen3-235b T=320-448 (20-28 rows)
# ~0.86 of the old under both routings. Then the layer test binary's new case and tuning points at H=2048 24 rows.
set -u
export FMOE_NO_SETUP=1
N=.device_carry/s48b; O=.device_carry/s48; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $N/fusedmoe.xz $N/test_layer_gpu.xz $O/fusedmoe.xz; chmod +x $N/fusedmoe $N/test_layer_gpu $O/fusedmoe
timeout 120 $N/test_layer_gpu --gtest_filter='*FourBitLongKTileWidths*' > $R/tile_test.txt 2>&1
echo "tile test rc=$?: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|OK \]' $R/tile_test.txt | tr '\n' ' ')"
grep -E "Failure|Expected|Which is" $R/tile_test.txt | head -8
for rt in model unbiased; do
  rounds="1 2"; [ $rt = model ] && rounds=1
  for round in $rounds; do for v in old new; do
    B=$O/fusedmoe; [ $v = new ] && B=$N/fusedmoe
    timeout 60 $B bench --op layer --precision nvfp4 --stages off --mode both --routing $rt \
      --presets deepseek-v3,qwen3-235b-a22b --tokens 256,320,384,448,512 \
      --json $R/${rt}_${v}$round.json > $R/${rt}_${v}$round.txt 2>&1; echo "$rt $v$round rc=$? t=$SECONDS s"
  done
  python3 scripts/bench_compare.py old=$R/${rt}_old$round.json new=$R/${rt}_new$round.json 2>&1 | grep -E "^layer |geomean"
  done
done
tar cJf $OUT/r.txz -C $OUT r
for a in "qwen3-30b-a3b 384" "qwen3.5-35b-a3b 768"; do
  set -- $a; [ $SECONDS -lt 500 ] || { echo "tune $1 skipped"; continue; }
  timeout 45 $N/fusedmoe bench --op layer --stages off --configs all --routing unbiased --precision nvfp4 \
    --presets $1 --tokens $2 > $R/tune_$1.txt 2>&1; echo "tune $1 rc=$?"
  grep "^# tune" $R/tune_$1.txt | sed 's/fastest of/|/; s/: the automatic choice takes/ ->/' | cut -c1-230
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
