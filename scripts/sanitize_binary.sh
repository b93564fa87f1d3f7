#!/usr/bin/env bash
# One test binary's *Sanitizer* cases under one compute-sanitizer tool (used by gpu_check.sh and
# ep_check.sh). Prints the number of reports and exits nonzero when the tool failed or reported.
#   scripts/sanitize_binary.sh SANITIZER TOOL BINARY LOG
# Cases in suites named *SanitizerNccl* run NCCL's own setup and kernels. NCCL's communicator
# setup probes its kernels with cudaFuncGetAttributes and handles cudaErrorNoKernelImageForDevice
# for images the installed libnccl lacks (Debian's libnccl on the H100: 4 such reports inside
# pncclCommInitAll, none from our code), so memcheck runs those cases with API-error reports off;
# its memory-access checks still run on them, and every other tool checks them in full.
set -uo pipefail
SAN=$1 TOOL=$2 BIN=$3 LOG=$4
extra=()
[ "$TOOL" = racecheck ] && extra=(--racecheck-report all)
: >"$LOG"
total=0
status=0
for part in plain nccl; do
  if [ $part = plain ]; then filter='*Sanitizer*:-*SanitizerNccl*'; else filter='*SanitizerNccl*'; fi
  "$BIN" --gtest_list_tests --gtest_filter="$filter" 2>/dev/null | grep -q '^  ' || continue
  api=()
  [ $part = nccl ] && [ "$TOOL" = memcheck ] && api=(--report-api-errors no)
  echo "### $TOOL $part: --gtest_filter=$filter ${api[*]}" >>"$LOG"
  "$SAN" --tool "$TOOL" "${extra[@]}" "${api[@]}" --error-exitcode 3 "$BIN" --gtest_filter="$filter" >>"$LOG" 2>&1
  rc=$?
  n=$(grep -Eo '(ERROR|RACECHECK) SUMMARY: [0-9]+' "$LOG" | grep -Eo '[0-9]+$' | tail -1)
  n=${n:-0}
  total=$((total + n))
  if [ $rc -ne 0 ] || [ "$n" != 0 ]; then status=1; fi
done
echo "$total"
exit $status
