#!/usr/bin/env bash
# DRAFT (not run), ~6-8 min: (1) the first GPU run of LayerGpu.StaticTileNumberingWithHotExperts (main's test, written
# in session 45 after its device time ran out); (2) docs/wip/walk_warp_search.diff: the walk's expert search by the
# whole producer warp in two ballot rounds instead of a serial binary search (session 45: the routing-numbered walk
# cost ~650 warp instructions a tile more than the static numbering, the qwen presets 2.5-6.5% at T=128-1024) -
# its tests with both numberings, the four sanitizers, and the A/B that decides whether static numbering can go.
# sass_compare base -> ws: 80 of 125 functions identical, the 45 grouped GEMMs +8-72 instructions (straight-line search).
# CPU test of the search (tests/gemm/test_walk_search.cpp, in the diff): passed here.
# Binaries: BUILD_TARGETS="fusedmoe test_layer_gpu" scripts/build_variants.sh .device_carry/s46 \
#   ws=docs/wip/walk_warp_search.diff   (base = main). Carry .device_carry/s46.
# Predicted: ws with FMOE_STATIC_TILES=0 within ~1% of static numbering on the qwen presets (the down GEMM's extra
# instructions gone), deepseek-v3 T=2048 model routing still ~0.95; T=8192 (always routing-numbered) unchanged or
# slightly faster. If so, the next step drops static numbering where an expert can overflow its first tile.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s46; R=$OUT/r; mkdir -p $R
for d in base ws; do xz -d -f -T0 $V/$d/*.xz; chmod +x $V/$d/*; done
s=$SECONDS; timeout 60 $V/base/test_layer_gpu --gtest_filter='*StaticTile*' > $R/base_static.txt 2>&1
echo "base StaticTile rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/base_static.txt | tr '\n' ' ')"
grep -E "Failure|expected|differs" $R/base_static.txt | head -8
# Every case with the rule's numbering (the 600-forward test aside), then the decode-size cases numbered from the routing.
for v in "1 -*RepeatedForwards*" "0 *EveryPresetShrunk*:*StaticTile*:*GivenRouting*:*SplitK*:*FullSizePresetsAtDecode*"; do
  st=${v%% *}; f=${v#* }
  s=$SECONDS; FMOE_STATIC_TILES=$st timeout 200 $V/ws/test_layer_gpu --gtest_filter="$f" > $R/ws_layer_$st.txt 2>&1
  echo "ws test_layer_gpu static=$st rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/ws_layer_$st.txt | tr '\n' ' ')"
done
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck initcheck; do
  n=$(timeout 60 scripts/sanitize_binary.sh "$SAN" $tool $V/ws/test_layer_gpu $R/san_$tool.log); echo "ws $tool rc=$? reports=$n"
done
tar cJf $OUT/r.txz -C $OUT r
for v in "base 1" "base 0" "ws 1" "ws 0"; do set -- $v
  FMOE_STATIC_TILES=$2 timeout 60 $V/$1/fusedmoe bench --op layer --stages on --presets qwen3-30b-a3b,qwen3.5-35b-a3b \
    --tokens 128,512,1024,8192 --json $R/q_$1_$2.json > $R/q_$1_$2.txt 2>&1; echo "qwen $1 static=$2 rc=$?"
done
python3 scripts/bench_compare.py base=$R/q_base_1.json base0=$R/q_base_0.json ws=$R/q_ws_1.json ws0=$R/q_ws_0.json 2>&1 \
  | grep -E "^layer(\.down|\.gate_up)? |geomean"
tar cJf $OUT/r.txz -C $OUT r
# The ws build spills 8 bytes (a consumer's ring phase, one LDL/STL a tile) in up_e2m1_bt128_w2_s6 (the NVFP4 gate/up
# at prefill), which main does not: its cost.
for d in base ws; do
  timeout 60 $V/$d/fusedmoe bench --op layer --precision nvfp4 --stages on --presets qwen3-30b-a3b --tokens 2048,8192 \
    --json $R/n_$d.json > $R/n_$d.txt 2>&1; echo "nvfp4 $d rc=$?"
done
python3 scripts/bench_compare.py base=$R/n_base.json ws=$R/n_ws.json 2>&1 | grep -E "^layer(\.gate_up)? |geomean"
if [ $SECONDS -lt 450 ]; then
  # The L2 model (scripts/walk_l2_model.py --tokens 2048 --activations --r 2.0) says the gate/up's half-tile pairs
  # cost ~1 GB of re-reads at deepseek-v3 T=2048 where the GEMM is DRAM-bound, for no makespan gain at r = 2:
  # the third line runs the routing-numbered walk with FMOE_NARROW_TAILS=0 (no pairs, no half tiles in either GEMM).
  for v in "base 1 1" "ws 0 1" "ws 0 0"; do set -- $v
    FMOE_STATIC_TILES=$2 FMOE_NARROW_TAILS=$3 timeout 50 $V/$1/fusedmoe bench --op layer --stages on --presets deepseek-v3 \
      --tokens 1024,2048 --json $R/d_$1_$2$3.json > $R/d_$1_$2$3.txt 2>&1; echo "deepseek $1 static=$2 narrow=$3 rc=$?"
  done
  python3 scripts/bench_compare.py base=$R/d_base_11.json ws0=$R/d_ws_01.json ws0n0=$R/d_ws_00.json 2>&1 \
    | grep -E "^layer(\.gate_up|\.down)? |geomean"
fi
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
