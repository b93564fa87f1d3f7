#!/usr/bin/env bash
# Builds the binaries of several patch stacks on this machine, for one device call that tests and
# times them all (scripts/variants_check.sh). Each variant is the clean tree plus its patches,
# applied in order. Its stripped fusedmoe and test_layer_gpu (BUILD_TARGETS: another list) go xz-compressed into
# OUTDIR/NAME/, about 3 MB each, so all of them fit the device's carry limit. "base" (no patches)
# is always built first. The build directory is the usual one (FMOE_BUILD_DIR, default build):
# each variant recompiles only what its patches touch, and the tree is clean again at the end.
#   scripts/build_variants.sh OUTDIR [NAME=PATCH[,PATCH...] ...]
#   e.g. scripts/build_variants.sh .device_carry/v dyn=docs/wip/dynamic_items.diff \
#          dyn_half=docs/wip/dynamic_items.diff,docs/wip/interleaved_half_pairs_on_dynamic.diff
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$1; shift
BUILD=${FMOE_BUILD_DIR:-build}
read -r -a TARGETS <<<"${BUILD_TARGETS:-fusedmoe test_layer_gpu}"  # (env: other test binaries too)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
  echo "build_variants: the tree has uncommitted changes; commit or stash them first" >&2
  exit 2
fi
mkdir -p "$OUT"
applied=()
revert() {  # undo this variant's patches, last first
  local i
  for ((i = ${#applied[@]} - 1; i >= 0; i--)); do git apply -R "${applied[$i]}"; done
  applied=()
}
trap revert EXIT
build_one() {  # name
  local name=$1 t f
  ninja -C "$BUILD" "${TARGETS[@]}" >"$OUT/$name.build.log" 2>&1 ||
    { tail -30 "$OUT/$name.build.log"; echo "build_variants: $name does not build" >&2; exit 1; }
  mkdir -p "$OUT/$name"
  for t in "${TARGETS[@]}"; do
    f=$(find "$BUILD" -maxdepth 2 -name "$t" -type f | head -1)
    strip -o "$OUT/$name/$t" "$f"
    xz -T2 -3 -f "$OUT/$name/$t"
  done
  echo "[build_variants] $name: $(du -sh "$OUT/$name" | cut -f1) ($(grep -c 'spill' "$OUT/$name.build.log" || true) spill lines in what it rebuilt)"
}
build_one base
for spec in "$@"; do
  name=${spec%%=*}
  IFS=, read -r -a patches <<<"${spec#*=}"
  for p in "${patches[@]}"; do
    git apply "$p"
    applied+=("$p")
  done
  build_one "$name"
  revert
done
trap - EXIT
git status --short
