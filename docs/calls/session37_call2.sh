#!/usr/bin/env bash
# Session 37 call 2: the tokens-as-M down epilogue compiled apart with / without the expert's
# bias and for whole / partial waves (device code change): gpu_check (build, every test incl. the
# new LayerGpu.TokensOnMDownGemmBiasesAndAPartialWave, synccheck + initcheck on the 7 binaries),
# then the layer bench A/B against the base binary (.device_carry/s37/fusedmoe_wl: main 20c65ad
# plus bench --op wgmma_loop, the same kernels), one round; call 3 runs the second round.
set -u
export CXX=/usr/bin/g++ FMOE_NO_SETUP=1
R=$OUT/r; mkdir -p $R
s=$SECONDS; timeout 440 scripts/gpu_check.sh --tools "synccheck initcheck" > $R/gpu_check.txt 2>&1; echo "gpu_check rc=$? $((SECONDS-s)) s"
grep -E "^\[gpu_check\]" $R/gpu_check.txt; grep -E "Failed|FAILED|Failure" -A3 $R/gpu_check.txt | head -20
A=(bench --op layer --presets qwen3-30b-a3b,deepseek-v3,qwen3.5-35b-a3b --tokens 2048,8192 --stages on)
for v in base new; do
  bin=build/fusedmoe; [ $v = base ] && bin=.device_carry/s37/fusedmoe_wl
  s=$SECONDS; timeout 70 $bin "${A[@]}" --json $R/${v}_1.json > $R/${v}_1.txt 2>&1; echo "$v round 1 rc=$? $((SECONDS-s)) s"
done
python3 scripts/bench_compare.py base=$R/base_1.json new=$R/new_1.json > $R/compare.txt 2>&1
grep -E "down|layer |geomean" $R/compare.txt | head -40
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
