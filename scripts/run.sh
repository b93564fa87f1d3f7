#!/usr/bin/env bash
# Sets up and builds (scripts/setup.sh), then runs the main job: `fusedmoe run` on the default
# preset (qwen3.5-35b-a3b, 128 tokens). Extra arguments go to `fusedmoe run`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
exec "${FMOE_BUILD_DIR:-build}/fusedmoe" run "$@"
