#!/usr/bin/env bash
# Session 45 call 1 (as run), ~5-6 min: docs/wip/finalize_one_waiter.diff (finalize_rows_kernel's producer warp: lane 0 alone waits
# on the empty barrier, the warp follows through __syncwarp; sass_compare: only the two finalize_rows kernels change).
# Binaries: BUILD_TARGETS="fusedmoe test_layer_gpu test_ep_layer_gpu" scripts/build_variants.sh .device_carry/s45f \
#   fin=docs/wip/finalize_one_waiter.diff   (base = main). Carry .device_carry/s45f.
# 1. fin's tests that run finalize (all of test_layer_gpu, test_ep_layer_gpu); 2. the four sanitizers on their
# *Sanitizer* cases; 3. finalize's time, base / fin (the stage alone, fast mode rows and deterministic rows).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s45f; R=$OUT/r; mkdir -p $R
for d in base fin; do xz -d -f -T0 $V/$d/*.xz; chmod +x $V/$d/*; done
for b in test_layer_gpu test_ep_layer_gpu; do
  s=$SECONDS; timeout 240 $V/fin/$b > $R/$b.txt 2>&1
  echo "fin $b rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/$b.txt | tr '\n' ' ')"
done
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck synccheck; do
  n=$(timeout 120 scripts/sanitize_binary.sh "$SAN" $tool $V/fin/test_layer_gpu $R/san_$tool.log); echo "$tool rc=$? reports=$n"
done
tar cJf $OUT/r.txz -C $OUT r
for d in base fin; do for m in fast deterministic; do
  timeout 60 $V/$d/fusedmoe bench --op layer --presets qwen3-30b-a3b,deepseek-v3 --tokens 2048,8192 --mode $m \
    --stages on --json $R/ab_${d}_$m.json > $R/ab_${d}_$m.txt 2>&1; echo "ab $d $m rc=$?"
done; done
for m in fast deterministic; do
  python3 scripts/bench_compare.py base=$R/ab_base_$m.json fin=$R/ab_fin_$m.json 2>&1 | grep -E "^layer(\.finalize)? |geomean"
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
