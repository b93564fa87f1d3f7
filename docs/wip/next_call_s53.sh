#!/usr/bin/env bash
# DRAFT for session 53 (not run, ~2 min): ncu of the down decode GEMV at 5 vs 6 CTAs an SM, where session 52's call 6
# saw the largest effects: gpt-oss-120b T=2 (368 CTAs, 0.79x at 6), qwen3-235b-a22b T=1 (512 CTAs, 1.15x at 6),
# deepseek-v3 T=1 (1008 CTAs, 1.006x). Binaries: .device_carry/s52g (main before 45a36bf: 5 an SM everywhere) and
# .device_carry/s52v6d (6 an SM for every many-CTA down); if they are gone, rebuild them: s52g = 45a36bf^ (git
# checkout 45a36bf^ -- src/layer/sm90_decode_gemv.cuh), s52v6d = that file with <false, 4, 5> -> <false, 4, 6>.
# Carry [".device_carry/s52g", ".device_carry/s52v6d"]. (ncu takes the first two GEMV launches: up, then down.)
set -u
export FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
for n in s52g s52v6d; do N=.device_carry/$n; [ -x $N/fusedmoe ] || { xz -d -f -T0 $N/fusedmoe.xz; chmod +x $N/fusedmoe; }
  NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 100 scripts/ncu_layer.sh $N/fusedmoe gpt-oss-120b 2 $R/$n --precision mxfp4 --routing unbiased
  NCU_REGEX=decode_gemv NCU_KERNELS=2 timeout 100 scripts/ncu_layer.sh $N/fusedmoe qwen3-235b-a22b 1 $R/$n --precision nvfp4 --routing unbiased
  for f in $R/$n/*.txt; do echo "== $f"; grep -E "decode_gemv_kernel|Duration|DRAM Throughput|Issue Slots Busy|Eligible Warps|Waves Per SM|Achieved Occupancy|L2 Hit" $f | head -12; done
done
rm -f $R/*/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
