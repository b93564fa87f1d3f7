#!/usr/bin/env bash
# Session 51 A/B of several fusedmoe binaries (bench only, ~4-6 min): V="main=<carry> a=<carry> ..." (the first is
# the baseline). The NVFP4 / MXFP4 layer, even loads, fast mode: each bench runs the binaries in order, then in
# reverse (ABBA), so clock drift cancels; ratios against the first binary by scripts/bench_compare.py.
# Call 1 ran V="main=.device_carry/s50s fma=.device_carry/s50w" (docs/wip/decode_fma_pipe.diff against main); call 2
# V="main=.device_carry/s50s pf=.device_carry/s51p sm=.device_carry/s51s both=.device_carry/s51q" (the prefetch WIP, the
# scale pair's IMAD alone, both); call 3 SETS=gemv V="main=.device_carry/s51s gv=.device_carry/s51v" (the decode GEMV's
# scale pair from its parameter too).
set -u
export FMOE_NO_SETUP=1
V=${V:-"main=.device_carry/s50s fma=.device_carry/s50w"}; R=$OUT/r; mkdir -p $R; LIMIT=${LIMIT:-480}
labels=""; for v in $V; do d=${v#*=}; [ -e $d/fusedmoe.xz ] && xz -d -f -T0 $d/fusedmoe.xz; chmod +x $d/fusedmoe
  labels="$labels ${v%%=*}"; done
rev=$(echo $labels | tr ' ' '\n' | tac | tr '\n' ' ')
ab() {  # name precision presets tokens [more bench args]
  local name=$1 prec=$2 presets=$3 tokens=$4; shift 4
  for round in 1 2; do
    order=$labels; [ $round = 2 ] && order=$rev
    for l in $order; do
      [ $SECONDS -lt $LIMIT ] || { echo "bench $name $l skipped: $SECONDS s gone"; continue; }
      d=$(for v in $V; do [ ${v%%=*} = $l ] && echo ${v#*=}; done)
      timeout 90 $d/fusedmoe bench --op layer --precision $prec --mode fast --presets $presets --tokens $tokens "$@" \
        --json $R/${name}_${round}_$l.json > $R/${name}_${round}_$l.txt 2>&1; echo "bench $name r$round $l rc=$? t=$SECONDS s"
    done
    args=""; for l in $labels; do [ -e $R/${name}_${round}_$l.json ] && args="$args $l=$R/${name}_${round}_$l.json"; done
    python3 scripts/bench_compare.py $args 2>&1 | grep -E "^layer |^layer.gate_up|^layer.down|geomean|ceiling"
  done
}
SETS=${SETS:-layer}
if [ $SETS = gemv ]; then  # the decode GEMVs' sizes only (call 3)
  ab g4 nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b,qwen3-235b-a22b 1,2,4,8 --routing unbiased
  ab gm mxfp4 gpt-oss-120b 1,2,4,8 --routing unbiased
else
  ab d4 nvfp4 deepseek-v3,qwen3-30b-a3b,qwen3.5-35b-a3b 1,8,32,128 --routing unbiased
  ab mx mxfp4 gpt-oss-120b 1,64,2048 --routing unbiased
  ab pf nvfp4 qwen3-30b-a3b,qwen3.5-35b-a3b 2048
  [ $SETS = layer+gemv ] && ab g2 nvfp4 qwen3-30b-a3b,qwen3.5-35b-a3b,qwen3-235b-a22b 2,4 --routing unbiased
fi
[ -n "${KEEP:-}" ] || { echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r; }
