#!/usr/bin/env bash
# Session 45 call 6 (as run), ~6-8 min: static token-tile numbering at prefill. Call 3's ncu (deepseek-v3 T=2048,
# model routing) had the gate/up GEMM read 7.56 GB from DRAM for ~5.6 GB of weights of the 191 experts hit, the
# down 3.70 GB for ~2.8 GB: the layer numbers each expert's first token tile statically where the routes average
# <= BLOCK_T / 2 (64 at BLOCK_T=128: deepseek-v3 T=2048), so an expert's later token tiles run after every
# expert's first one, and its weights come from DRAM again. FMOE_STATIC_TILES=0 (new knob) numbers every tile
# from the routing (token tiles innermost; and tails of <= 64 routes become half tiles). Binaries: main + the knob
# (fusedmoe, test_layer_gpu; carry .device_carry/s45s). 1. layer A/B, knob 1 / 0, model and unbiased routing;
# 2. test_layer_gpu with the knob at 0 (every case, the 600-forward test aside); 3. ncu DRAM bytes with the knob 0.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s45s; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
for rt in model unbiased; do for st in 1 0; do
  s=$SECONDS; FMOE_STATIC_TILES=$st timeout 120 $V/fusedmoe bench --op layer --routing $rt --stages off \
    --presets deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 128,512,1024,2048 \
    --json $R/ab_${rt}_$st.json > $R/ab_${rt}_$st.txt 2>&1; echo "ab $rt static=$st rc=$? $((SECONDS-s)) s"
done; python3 scripts/bench_compare.py static=$R/ab_${rt}_1.json dynamic=$R/ab_${rt}_0.json 2>&1 | grep -E "^layer |geomean"
done
tar cJf $OUT/r.txz -C $OUT r
s=$SECONDS; FMOE_STATIC_TILES=0 timeout 220 $V/test_layer_gpu --gtest_filter='-*RepeatedForwards*' > $R/layer0.txt 2>&1
echo "test_layer_gpu static=0 rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/layer0.txt | tr '\n' ' ')"
grep -E "^\[  FAILED" $R/layer0.txt | head
tar cJf $OUT/r.txz -C $OUT r
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for st in 1 0; do
  [ $SECONDS -lt 470 ] || { echo "ncu static=$st skipped: $SECONDS s gone"; continue; }
  FMOE_STATIC_TILES=$st timeout 60 $NCU --kernel-name regex:grouped_gemm_kernel --launch-count 2 --clock-control none \
    --metrics dram__bytes_read.sum,gpu__time_duration.sum,lts__t_sector_hit_rate.pct \
    $V/fusedmoe bench --op layer --presets deepseek-v3 --tokens 2048 --stages off > $R/ncu_$st.txt 2>&1
  echo "ncu static=$st rc=$?"; grep -E "dram__bytes_read|gpu__time_duration|sector_hit" $R/ncu_$st.txt
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
