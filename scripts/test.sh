#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs the whole test suite under ctest. Tests
# labelled gpu report SKIPPED with the reason on machines without an sm_90 GPU.
# Extra arguments go to ctest (e.g. -L cpu, -R layer).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/fuzz.sh  # config reader: its tests under ASan+UBSan, then a bounded (60 s) libFuzzer run
cd "${FMOE_BUILD_DIR:-build}"
exec ctest --output-on-failure "$@"
