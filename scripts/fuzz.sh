#!/usr/bin/env bash
# The config.json and safetensors readers under AddressSanitizer + UndefinedBehaviorSanitizer:
#   1. the CPU tests of tests/config and tests/checkpoint/test_safetensors (GoogleTest) built with
#      both sanitizers, run once;
#   2. a bounded libFuzzer run of tests/fuzz/fuzz_config.cpp, seeded with the real config.json of
#      every supported family (tests/config/data);
#   3. a bounded libFuzzer run of tests/fuzz/fuzz_safetensors.cpp (the header parser on whole
#      files in memory), seeded with tests/fuzz/safetensors_seeds.
# Fails (nonzero) on any finding: a test failure, a sanitizer report, a crash, a hang (-timeout),
# memory above -rss_limit_mb, a leak, an exception other than fusedmoe::Error, or an unsafe
# message. Only the CPU sources the reader needs are built (clang; no CUDA, no CMake).
#
#   FMOE_FUZZ_SECONDS  config fuzzing time in seconds (default 60)
#   FMOE_FUZZ_ST_SECONDS  safetensors fuzzing time in seconds (default 60; two fork workers:
#                         ~1.1M executions in 50 s on 2 cores, the issue's >= 1M)
#   FMOE_FUZZ_DIR      build and corpus directory (default build-fuzz; kept between runs)
# Installs clang and its fuzzer/sanitizer runtimes, GoogleTest, nlohmann-json and the locale
# sources (for the locale test) with apt when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "[fuzz] $*"; }
have() { command -v "$1" >/dev/null 2>&1; }
SUDO=""
if [ "$(id -u)" != 0 ] && have sudo; then SUDO="sudo"; fi
apt_install() {
  have apt-get || return 1
  log "apt-get install $*"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null ||
    { $SUDO apt-get update -q >/dev/null && $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@" >/dev/null; }
}

SECONDS_TOTAL=${FMOE_FUZZ_SECONDS:-60}
ST_SECONDS=${FMOE_FUZZ_ST_SECONDS:-60}
DIR=${FMOE_FUZZ_DIR:-build-fuzz}
mkdir -p "$DIR/obj" "$DIR/corpus" "$DIR/findings"

# ---- tools -----------------------------------------------------------------------------------
find_clang() {
  for c in clang++ clang++-19 clang++-18 clang++-17 clang++-16 clang++-15 clang++-14; do
    if have "$c"; then echo "$c"; return 0; fi
  done
  return 1
}
probe_fuzzer() {  # can $1 link a libFuzzer target with ASan + UBSan?
  echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
    "$1" -x c++ - -fsanitize=fuzzer,address,undefined -o "$DIR/probe" >/dev/null 2>&1
}
CXX=$(find_clang || true)
if [ -z "$CXX" ] || ! probe_fuzzer "$CXX"; then
  apt_install clang libclang-rt-dev || apt_install clang ||
    { echo "clang with libFuzzer is missing and could not be installed" >&2; exit 1; }
  hash -r
  CXX=$(find_clang) || { echo "clang++ not found after installing clang" >&2; exit 1; }
  probe_fuzzer "$CXX" || { echo "$CXX cannot link -fsanitize=fuzzer,address,undefined" >&2; exit 1; }
fi
if [ ! -f /usr/include/gtest/gtest.h ] && [ ! -f /usr/local/include/gtest/gtest.h ]; then
  apt_install libgtest-dev || { echo "GoogleTest is missing and could not be installed" >&2; exit 1; }
fi
if [ ! -f /usr/include/nlohmann/json.hpp ] && [ ! -f /usr/local/include/nlohmann/json.hpp ]; then
  apt_install nlohmann-json3-dev || { echo "nlohmann-json is missing and could not be installed" >&2; exit 1; }
fi
# tests/config/test_locale.cpp builds de_DE and ps_AF with localedef from these sources.
if [ ! -f /usr/share/i18n/locales/de_DE ] || [ ! -f /usr/share/i18n/locales/ps_AF ]; then
  apt_install locales || { echo "the locales package is missing and could not be installed" >&2; exit 1; }
fi
log "compiler: $($CXX --version | head -1)"

# ---- build -----------------------------------------------------------------------------------
# The reader's objects carry the fuzzer's coverage instrumentation (harmless in the test binary).
LAUNCH=""
if have ccache; then LAUNCH="ccache"; fi
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CXXFLAGS="-std=c++20 -g -O1 -Wall -Wextra -Wno-unused-parameter $SAN -Iinclude -Isrc -I."
LIB_SOURCES="src/common/json.cpp src/common/text.cpp src/common/error.cpp src/config/config.cpp src/config/hf_config.cpp src/checkpoint/safetensors.cpp"
TEST_SOURCES="tests/config/test_config.cpp tests/config/test_json.cpp tests/config/test_locale.cpp tests/checkpoint/test_safetensors.cpp"
obj_of() { echo "$DIR/obj/$(echo "$1" | tr / _).o"; }
compile_all() {  # compile_all "<extra flags>" sources...: in parallel; fails if any fails
  local flags=$1; shift
  local pids=() s p rc=0
  for s in "$@"; do
    $LAUNCH "$CXX" $CXXFLAGS $flags -c "$s" -o "$(obj_of "$s")" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
log "building the reader, its tests and the fuzz target with ASan + UBSan"
compile_all "-fsanitize=fuzzer-no-link" $LIB_SOURCES
compile_all "" $TEST_SOURCES
lib_objects=() test_objects=()
for s in $LIB_SOURCES; do lib_objects+=("$(obj_of "$s")"); done
for s in $TEST_SOURCES; do test_objects+=("$(obj_of "$s")"); done
"$CXX" $SAN -fsanitize=fuzzer-no-link "${test_objects[@]}" "${lib_objects[@]}" \
  -lgtest_main -lgtest -lpthread -o "$DIR/test_config_san"
"$CXX" $CXXFLAGS -fsanitize=fuzzer tests/fuzz/fuzz_config.cpp "${lib_objects[@]}" \
  -o "$DIR/fuzz_config"
"$CXX" $CXXFLAGS -fsanitize=fuzzer tests/fuzz/fuzz_safetensors.cpp "${lib_objects[@]}" \
  -o "$DIR/fuzz_safetensors"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

# ---- 1. the config tests under the sanitizers ---------------------------------------------------
# ParsingMemoryStaysBounded measures RSS, which ASan's shadow memory and quarantine inflate; it
# runs in the normal (ctest) build.
log "tests/config and the safetensors tests under ASan + UBSan"
"$DIR/test_config_san" --gtest_brief=1 --gtest_filter='-Json.ParsingMemoryStaysBounded'

# ---- 2. the bounded fuzz run --------------------------------------------------------------------
# fuzz <target> <log> <corpus> <seeds> [libFuzzer options...]: a bounded run of $DIR/<target>;
# fails on a nonzero exit or any finding, printing the log's tail.
fuzz() {
  local target=$1 logfile=$2 corpus=$3 seeds=$4 status=0 findings
  shift 4
  mkdir -p "$corpus"
  rm -f "$DIR/findings/"*
  "$DIR/$target" "$corpus" "$seeds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=1024 \
    -max_len=4096 -artifact_prefix="$DIR/findings/" -print_final_stats=1 "$@" \
    >"$logfile" 2>&1 || status=$?
  # Single-process runs end with stat:: lines; fork mode reports "#<executions>: cov: ..." per
  # job, the last one being the total.
  grep -E "^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)|^#[0-9]+ +DONE" \
    "$logfile" | sed 's/^/[fuzz]   /' || true
  grep -E "^#[0-9]+: " "$logfile" | tail -1 | sed 's/^/[fuzz]   executions /' || true
  findings=$(ls "$DIR/findings" 2>/dev/null | wc -l)
  if [ "$status" != 0 ] || [ "$findings" != 0 ]; then
    tail -n 60 "$logfile" >&2
    echo "[fuzz] FAILED: libFuzzer exit $status, $findings finding(s) in $DIR/findings" \
         "(reproduce: $DIR/$target <file>)" >&2
    exit 1
  fi
}
log "fuzzing config_from_hf_json_text for ${SECONDS_TOTAL}s (corpus $DIR/corpus, seeds tests/config/data)"
fuzz fuzz_config "$DIR/fuzz.log" "$DIR/corpus" tests/config/data \
  -dict=tests/fuzz/config.dict -max_total_time="$SECONDS_TOTAL"
log "no findings"

# ---- 3. the safetensors header parser ------------------------------------------------------------
log "fuzzing parse_safetensors_header for ${ST_SECONDS}s (corpus $DIR/corpus_st, seeds tests/fuzz/safetensors_seeds)"
fuzz fuzz_safetensors "$DIR/fuzz_st.log" "$DIR/corpus_st" tests/fuzz/safetensors_seeds \
  -fork=2 -max_total_time="$ST_SECONDS"
log "safetensors: no findings"
