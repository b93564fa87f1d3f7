#!/usr/bin/env bash
# Session 48 call 3 (~9 min): gpu_check on .device_carry/s48c (fusedmoe and the 13 test_*_gpu at the commit that
# moved the 4-bit tile rules: wide from 10 rows at H >= 7168, BLOCK_T=32 at 17-31 rows), every GPU test binary run
# directly, then the four sanitizers. After it, if time is left: the tuning run at the rules' untested points,
# gpt-oss-120b MXFP4 at 24 rows (T=768) and deepseek-v3 NVFP4 at 10 rows (T=320), even loads.
set -u
export FMOE_NO_SETUP=1
G=.device_carry/s48c; R=$OUT/r; mkdir -p $R $G/tests
for f in $G/*.xz; do xz -d -f -T0 $f; done
mv $G/test_*_gpu $G/tests/ 2>/dev/null; chmod +x $G/fusedmoe $G/tests/*
s=$SECONDS; FMOE_BUILD_DIR=$G timeout 520 scripts/gpu_check.sh --no-build --direct > $R/gpu_check.txt 2>&1
echo "gpu_check rc=$? $((SECONDS-s)) s"; grep -E "^\[gpu_check\]" $R/gpu_check.txt
cp $G/*.log $R/ 2>/dev/null; tar cJf $OUT/r.txz -C $OUT r
for a in "mxfp4 gpt-oss-120b 768" "nvfp4 deepseek-v3 320"; do
  set -- $a; [ $SECONDS -lt 545 ] || { echo "tune $2 skipped: $SECONDS s gone"; continue; }
  timeout $((590-SECONDS)) $G/fusedmoe bench --op layer --stages off --configs all --routing unbiased --precision $1 \
    --presets $2 --tokens $3 > $R/tune_$2.txt 2>&1; echo "tune $2 rc=$?"
  grep "^# tune" $R/tune_$2.txt | sed 's/fastest of/|/; s/: the automatic choice takes/ ->/' | cut -c1-230
done
echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
