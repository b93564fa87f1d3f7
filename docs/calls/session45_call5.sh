#!/usr/bin/env bash
# Session 45 call 5 (as run), ~3 min: docs/wip/finalize_one_waiter.diff, the rest of its checks. Call 1 had fin's
# layer.finalize at qwen3-30b-a3b T=8192 fast 77.21 -> 79.94 us (1.035; the other 7 finalize rows 0.995-1.009):
# two more rounds there, and initcheck on test_layer_gpu's sanitizer cases (call 1 ran memcheck / racecheck /
# synccheck). Carry .device_carry/s45f.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s45f; R=$OUT/r; mkdir -p $R
for d in base fin; do xz -d -f -T0 $V/$d/*.xz; chmod +x $V/$d/*; done
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
n=$(timeout 120 scripts/sanitize_binary.sh "$SAN" initcheck $V/fin/test_layer_gpu $R/san_initcheck.log); echo "initcheck rc=$? reports=$n"
for i in 1 2; do for d in fin base; do
  timeout 60 $V/$d/fusedmoe bench --op layer --presets qwen3-30b-a3b --tokens 2048,8192 --stages on \
    --json $R/ab_${d}_$i.json > $R/ab_${d}_$i.txt 2>&1; echo "ab $d round $i rc=$?"
done; done
for i in 1 2; do python3 scripts/bench_compare.py base=$R/ab_base_$i.json fin=$R/ab_fin_$i.json 2>&1 | grep -E "^layer(\.finalize)? |geomean"; done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
