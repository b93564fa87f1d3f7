#!/usr/bin/env bash
# Session 44 call 9: the deepseek-v3 wide-tile rule (FP8 BLOCK_T=128 from 2 rows where H >= 7168) against the old
# narrow choice on one card, alternating, twice each (call 6's fresh card ran the new rule 2-4% slower than call 5's
# card ran it forced; the wide config's p90 is wider). Binary: .device_carry/s44t/base (main at the rule commit + test).
set -u
export FMOE_NO_SETUP=1
V=.device_carry/s44t/base; xz -d -f -T0 $V/fusedmoe.xz; chmod +x $V/fusedmoe
for i in 1 2; do for v in old new; do
  for T in 64 128 256; do
    f=""; [ $v = old ] && { [ $T = 256 ] && f=FMOE_FORCE_CONFIG=down_fp8_bt32_s9 || f=FMOE_FORCE_CONFIG=down_fp8_bt16_s10; }
    timeout 60 env FMOE_X=0 $f $V/fusedmoe bench --op layer --presets deepseek-v3 --tokens $T --routing unbiased --stages off 2>&1 \
      | grep -E "^layer" | awk -v v=$v -v i=$i '{print "round", i, v, $5, $6, $7, $8, $9}'
  done
done; done
