#!/usr/bin/env bash
# The GPU machine's check, run whenever device code changes: builds with CUDA, runs every test
# (the gpu-labelled ones run for real there), then the sanitizer cases (GoogleTest filter
# *Sanitizer*: shapes that wrap every k-stage and meta ring, use BLOCK_T=128 and several token
# tiles per expert) under all four compute-sanitizer tools. Prints one summary line per step and
# exits nonzero if any step failed.
#   scripts/gpu_check.sh [--no-build] [--no-tests | --direct] [--tools "memcheck racecheck"]
# --no-tests skips step 1 (every test): for a second call on the same build that only runs the
# sanitizer tools the first call left out (the tests take ~100 s of device time on an H200).
# --direct runs each $FMOE_BUILD_DIR/tests/test_*_gpu binary itself instead of ctest, for a folder
# of binaries built elsewhere and carried stripped (no CTest files there; the CPU tests run where
# they were built): one line per binary, then the count. With --no-build.
# FMOE_NO_SETUP=1 builds with CMake directly instead of scripts/setup.sh (no apt there).
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${FMOE_BUILD_DIR:-build}
TOOLS="memcheck racecheck synccheck initcheck"
BUILD=1
TESTS=1
DIRECT=0
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) BUILD=0 ;;
    --no-tests) TESTS=0 ;;
    --direct) DIRECT=1 ;;
    --tools) TOOLS="$2"; shift ;;
    *) echo "usage: scripts/gpu_check.sh [--no-build] [--no-tests | --direct] [--tools \"memcheck ...\"]" >&2; exit 2 ;;
  esac
  shift
done

summary=()
status=0
note() { summary+=("$1"); echo "[gpu_check] $1"; }

if [ "$BUILD" = 1 ]; then
  # The GPU machines have no package registry: there the build goes straight to CMake (what
  # setup.sh would install must already be present, e.g. copied in by the caller).
  build() {
    if [ "${FMOE_NO_SETUP:-0}" = 1 ]; then
      cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release ${FMOE_CMAKE_ARGS:-} &&
        cmake --build "$BUILD_DIR" -j "$(nproc)"
    else
      ./scripts/setup.sh
    fi
  }
  if ! build >"$BUILD_DIR.setup.log" 2>&1; then
    tail -40 "$BUILD_DIR.setup.log"
    echo "[gpu_check] build: FAILED (log: $BUILD_DIR.setup.log)"
    exit 1
  fi
  note "build: ok ($(grep -c 'ptxas warning' "$BUILD_DIR.setup.log") ptxas warnings)"
fi

SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)

# 1. Every test, GPU ones included.
if [ "$TESTS" = 0 ]; then
  note "tests: skipped (--no-tests)"
elif [ "$DIRECT" = 1 ]; then
  n=0
  fails=0
  t0=$SECONDS
  for b in "$BUILD_DIR"/tests/test_*_gpu; do
    [ -x "$b" ] || continue
    n=$((n + 1))
    log="$BUILD_DIR/$(basename "$b").log"
    t=$SECONDS
    timeout 300 "$b" >"$log" 2>&1
    rc=$?
    [ $rc = 0 ] || fails=$((fails + 1))  # (77: every test skipped, no GPU: a failure here too)
    echo "[gpu_check] $(basename "$b") rc=$rc $((SECONDS - t)) s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) \] [0-9]+ tests?' "$log" | tr '\n' ' ')"
  done
  [ $fails = 0 ] || status=1
  note "tests: $((n - fails)) of $n GPU test binaries passed, run directly ($((SECONDS - t0)) s)"
elif (cd "$BUILD_DIR" && ctest --output-on-failure >ctest.log 2>&1); then
  note "tests: $(grep -E 'tests passed' "$BUILD_DIR/ctest.log")"
else
  status=1
  grep -E "Failed|\*\*\*|tests passed" "$BUILD_DIR/ctest.log" | tail -20
  note "tests: FAILED: $(grep -E 'tests passed' "$BUILD_DIR/ctest.log")"
fi

# 2. The sanitizer cases under each tool.
bins=()
for b in "$BUILD_DIR"/tests/test_*_gpu; do
  [ -x "$b" ] || continue
  if "$b" --gtest_list_tests --gtest_filter='*Sanitizer*' 2>/dev/null | grep -q '^  '; then bins+=("$b"); fi
done
if [ -z "$SAN" ]; then
  note "sanitizers: compute-sanitizer not found"
  status=1
elif [ ${#bins[@]} -eq 0 ]; then
  note "sanitizers: no test binary has *Sanitizer* cases"
  status=1
else
  for tool in $TOOLS; do
    total=0
    failed=0
    for b in "${bins[@]}"; do
      log="$BUILD_DIR/sanitizer_${tool}_$(basename "$b").log"
      n=$(scripts/sanitize_binary.sh "$SAN" "$tool" "$b" "$log")
      rc=$?
      total=$((total + ${n:-0}))
      if [ $rc -ne 0 ]; then
        failed=1
        echo "[gpu_check] $tool on $(basename "$b"): rc $rc, $n reports; first lines:"
        grep -E "=========" "$log" | head -20
      fi
    done
    if [ $failed = 0 ]; then
      note "$tool: 0 errors/hazards on ${#bins[@]} binaries (*Sanitizer* cases)"
    else
      status=1
      note "$tool: FAILED ($total reports; logs in $BUILD_DIR/sanitizer_${tool}_*.log)"
    fi
  done
fi

echo
echo "gpu_check summary:"
for s in "${summary[@]}"; do echo "  $s"; done
exit $status
