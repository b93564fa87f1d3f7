#!/usr/bin/env bash
# Session 50 call 7 (~2 min, the budget's last minutes): ncu of the NVFP4 engine after the scale pairs (s50s),
# deepseek-v3 T=128 even loads (session 49 call 7's setup), and every per-pipe counter ncu's full set collected (the
# raw page): which pipe the decode now binds on (integer ALU, FMA / FMA-heavy, FP16, issue).
set -u
export FMOE_NO_SETUP=1
N=${N:-.device_carry/s50s}; R=$OUT/r; mkdir -p $R  # (N: another carry, as docs/wip/next_call_s52.sh)
[ -x $N/fusedmoe ] || { xz -d -f -T0 $N/fusedmoe.xz; chmod +x $N/fusedmoe; }
timeout 150 scripts/ncu_layer.sh $N/fusedmoe deepseek-v3 128 $R --precision nvfp4 --routing unbiased
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null)
"$NCU" -i $R/ncu_deepseek-v3_T128.ncu-rep --page raw > $R/raw.txt 2>&1
grep -E "pipe_(alu|fma|fmaheavy|fmalite|fp16|shared|uniform|xu|tensor).*(pct_of_peak|cycles_active|inst_executed)|inst_issued.avg.pct|issue_active.avg.pct|Duration|smsp__inst_executed.sum " $R/raw.txt | head -80
rm -f $R/*.ncu-rep; echo "t=$SECONDS s"; tar cJf $OUT/r.txz -C $OUT r; rm -rf $OUT/r
