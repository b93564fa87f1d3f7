#!/usr/bin/env bash
# DRAFT (not run): docs/wip/finalize_bulk_rows.diff on the GPU (~4 min). Its binaries come from the
# build_variants line of docs/wip/next_call_partial_tiles.sh (variant fin). Carry .device_carry/p. The same binary with FMOE_FINALIZE_BULK=0 is the clean A/B of the kernel.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/p; R=$OUT/r; mkdir -p $R
for n in base fin; do for f in $V/$n/*.xz; do [ -e $f ] && xz -d -f -T0 $f; done; chmod +x $V/$n/*; done
s=$SECONDS; timeout 200 $V/fin/test_layer_gpu --gtest_filter='LayerGpu.FinalizeByBulkCopiesGivesTheSameBits:LayerGpu.LargeT*:LayerGpu.FastModeBf16RouteRows:LayerGpu.GraphReplaysAndDeterminism' > $R/test.txt 2>&1
echo "test rc=$? $((SECONDS-s)) s: $(grep -E '^\[  (PASSED|FAILED) ' $R/test.txt | tr '\n' ' ')"; grep -E "Failure|FAILED" -A3 $R/test.txt | head -12
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer)
for tool in racecheck memcheck synccheck initcheck; do  # (the sanitizer cases run at small T: bulk only where FMOE_FINALIZE_BULK=2)
  s=$SECONDS; n=$(FMOE_FINALIZE_BULK=2 timeout 90 scripts/sanitize_binary.sh $SAN $tool $V/fin/test_layer_gpu $R/$tool.txt); echo "$tool rc=$? reports=$n $((SECONDS-s)) s"
done
AB_ENV=FMOE_FINALIZE_BULK=0 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/fin/fusedmoe $R/fast \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on | grep -E "layer_ab|finalize|^layer  |geomean"
AB_ENV=FMOE_FINALIZE_BULK=0 BENCH_TIMEOUT=80 scripts/layer_ab.sh $V/base/fusedmoe $V/fin/fusedmoe $R/det \
  --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on --mode deterministic | grep -E "layer_ab|finalize|^layer  |geomean"
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
