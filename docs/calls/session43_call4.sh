#!/usr/bin/env bash
# Session 43 call 4: (1) the bf16 layer bench that stalled in call 3 (qwen3-30b-a3b T=512, unbiased routing; >120 s
# after its CPU reference, i.e. in the graph replays), narrowed by routing / mode / T / FMOE_DYNAMIC_ITEMS; (2) main
# with the FP8 rows16 rule (.device_carry/s43/new: fusedmoe, test_layer_gpu): its layer tests, memcheck and
# racecheck on the layer's sanitizer cases, and the rule's rows on the qwen presets.
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s43/new; R=$OUT/r; mkdir -p $R
xz -d -f -T0 $V/*.xz; chmod +x $V/*
hang() {  # name timeout env args...
  local n=$1 t=$2 e=$3; shift 3
  s=$SECONDS; env $e timeout $t $V/fusedmoe bench --op layer --precision bf16 --presets qwen3-30b-a3b --stages off "$@" \
    > $R/h_$n.txt 2>&1; rc=$?
  echo "hang $n rc=$rc $((SECONDS-s)) s: $(grep -E '^layer ' $R/h_$n.txt | awk '{print $4, $5, $6}' | tr '\n' ' ') $(grep -iE 'error|fail' $R/h_$n.txt | head -2)"
}
hang ub512 25 FMOE_X=0 --tokens 512 --routing unbiased
hang model512 25 FMOE_X=0 --tokens 512
hang det512 25 FMOE_X=0 --tokens 512 --routing unbiased --mode deterministic
hang dyn0 25 FMOE_DYNAMIC_ITEMS=0 --tokens 512 --routing unbiased
hang ub384 25 FMOE_X=0 --tokens 384 --routing unbiased
hang ub1024 25 FMOE_X=0 --tokens 1024 --routing unbiased
tar cJf $OUT/r.txz -C $OUT r
s=$SECONDS; timeout 200 $V/test_layer_gpu > $R/test_layer_gpu.txt 2>&1; rc=$?
echo "test_layer_gpu rc=$rc $((SECONDS-s)) s: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' $R/test_layer_gpu.txt | tr '\n' ' ')"
grep -E "^\[  FAILED  \]" $R/test_layer_gpu.txt | head
tar cJf $OUT/r.txz -C $OUT r
for tool in memcheck racecheck; do
  s=$SECONDS; timeout 120 scripts/sanitize_binary.sh "$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)" \
    $tool $V/test_layer_gpu $R/san_$tool.log > $R/san_$tool.txt 2>&1; echo "$tool rc=$? $((SECONDS-s)) s: $(tail -1 $R/san_$tool.txt)"
done
tar cJf $OUT/r.txz -C $OUT r
s=$SECONDS; timeout 60 $V/fusedmoe bench --op layer --presets qwen3-30b-a3b,qwen3.5-35b-a3b --tokens 256,512,1024 \
  --routing unbiased --stages off --json $R/q_new.json > $R/q_new.txt 2>&1; echo "bench q rc=$? $((SECONDS-s)) s"
grep -E "^layer " $R/q_new.txt | awk '{print $2, $3, $4, $5, $6}'
tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
