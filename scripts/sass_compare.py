#!/usr/bin/env python3
"""Which kernels of two builds have the same machine code: cuobjdump -sass of both, each
function's instructions with addresses and immediates masked, compared by mangled name. A change
meant to leave some configs alone can be checked without a GPU: a kernel whose SASS is identical
to a measured, tested build's keeps those measurements and tests (session 27 shipped narrow tail
tiles that way).

  scripts/sass_compare.py OLD_BINARY NEW_BINARY [--filter grouped_gemm_kernel] [--diff NAME_PART]

cuobjdump (and the nvdisasm it runs) come from PATH, the CUDA toolkit, or (not installed here)
the pip wheels `nvidia-cuda-cuobjdump` and `nvidia-cuda-nvdisasm`, fetched once into
~/.cache/fusedmoe/cuobjdump.
"""
import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import zipfile

CACHE = os.path.expanduser("~/.cache/fusedmoe/cuobjdump")


def find_cuobjdump():
    """Path of a cuobjdump with an nvdisasm beside it or on PATH (cuobjdump -sass runs it)."""
    for cand in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if cand and os.access(cand, os.X_OK):
            return cand

    def cached():
        found = {}
        for root, _, files in os.walk(CACHE):
            for tool in ("cuobjdump", "nvdisasm"):
                if tool in files:
                    found[tool] = os.path.join(root, tool)
        return found if len(found) == 2 else None

    found = cached()
    if not found:
        os.makedirs(CACHE, exist_ok=True)
        print("sass_compare: fetching the cuobjdump and nvdisasm wheels into " + CACHE, file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "-d", CACHE, "nvidia-cuda-cuobjdump", "nvidia-cuda-nvdisasm"], check=True,
                       stdout=subprocess.DEVNULL)
        for f in os.listdir(CACHE):
            if f.endswith(".whl"):
                with zipfile.ZipFile(os.path.join(CACHE, f)) as z:
                    z.extractall(CACHE)
        found = cached()
        if not found:
            sys.exit("sass_compare: the wheels hold no cuobjdump / nvdisasm")
    for path in found.values():
        os.chmod(path, 0o755)
    os.environ["PATH"] = os.path.dirname(found["nvdisasm"]) + os.pathsep + os.environ.get("PATH", "")
    return found["cuobjdump"]


def functions(tool, binary):
    out = subprocess.run([tool, "-sass", binary], check=True, capture_output=True, text=True).stdout
    funcs, cur = {}, None
    for line in out.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            cur = m.group(1)
            funcs[cur] = []
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if cur and m:
            funcs[cur].append(re.sub(r"0x[0-9a-f]+", "X", m.group(1)))
    return funcs


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--filter", default="", help="only functions whose name contains this")
    ap.add_argument("--diff", default="", help="print the instruction diff of the first function matching this")
    args = ap.parse_args(argv)
    tool = find_cuobjdump()
    a, b = functions(tool, args.old), functions(tool, args.new)
    names = sorted(n for n in set(a) | set(b) if args.filter in n)
    same = 0
    for n in names:
        if n not in a or n not in b:
            state = "only in " + ("new" if n not in a else "old")
        elif a[n] == b[n]:
            state, same = "same", same + 1
        else:
            state = f"differs ({len(a[n])} -> {len(b[n])} instructions)"
        print(f"{state:36s} {n}")
    print(f"# {same} of {len(names)} functions identical")
    if args.diff:
        n = next((n for n in names if args.diff in n and n in a and n in b), None)
        if n:
            sys.stdout.writelines(l + "\n" for l in difflib.unified_diff(a[n], b[n], "old", "new", n=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
