#!/usr/bin/env bash
# DRAFT (not run), ~6 min: the first GPU run of main's static-numbering line at 13 MiB (session 46 shipped it after its
# device time ran out; call 4's gpu_check ran the same code with the line at 8 MiB). Binaries: main at 2ca9ecd
# (fusedmoe, test_layer_gpu) in .device_carry/s47 (rebuild: ninja -C build fusedmoe test_layer_gpu, then strip + xz -3
# both into .device_carry/s47). Carry .device_carry/s47.
# Expected: test_layer_gpu 24/24. Layer: numbered from the routing by default where an expert's gate/up weights are
# >= 13 MiB, so default == FMOE_STATIC_TILES=0 within noise on deepseek-v3 (fp8 / nvfp4 / bf16) and gpt-oss-120b, and
# default ahead of FMOE_STATIC_TILES=0 on qwen3-235b-a22b fp8 (12.6 MB: 1.010-1.036 in session 46 call 3).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s47; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
s=$SECONDS; timeout 300 $V/test_layer_gpu > $R/layer_tests.txt 2>&1
echo "test_layer_gpu rc=$? $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/layer_tests.txt | tr '\n' ' ')"
grep -E "Failure|expected|differs" $R/layer_tests.txt | head -8
for v in "fp8 qwen3-235b-a22b 128,512,1024" "fp8 gpt-oss-120b 512,2048" "fp8 deepseek-v3 512,2048" \
         "nvfp4 deepseek-v3 512,2048" "bf16 deepseek-v3 1024"; do
  set -- $v
  for st in 1 0; do
    FMOE_STATIC_TILES=$st timeout 45 $V/fusedmoe bench --op layer --precision $1 --stages on --presets $2 --tokens $3 \
      --json $R/st_$2_$1_$st.json > $R/st_$2_$1_$st.txt 2>&1 || echo "$2 $1 static=$st rc=$?"
  done
  python3 scripts/bench_compare.py default=$R/st_$2_$1_1.json routing=$R/st_$2_$1_0.json 2>&1 | grep -E "^layer "
  echo "t=$SECONDS s"
done
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
