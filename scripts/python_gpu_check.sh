#!/usr/bin/env bash
# The Python package on a GPU machine with no network: builds and installs it with pip, offline and
# without build isolation (CXX=/usr/bin/g++ unless CXX is set), into a folder of its own, then runs
# the whole pytest suite (the GPU tests run for real there), the host-overhead benchmark and the
# loading-rate benchmark (python/bench/load.py).
#   scripts/python_gpu_check.sh [--no-build]
# Build dependencies: nanobind and scikit-build-core wheels carried in .whl/ (docs/python.md says
# how to fetch them) are installed first, into /tmp/fmoe-build-deps; without them the ones the
# machine has are used. CMake >= 3.24, ninja, nvcc and nlohmann-json must be there (as for
# scripts/gpu_check.sh). Prints one summary line per step; exits nonzero if any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."

PY=${FMOE_PYTHON:-python3}
SITE=${FMOE_PY_SITE:-/tmp/fmoe-py-site}
BUILD=1
[ "${1:-}" = "--no-build" ] && BUILD=0
export CXX=${CXX:-/usr/bin/g++}
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi

summary=()
status=0
note() { summary+=("$1"); echo "[python_gpu_check] $1"; }

if [ "$BUILD" = 1 ]; then
  if ls .whl/nanobind-*.whl .whl/scikit_build_core-*.whl >/dev/null 2>&1; then
    rm -rf /tmp/fmoe-build-deps
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fmoe-build-deps \
      .whl/nanobind-*.whl .whl/scikit_build_core-*.whl || { echo "installing the carried wheels failed"; exit 1; }
    export PYTHONPATH=/tmp/fmoe-build-deps${PYTHONPATH:+:$PYTHONPATH}
    note "build deps: carried wheels ($(cd .whl && ls nanobind-*.whl scikit_build_core-*.whl | tr '\n' ' '))"
  else
    note "build deps: the machine's own (no wheels in .whl/)"
  fi
  if ! "$PY" -c "import nanobind, scikit_build_core" 2>/dev/null; then
    note "build: FAILED: nanobind or scikit-build-core missing for $PY (carry their wheels: docs/python.md)"
    exit 1
  fi
  note "python $("$PY" -c 'import sys; print(sys.version.split()[0])'), nanobind $("$PY" -c 'import nanobind; print(nanobind.__version__)'), scikit-build-core $("$PY" -c 'import scikit_build_core; print(scikit_build_core.__version__)'), CXX=$CXX"
  rm -rf "$SITE"
  mkdir -p build-py
  log=build-py/gpu-build.log
  if "$PY" -m pip install --no-index --no-deps --no-build-isolation --target "$SITE" \
       -C build-dir=build-py/gpu . >"$log" 2>&1; then
    note "build: ok (pip install --no-build-isolation into $SITE; log $log)"
  else
    tail -40 "$log"
    note "build: FAILED (log: $log)"
    exit 1
  fi
fi
mkdir -p build-py
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}

# 1. Every Python test; the GPU ones run here (a skip would print its reason).
if "$PY" -m pytest -rs -p no:cacheprovider python/tests 2>&1 | tee build-py/gpu-pytest.log; then
  note "pytest: $(tail -1 build-py/gpu-pytest.log)"
else
  status=1
  note "pytest: FAILED: $(tail -1 build-py/gpu-pytest.log)"
fi

# 2. Host overhead of the Python call against the C++ call (budget 20 us).
if "$PY" python/bench/host_overhead.py 2>&1 | tee build-py/gpu-overhead.log; then
  note "overhead: $(grep 'extra host time' build-py/gpu-overhead.log | sed 's/^ *//')"
else
  status=1
  note "overhead: FAILED: $(tail -1 build-py/gpu-overhead.log | sed 's/^ *//')"
fi
if "$PY" python/bench/host_overhead.py --preset deepseek-v3 --tokens 8 >build-py/gpu-overhead2.log 2>&1; then
  note "overhead (deepseek-v3, T=8): $(grep 'extra host time' build-py/gpu-overhead2.log | sed 's/^ *//')"
else
  status=1
  note "overhead (deepseek-v3, T=8): FAILED: $(tail -1 build-py/gpu-overhead2.log | sed 's/^ *//')"
fi

# 3. Loading rate of a DeepSeek-V3-shaped FP8 layer (11.3 GB) from the page cache to the GPU
#    (target >= 2 GB/s); FMOE_LOAD_DIR places the checkpoint (default: a temporary folder).
if "$PY" python/bench/load.py ${FMOE_LOAD_DIR:+--dir "$FMOE_LOAD_DIR"} 2>&1 | tee build-py/gpu-load.log; then
  note "load: $(grep -E '^(PASS|FAIL)' build-py/gpu-load.log)"
else
  status=1
  note "load: FAILED: $(tail -1 build-py/gpu-load.log)"
fi

# On the device machine of this workplace, $OUT is a folder whose files come back.
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp build-py/gpu-*.log "$OUT"/ 2>/dev/null; fi

echo
echo "python_gpu_check summary:"
for s in "${summary[@]}"; do echo "  $s"; done
exit $status
