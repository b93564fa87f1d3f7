#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs the whole test suite under ctest. Then, when
# that build has the CUDA kernels, configures, builds and tests the build without them too
# (build-nocuda/, -DFMOE_WITH_CUDA=OFF: what a machine without nvcc gets), so both are tested on
# every run. After each ctest, the skipped test cases are listed with their reason (ctest itself
# prints only "***Skipped"); tests labelled gpu skip on machines without an sm_90 GPU.
# Then the Python package's tests (python/tests, pytest) against the extension in that build:
# the CPU ones run everywhere, the GPU ones skip with the reason without torch + an sm_90 GPU.
# Extra arguments go to both ctest runs (e.g. -L cpu, -R layer). Exit status: nonzero when
# either build, either ctest or pytest failed. FMOE_NO_PYTHON=1 leaves the Python package out.
# Environment: FMOE_BUILD_DIR (build), FMOE_NOCUDA_BUILD_DIR (build-nocuda), FMOE_JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/fuzz.sh  # config reader: its tests under ASan+UBSan, then a bounded (60 s) libFuzzer run

BUILD_DIR=${FMOE_BUILD_DIR:-build}
NOCUDA_DIR=${FMOE_NOCUDA_BUILD_DIR:-build-nocuda}
JOBS=${FMOE_JOBS:-$(nproc)}

# run_ctest <build dir> [ctest args...]: ctest, then the reasons of the cases that skipped
# (tests/test_main.cpp writes them to <build dir>/test-skips/<test>.txt).
run_ctest() {
  local dir=$1 rc=0
  shift
  rm -rf "$dir/test-skips"
  (cd "$dir" && ctest --output-on-failure "$@") || rc=$?
  local reports=("$dir"/test-skips/*.txt)
  if [ -e "${reports[0]}" ]; then
    echo "[test] skipped cases in $dir, with the reason:"
    cat "${reports[@]}" | sed 's/^/  /'
  fi
  return $rc
}

status=0
echo "[test] ctest in $BUILD_DIR"
run_ctest "$BUILD_DIR" "$@" || status=1

if grep -q '^FMOE_BUILT_WITH_CUDA:INTERNAL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  echo "[test] the build without CUDA, in $NOCUDA_DIR"
  if [ ! -f "$NOCUDA_DIR/build.ninja" ]; then
    cmake -G Ninja -S . -B "$NOCUDA_DIR" -DCMAKE_BUILD_TYPE=Release ${FMOE_CMAKE_ARGS:-} \
          -DFMOE_WITH_CUDA=OFF >/dev/null
  fi
  if cmake --build "$NOCUDA_DIR" -j "$JOBS"; then
    echo "[test] ctest in $NOCUDA_DIR"
    run_ctest "$NOCUDA_DIR" "$@" || status=1
  else
    echo "[test] the build without CUDA failed" >&2
    status=1
  fi
else
  echo "[test] $BUILD_DIR has no CUDA kernels: its ctest already covered the build without CUDA"
fi

if [ "${FMOE_NO_PYTHON:-0}" != 1 ]; then
  echo "[test] Python tests (pytest python/tests) against $BUILD_DIR/python"
  if [ ! -d "$BUILD_DIR/python/fusedmoe" ]; then
    echo "[test] $BUILD_DIR has no Python package (setup.sh said why above; FMOE_NO_PYTHON=1 skips it)" >&2
    status=1
  elif PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}" "${FMOE_PYTHON:-python3}" -m pytest -q -rs \
       -p no:cacheprovider python/tests; then
    :
  else
    echo "[test] Python tests FAILED" >&2
    status=1
  fi
fi

if [ $status -eq 0 ]; then echo "[test] all passed"; else echo "[test] FAILED (see above)" >&2; fi
exit $status
