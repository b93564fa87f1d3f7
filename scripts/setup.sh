#!/usr/bin/env bash
# Installs what a fresh machine lacks to build fusedmoe (cmake >= 3.24, ninja, a C++20 g++,
# GoogleTest, NCCL with CUDA; for the Python package nanobind, scikit-build-core, numpy and
# pytest through pip), then configures and builds into build/ (the Python extension included:
# build/python/fusedmoe). Safe to run again: it installs nothing that is already there and
# rebuilds incrementally. CUDA (nvcc) is used when present; without it the build is the CPU
# reference only and says so.
# FMOE_NO_PYTHON=1 leaves the Python package out; FMOE_PYTHON names the interpreter (python3).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[setup] $*"; }
have() { command -v "$1" >/dev/null 2>&1; }

SUDO=""
if [ "$(id -u)" != 0 ] && have sudo; then SUDO="sudo"; fi
apt_install() {
  if have apt-get; then
    log "apt-get install $*"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null ||
      { $SUDO apt-get update -q >/dev/null && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
  else
    return 1
  fi
}

cmake_ok() {
  have cmake || return 1
  local v; v=$(cmake --version | head -1 | awk '{print $3}')
  [ "$(printf '%s\n3.24\n' "$v" | sort -V | head -1)" = "3.24" ]
}

if ! have g++; then apt_install g++ || { echo "g++ is missing and apt-get is unavailable" >&2; exit 1; }; fi
if ! cmake_ok; then
  apt_install cmake || true
  if ! cmake_ok; then log "pip install cmake (apt's is older than 3.24)"; python3 -m pip install -q "cmake>=3.24"; hash -r; fi
fi
if ! have ninja; then apt_install ninja-build || python3 -m pip install -q ninja; hash -r; fi
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  apt_install libgtest-dev || { echo "GoogleTest is missing and could not be installed" >&2; exit 1; }
fi
if [ ! -f /usr/include/nlohmann/json.hpp ] && [ ! -f /usr/local/include/nlohmann/json.hpp ]; then
  apt_install nlohmann-json3-dev || { echo "nlohmann-json is missing and could not be installed" >&2; exit 1; }
fi
# tests/config/test_locale.cpp builds de_DE and ps_AF with localedef from the locales sources.
if [ ! -f /usr/share/i18n/locales/de_DE ] || [ ! -f /usr/share/i18n/locales/ps_AF ]; then
  apt_install locales || { echo "the locales package is missing and could not be installed" >&2; exit 1; }
fi
# The Python package (python/): nanobind (the binding library), scikit-build-core (pip's build
# backend for CMake projects, for `pip install .`), numpy (the CPU helpers' arrays) and pytest.
# What cannot be had leaves the package out with a warning (the C++ build goes on; scripts/test.sh
# then fails its Python step, so CI sees it).
PY=${FMOE_PYTHON:-python3}
PY_CMAKE_ARGS=""
python_setup() {
  py_ok() { "$PY" -c "import nanobind, scikit_build_core, numpy, pytest" 2>/dev/null; }
  py_headers() { "$PY" -c "import os, sysconfig; assert os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))" 2>/dev/null; }
  have "$PY" || apt_install python3 python3-pip || { log "WARNING: no $PY: building without the Python package"; return; }
  if ! py_ok; then
    log "pip install nanobind scikit-build-core numpy pytest"
    "$PY" -m pip install -q "nanobind>=2.4" "scikit-build-core>=0.10" numpy pytest ||
      { log "WARNING: pip could not install the Python package's dependencies: building without it"; return; }
  fi
  if ! py_headers; then apt_install python3-dev || true; fi
  py_headers || { log "WARNING: Python.h of $PY is missing (python3-dev): building without the Python package"; return; }
  PY_CMAKE_ARGS="-DFMOE_BUILD_PYTHON=ON -DPython_EXECUTABLE=$(command -v "$PY")"
}
if [ "${FMOE_NO_PYTHON:-0}" != 1 ]; then python_setup; fi
if ! have nvcc && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
if have nvcc; then log "nvcc: $(nvcc --version | tail -1)"; else log "nvcc not found: building the CPU reference only"; fi
# NCCL, for the expert-parallel layer's all-to-alls (CMakeLists.txt finds it): the CUDA toolkit's
# copy, NCCL_ROOT's, or apt's libnccl-dev (NVIDIA's repository). Without it the build leaves the
# EP layer out (-DFMOE_WITH_NCCL=OFF) and says so.
NCCL_CMAKE_ARGS=""
if have nvcc && [ -z "${NCCL_ROOT:-}" ]; then
  cuda_root=$(dirname "$(dirname "$(command -v nvcc)")")
  if [ ! -f "$cuda_root/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ] && [ ! -f /usr/local/include/nccl.h ]; then
    apt_install libnccl-dev || {
      log "WARNING: NCCL is missing and could not be installed: building without the expert-parallel layer"
      NCCL_CMAKE_ARGS="-DFMOE_WITH_NCCL=OFF"
    }
  fi
fi

BUILD_DIR=${FMOE_BUILD_DIR:-build}
JOBS=${FMOE_JOBS:-$(nproc)}
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release $PY_CMAKE_ARGS $NCCL_CMAKE_ARGS ${FMOE_CMAKE_ARGS:-} >/dev/null
elif [ -n "$PY_CMAKE_ARGS" ] && ! grep -q '^FMOE_BUILD_PYTHON:BOOL=ON$' "$BUILD_DIR/CMakeCache.txt"; then
  log "turning the Python extension on in $BUILD_DIR"
  cmake -S . -B "$BUILD_DIR" $PY_CMAKE_ARGS >/dev/null
fi
log "building in $BUILD_DIR with $JOBS jobs"
cmake --build "$BUILD_DIR" -j "$JOBS"
