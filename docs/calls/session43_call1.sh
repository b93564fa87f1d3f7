#!/usr/bin/env bash
# DRAFT (not run), ~9 min: docs/wip/fp8_layer_wide_tiles.diff (the FP8 layer at BLOCK_T=128 from 32 rows per expert,
# 16 where H >= 4096, when both GEMMs can take two waves; host code only). Binaries in .device_carry/s43/{base,wide}
# (fusedmoe, test_layer_gpu, test_ep_layer_gpu, test_checkpoint_gpu), built at session 42's end with
#   BUILD_TARGETS="fusedmoe test_layer_gpu test_ep_layer_gpu test_checkpoint_gpu" scripts/build_variants.sh \
#     .device_carry/s43 wide=docs/wip/fp8_layer_wide_tiles.diff
# (base = main e2b510d+, device code of 3c96531; rebuild if main's code changed or the folder is gone, ~5 min here).
# Carry .device_carry/s43. 1. wide's layer tests (GraphReplaysAndDeterminism's oracle now takes the plan's scale
# block). 2. The layer, base / wide, even loads, the rows per expert around both thresholds; deepseek-v3 under its
# model routing too. Ship if every changed row is faster (then gpu_check: the kernels are main's, but the configs
# chosen at those sizes change).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s43; R=$OUT/r; mkdir -p $R
for d in base wide; do xz -d -f -T0 $V/$d/*.xz; chmod +x $V/$d/*; done
for b in test_layer_gpu test_ep_layer_gpu test_checkpoint_gpu; do
  s=$SECONDS; timeout 200 $V/wide/$b > $R/$b.txt 2>&1; rc=$?
  echo "$b rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/$b.txt | tr '\n' ' ')"
done
tar cJf $OUT/r.txz -C $OUT r
# rows per expert: deepseek-v3 / qwen3.5 (E 256, k 8) T/32; qwen3-30b-a3b T/16; gpt-oss-120b (k 4) T/32.
for d in base wide; do
  s=$SECONDS
  timeout 100 $V/$d/fusedmoe bench --op layer --presets deepseek-v3,qwen3.5-35b-a3b --tokens 512,768,1024,1280 \
    --routing unbiased --json $R/a_$d.json > $R/a_$d.txt 2>&1; echo "bench a $d rc=$? $((SECONDS-s)) s"
  timeout 60 $V/$d/fusedmoe bench --op layer --presets qwen3-30b-a3b,gpt-oss-120b --tokens 256,512,640,1024 \
    --routing unbiased --json $R/b_$d.json > $R/b_$d.txt 2>&1; echo "bench b $d rc=$? $((SECONDS-s)) s"
  timeout 60 $V/$d/fusedmoe bench --op layer --presets deepseek-v3 --tokens 512,768,1024 \
    --json $R/c_$d.json > $R/c_$d.txt 2>&1; echo "bench c $d rc=$? $((SECONDS-s)) s"
  tar cJf $OUT/r.txz -C $OUT r
done
# 3. (base only) fast mode's bf16 route rows below the 50 MB rule (FMOE_ROWS16_MIN_T=1): the down GEMM's epilogue
#    is 16-40% of it at T <= 4096 on the qwen presets as fp32 atomics (session 42 call 2); the rows now leave by TMA
#    stores in slot order (from 128 routes per expert) and finalize reads them by bulk copies, which the rule's
#    measurement (session 23, H100) predates.
for v in rule rows16; do
  e=FMOE_X=0; [ $v = rows16 ] && e=FMOE_ROWS16_MIN_T=1
  s=$SECONDS; env $e timeout 60 $V/base/fusedmoe bench --op layer --presets qwen3-30b-a3b,qwen3.5-35b-a3b \
    --tokens 1024,2048,4096 --stages on --json $R/d_$v.json > $R/d_$v.txt 2>&1; echo "bench d $v rc=$? $((SECONDS-s)) s"
done
python3 scripts/bench_compare.py rule=$R/d_rule.json rows16=$R/d_rows16.json 2>&1 | grep -E "^layer(\.down|\.finalize)? |geomean"
# 4. (base) where the down GEMM's 1.6x reduction sectors come from (session 41: 6.84 M against ~4.2 M for the sums):
#    the sectors the SMs send against those the L2 fabric forwards between its partitions, qwen3-30b-a3b T=2048.
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
timeout 120 $NCU --kernel-name regex:grouped_gemm_kernel --launch-skip 1 --launch-count 1 --metrics \
  lts__t_sectors_op_red.sum,lts__t_sectors_srcunit_tex_op_red.sum,lts__t_sectors_srcunit_ltcfabric_op_red.sum,lts__t_requests_srcunit_tex_op_red.sum,gpu__time_duration.sum \
  $V/base/fusedmoe bench --op layer --presets qwen3-30b-a3b --tokens 2048 --mode fast --stages off > $R/ncu_red.txt 2>&1
echo "ncu red rc=$?"; grep -E "lts__|gpu__time" $R/ncu_red.txt | head -8
for x in a b c; do
  python3 scripts/bench_compare.py base=$R/${x}_base.json wide=$R/${x}_wide.json 2>&1 | grep -E "^layer |geomean"
done
grep -hE "^layer " $R/*_wide.txt | awk '{print $2, $3, $4, $5}' | sort -u | head -30
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
