"""The GPUMODE NVFP4 grouped-GEMM contest shapes (issue 11) timed for fusedmoe and torch's grouped
GEMMs in one process on one card, by one method: CUDA events around a CUDA graph that replays the
call `--launches` times, each launch on its own copy of the operands (copies rotated so the set
exceeds the L2: cold L2), median and p10/p90 over `--reps` graph replays after a warm-up.

  fusedmoe   Nvfp4GroupedGemm: A and B NVFP4 (E2M1 + E4M3 per 16 + fp32 global), B prepared once,
             out bf16
  torch bf16 torch._grouped_mm: A [M, K] and B [G, K, N] bf16, out bf16
  torch fp8  torch._scaled_grouped_mm: A and B e4m3 with row-wise fp32 scales, out bf16

    PYTHONPATH=<build>/python python3 python/bench/contest_peers.py

torch's grouped GEMMs are private APIs; a peer torch refuses (version, alignment of the group
offsets) is reported as such, not timed. Prints one table and the geomeans.
"""

from __future__ import annotations

import argparse
import math

import torch

import fusedmoe
from graph_timing import time_graph

SHAPES = {
    "A": (7168, 4096, [80, 176, 128, 72, 64, 248, 96, 160]),
    "B": (2048, 7168, [40, 76, 168, 72, 164, 148, 196, 160]),
    "C": (4096, 3072, [192, 320]),
    "D": (1536, 4096, [128, 384]),
}
L2_BYTES = 50 * 2**20


def copies_for(nbytes: int) -> int:
    return max(1, min(16, math.ceil(2 * L2_BYTES / max(nbytes, 1))))


def fp4_operands(rows: int, k: int, gen: torch.Generator):
    """Random NVFP4 bytes: codes uniform over the 16 E2M1 codes, scales E4M3 in [2^-3, 2^3]."""
    codes = torch.randint(0, 256, (rows, k // 2), dtype=torch.uint8, generator=gen)
    exps = torch.randint(-3, 4, (rows, k // 16), generator=gen).float()
    scales = torch.pow(2.0, exps).to(torch.float8_e4m3fn).view(torch.uint8)
    return codes, scales


def bench_fusedmoe(k, n, m, launches, reps, gen):
    g, rows = len(m), sum(m)
    offsets = torch.tensor([0] + list(torch.tensor(m).cumsum(0).tolist()), dtype=torch.int32).cuda()
    b_bytes = g * n * k // 2 * 9 // 8
    ops, args = [], []
    for _ in range(copies_for(b_bytes)):
        b, bs = fp4_operands(g * n, k, gen)
        ops.append(fusedmoe.Nvfp4GroupedGemm(b.view(g, n, k // 2).cuda(), bs.view(g, n, k // 16).cuda(),
                                             torch.ones(g, dtype=torch.float32).cuda()))
        a, a_s = fp4_operands(rows, k, gen)
        args.append((a.cuda(), a_s.cuda(), torch.ones(g, dtype=torch.float32).cuda(),
                     torch.empty(rows, n, dtype=torch.bfloat16).cuda()))
    for op in ops:
        op.reserve(rows)
    calls = [lambda op=op, x=x: op.run(x[0], x[1], offsets, a_global=x[2], out=x[3], validate_offsets=False)
             for op, x in zip(ops, args)]
    return time_graph(calls, launches, reps)


def bench_torch_bf16(k, n, m, launches, reps, gen):
    g, rows = len(m), sum(m)
    offs = torch.tensor(m, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
    calls = []
    for _ in range(copies_for(g * n * k * 2)):
        a = torch.randn(rows, k, generator=gen).to(torch.bfloat16).cuda()
        b = torch.randn(g, n, k, generator=gen).to(torch.bfloat16).cuda().transpose(-2, -1)
        calls.append(lambda a=a, b=b: torch._grouped_mm(a, b, offs=offs, out_dtype=torch.bfloat16))
    return time_graph(calls, launches, reps)


def bench_torch_fp8(k, n, m, launches, reps, gen):
    g, rows = len(m), sum(m)
    offs = torch.tensor(m, dtype=torch.int32).cumsum(0).to(torch.int32).cuda()
    calls = []
    for _ in range(copies_for(g * n * k)):
        a = torch.randn(rows, k, generator=gen).to(torch.float8_e4m3fn).cuda()
        b = torch.randn(g, n, k, generator=gen).to(torch.float8_e4m3fn).cuda().transpose(-2, -1)
        sa = torch.rand(rows, generator=gen).add(0.5).cuda()
        sb = torch.rand(g, n, generator=gen).add(0.5).cuda()
        calls.append(lambda a=a, b=b, sa=sa, sb=sb: torch._scaled_grouped_mm(
            a, b, sa, sb, offs=offs, out_dtype=torch.bfloat16))
    return time_graph(calls, launches, reps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}; us per call, median "
          f"(p10-p90) over {args.reps} replays of {args.launches} graph launches, cold L2")
    peers = [("fusedmoe nvfp4", bench_fusedmoe), ("torch bf16 grouped", bench_torch_bf16),
             ("torch fp8 row-wise", bench_torch_fp8)]
    times = {name: {} for name, _ in peers}
    for shape, (k, n, m) in SHAPES.items():
        for name, fn in peers:
            try:
                med, p10, p90 = fn(k, n, m, args.launches, args.reps, gen)
                times[name][shape] = med
                print(f"{shape} g={len(m)} k={k} n={n} M={sum(m):5d}  {name:20s} {med:9.2f} ({p10:.2f}-{p90:.2f})",
                      flush=True)
            except Exception as e:  # a private torch API that refuses the shape or is missing
                print(f"{shape} {name:20s} not timed: {type(e).__name__}: {str(e).splitlines()[0][:160]}", flush=True)
            torch.cuda.empty_cache()
    for name, t in times.items():
        if len(t) == len(SHAPES):
            print(f"geomean {name:20s} {math.exp(sum(math.log(v) for v in t.values()) / len(t)):.2f} us")
        else:
            print(f"geomean {name:20s} n/a ({len(t)} of {len(SHAPES)} shapes timed)")


if __name__ == "__main__":
    main()
