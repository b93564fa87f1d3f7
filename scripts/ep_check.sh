#!/usr/bin/env bash
# The expert-parallel layer's checks on a GPU machine (one GPU is enough; issue 13): builds the EP
# targets, runs the EP tests (and the single-GPU layer's, which the EP layer runs inside; with
# several GPUs the multi-GPU case: rank processes at R = 2 and R = all), the CLI's (`run --ep`,
# `bench --op ep_layer`: the EP cases of test_cli, the launcher's test, and both commands with one
# rank per GPU present: routed only, a gated shared expert, chunks, DeepSeek-V3 at T = 8192), then
# the *Sanitizer* cases of both EP binaries under the four compute-sanitizer tools.
# scripts/ep_bench.sh times issue 13's table. One summary
# line per step; exits nonzero if any step failed. A binary that skips every case (exit 77) counts
# as a failure here: this script is for machines with a GPU.
#   scripts/ep_check.sh [--no-build] [--tools "memcheck racecheck"]
# Environment: FMOE_EP_STEP_TIMEOUT (s, default 300: a step that hangs, e.g. in NCCL, is ended
# and counts as failed, exit 124), FMOE_BUILD_DIR (build), FMOE_CMAKE_ARGS, NCCL_ROOT (CMake also
# finds the toolkit's NCCL and PyTorch's pip copy by itself).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

BUILD_DIR=${FMOE_BUILD_DIR:-build}
STEP_TIMEOUT=${FMOE_EP_STEP_TIMEOUT:-300}
TOOLS="memcheck racecheck synccheck initcheck"
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0 ;;
    --tools) TOOLS="$2"; shift ;;
    *) echo "usage: scripts/ep_check.sh [--no-build] [--tools \"memcheck ...\"]" >&2; exit 2 ;;
  esac
  shift
done
# NVLink multicast stays off on the lent machines (EpCommunicator sets it too when unset).
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}

summary=()
status=0
note() { summary+=("$1"); echo "[ep_check] $1"; }
TESTS="test_ep_plan test_ep_kernels_gpu test_ep_layer_gpu test_layer_gpu test_ep_launch"

if [ "$BUILD" = 1 ]; then
  # shellcheck disable=SC2086  # FMOE_CMAKE_ARGS holds several arguments
  if ! cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${FMOE_CMAKE_ARGS:-} \
       >"$BUILD_DIR.ep_configure.log" 2>&1; then
    tail -20 "$BUILD_DIR.ep_configure.log"
    echo "[ep_check] configure: FAILED"
    exit 1
  fi
  if ! grep -q "fusedmoe: NCCL " "$BUILD_DIR.ep_configure.log"; then
    grep -i -A3 "nccl" "$BUILD_DIR.ep_configure.log"
    echo "[ep_check] configure: NCCL not found (set NCCL_ROOT): the EP layer is not built"
    exit 1
  fi
  note "configure: $(grep -o 'fusedmoe: NCCL .*' "$BUILD_DIR.ep_configure.log")"
  # shellcheck disable=SC2086  # TESTS is a list of targets
  if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target $TESTS fusedmoe test_cli >"$BUILD_DIR.ep_build.log" 2>&1; then
    grep -E "error" "$BUILD_DIR.ep_build.log" | head -20
    echo "[ep_check] build: FAILED (log: $BUILD_DIR.ep_build.log)"
    exit 1
  fi
  note "build: ok"
fi

for t in $TESTS; do
  log="$BUILD_DIR/ep_check_$t.log"
  timeout "$STEP_TIMEOUT" "$BUILD_DIR/tests/$t" >"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    note "$t: passed ($(grep -Eo '[0-9]+ tests? from [0-9]+ test suites? ran' "$log" | tail -1))"
  else
    status=1
    grep -E "FAILED|Failure|error|SKIPPED" "$log" | head -20
    note "$t: FAILED (exit $rc; 77 = every case skipped; log: $log)"
  fi
done

# The CLI: test_cli's EP cases (one rank over NCCL in its own process), then run --ep and
# bench --op ep_layer by hand with one rank per GPU (R = 1 on a one-GPU machine).
log="$BUILD_DIR/ep_check_test_cli.log"
timeout "$STEP_TIMEOUT" "$BUILD_DIR/tests/test_cli" --gtest_filter='Cli.*Ep*' >"$log" 2>&1
rc=$?
if [ $rc -eq 0 ] && ! grep -q "SKIPPED \] Cli.RunEpOneRank" "$log"; then
  note "test_cli Cli.*Ep*: passed"
else
  status=1
  grep -E "FAILED|Failure|SKIPPED" "$log" | head -20
  note "test_cli Cli.*Ep*: FAILED or skipped (exit $rc; log: $log)"
fi
GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$GPUS" -ge 1 ] || GPUS=1
for args in "run --ep $GPUS --preset qwen3-30b-a3b --tokens 128 --mode deterministic" \
            "run --ep $GPUS --preset qwen3-30b-a3b --tokens 128 --mode fast" \
            "run --ep $GPUS --preset qwen3.5-35b-a3b --tokens 128 --mode deterministic" \
            "run --ep $GPUS --preset qwen3.5-35b-a3b --tokens 300 --chunks 3" \
            "run --ep $GPUS --preset deepseek-v3 --tokens 8192" \
            "bench --op ep_layer --ep $GPUS --tokens 128,8192 --json $BUILD_DIR/ep_layer.json"; do
  log="$BUILD_DIR/ep_check_cli_$(echo "$args" | tr -c 'a-z0-9\n' '_' | cut -c1-60).log"
  # shellcheck disable=SC2086  # args is a command line
  timeout "$STEP_TIMEOUT" "$BUILD_DIR/fusedmoe" $args >"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    note "fusedmoe $args: ok (log: $log)"
  else
    status=1
    tail -20 "$log"
    note "fusedmoe $args: FAILED (exit $rc; log: $log)"
  fi
done

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
if [ -z "$SAN" ]; then
  note "sanitizers: compute-sanitizer not found"
  status=1
else
  for tool in $TOOLS; do
    for t in test_ep_kernels_gpu test_ep_layer_gpu; do
      log="$BUILD_DIR/ep_sanitizer_${tool}_$t.log"
      n=$(timeout "$STEP_TIMEOUT" scripts/sanitize_binary.sh "$SAN" "$tool" "$BUILD_DIR/tests/$t" "$log")
      rc=$?
      if [ $rc -eq 0 ]; then
        note "$tool $t: ${n:-0} errors"
      else
        status=1
        note "$tool $t: FAILED (exit $rc, ${n:-?} errors; log: $log; a report inside NCCL's own kernels is NCCL's)"
      fi
    done
  done
fi

echo "[ep_check] summary:"
printf '  %s\n' "${summary[@]}"
exit $status
