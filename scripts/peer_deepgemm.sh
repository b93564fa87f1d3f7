#!/usr/bin/env bash
# DeepGEMM as a peer benchmark (python/bench/deepgemm_peer.py); it is not a dependency.
#   scripts/peer_deepgemm.sh pack OUT.tar.xz [MIRRORS]   (here, with network: from git mirrors)
#   scripts/peer_deepgemm.sh build TARBALL DIR           (on the GPU machine: no network)
# pack: DeepGEMM's newest mirrored commit plus the include/ trees of the CUTLASS and fmt commits
# it pins as submodules, in one ~1.3 MB archive (MIRRORS: a folder holding bare or normal clones
# named deepseek-ai+DeepGEMM, NVIDIA+cutlass, fmtlib+fmt, each with repo/ inside, as the
# session tool `fetch` leaves them under /work/.mirror; default /work/.mirror).
# build: extracts it into DIR, links CUTLASS's headers where DeepGEMM's JIT looks for them and
# builds the extension in place (~90 s on 16 cores; CXX=/usr/bin/g++ there, the default wrapper
# breaks shared objects). Then: PYTHONPATH=DIR/DeepGEMM python3 python/bench/deepgemm_peer.py ...
set -euo pipefail
cmd=${1:-}
case "$cmd" in
  pack)
    out=$2 mirrors=${3:-/work/.mirror}
    dg=$mirrors/deepseek-ai+DeepGEMM/repo cu=$mirrors/NVIDIA+cutlass/repo fm=$mirrors/fmtlib+fmt/repo
    for r in "$dg" "$cu" "$fm"; do
      git -C "$r" rev-parse HEAD >/dev/null 2>&1 || { echo "peer_deepgemm: no git mirror at $r" >&2; exit 1; }
    done
    pin() { git -C "$dg" ls-tree HEAD "third-party/$1" | awk '{print $3}'; }
    cu_pin=$(pin cutlass) fm_pin=$(pin fmt)
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/DeepGEMM/third-party/cutlass" "$tmp/DeepGEMM/third-party/fmt"
    git -C "$dg" archive HEAD | tar x -C "$tmp/DeepGEMM"
    # Only include/: the rest of these repositories is not needed (and large files may be absent
    # from a mirror, which would stop a whole-tree archive; git may still print "invalid object"
    # for one of them while archiving include/ completely, exit status 0).
    git -C "$cu" archive "$cu_pin" include | tar x -C "$tmp/DeepGEMM/third-party/cutlass"
    git -C "$fm" archive "$fm_pin" include | tar x -C "$tmp/DeepGEMM/third-party/fmt"
    tar cJf "$out" -C "$tmp" DeepGEMM
    echo "peer_deepgemm: DeepGEMM $(git -C "$dg" rev-parse --short HEAD), CUTLASS ${cu_pin:0:7}, fmt ${fm_pin:0:7} -> $out"
    ;;
  build)
    tarball=$2 dir=$3
    mkdir -p "$dir"
    tar xJf "$tarball" -C "$dir"
    cd "$dir/DeepGEMM"
    ln -sf "$PWD/third-party/cutlass/include/cutlass" deep_gemm/include/
    ln -sf "$PWD/third-party/cutlass/include/cute" deep_gemm/include/
    CXX=${CXX:-/usr/bin/g++} python3 setup.py build_ext --inplace
    ;;
  *)
    sed -n 2,11p "$0" >&2
    exit 2
    ;;
esac
