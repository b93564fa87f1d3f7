"""DeepGEMM's grouped FP8 GEMMs (issue 10's peer) on the routing `fusedmoe bench --op layer` used.

Issue 10 asks for each layer GEMM to beat DeepGEMM on real rows. This runs DeepGEMM's
`m_grouped_fp8_gemm_nt_contiguous` (FP8 e4m3, activations scaled per token per 128 columns, weights
per 128 x 128 block, bf16 out: the SM90 "1d2d" kernel) on the same per-expert row counts as our
layer bench, written by `fusedmoe bench --op layer --routes FILE`:

    build/fusedmoe bench --op layer --presets deepseek-v3 --tokens 8192 --routes routes.jsonl
    PYTHONPATH=<DeepGEMM checkout> python3 python/bench/deepgemm_peer.py routes.jsonl

DeepGEMM is a peer here, not a dependency. On a machine without network (the GPU machines), bring
its source with its two submodules' headers (CUTLASS include/, fmt include/ at the commits it
pins) and build the extension in place (~90 s; kernels JIT-compile at first use):
    scripts/peer_deepgemm.sh pack deepgemm_src.tar.xz         # here, from git mirrors
    scripts/peer_deepgemm.sh build deepgemm_src.tar.xz /tmp/dg  # there; PYTHONPATH=/tmp/dg/DeepGEMM
DG_PRINT_CONFIGS=1 prints the block sizes, clusters and stages it picks for each shape.

Each (preset, T) line gives two GEMMs, as our layer runs them:
  gate/up  [rows, H] x [2I, H]^T  (our kernel also applies SwiGLU and writes fp8 [rows, I]);
  down     [rows, I] x [H, I]^T   (ours also weights and combines the rows per token).
The shared expert, when the preset has one, is one more group of T rows (our GEMMs run it as one
more expert too). DeepGEMM's contiguous layout pads each group to its M alignment (128 on SM90);
TFLOP/s here count the real rows only, as issue 10's figures do.

Timing as contest_peers.py: CUDA events around a CUDA graph of `--launches` calls, median and
p10/p90 over `--reps` replays after a warm-up; the weights of every shape here outgrow the 50 MB L2
(cold). Operands are random (normal values cast to e4m3, scales in [0.5, 2)): zeros would run
at a higher clock. 256 rows of each GEMM are checked against a float64 torch product first.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from graph_timing import time_graph


def random_fp8(rows: int, cols: int, gen: torch.Generator) -> torch.Tensor:
    out = torch.empty(rows, cols, dtype=torch.float8_e4m3fn, device="cuda")
    step = max(1, (1 << 28) // max(cols, 1))  # at most 1 GiB of float32 at a time
    for r in range(0, rows, step):
        n = min(step, rows - r)
        out[r:r + n] = torch.randn(n, cols, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    return out


class GroupedCase:
    """One grouped GEMM: groups of `rows[g]` real rows, [sum padded rows, K] x [G, N, K]^T."""

    def __init__(self, dg, rows: list[int], n: int, k: int, gen: torch.Generator):
        self.dg, self.rows, self.n, self.k = dg, rows, n, k
        align = dg.get_mk_alignment_for_contiguous_layout()
        self.padded = [math.ceil(r / align) * align for r in rows]
        m = sum(self.padded)
        g = len(rows)
        self.a = random_fp8(m, k, gen)
        self.sfa = torch.rand(m, k // 128, device="cuda", generator=gen) * 1.5 + 0.5
        self.b = random_fp8(g * n, k, gen).view(g, n, k)
        self.sfb = torch.rand(g, n // 128, k // 128, device="cuda", generator=gen) * 1.5 + 0.5
        layout = []
        for e, (r, p) in enumerate(zip(rows, self.padded)):
            layout += [e] * r + [-1] * (p - r)
        self.m_indices = torch.tensor(layout, dtype=torch.int32, device="cuda")
        self.d = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        # The scales in the layout the kernel reads, made once, so a call launches the GEMM alone.
        self.sfa = dg.get_mn_major_tma_aligned_tensor(self.sfa)

    def __call__(self):
        self.dg.m_grouped_fp8_gemm_nt_contiguous((self.a, self.sfa), (self.b, self.sfb), self.d,
                                                 self.m_indices)

    def check(self) -> float:
        """Relative L2 error of the largest group's first 256 rows against a float64 product of the
        same values."""
        self()
        torch.cuda.synchronize()
        g = max(range(len(self.rows)), key=lambda i: self.rows[i])
        start, r = sum(self.padded[:g]), min(256, self.rows[g])
        a = self.a[start:start + r].double() * self.sfa[start:start + r].double().repeat_interleave(128, 1)
        sb = self.sfb[g].double().repeat_interleave(128, 0).repeat_interleave(128, 1)
        b = self.b[g].double() * sb[:self.n, :self.k]
        want = a @ b.T
        got = self.d[start:start + r].double()
        return float((got - want).norm() / want.norm().clamp_min(1e-30))


def dense_fp8_tflops(launches: int, reps: int, gen: torch.Generator) -> float:
    """torch._scaled_mm e4m3 8192^3 (per-tensor scales, bf16 out): the card's dense FP8 rate."""
    n = 8192
    a = random_fp8(n, n, gen)
    b = random_fp8(n, n, gen)
    one = torch.ones((), device="cuda")
    med, _, _ = time_graph([lambda: torch._scaled_mm(a, b.T, scale_a=one, scale_b=one,
                                                     out_dtype=torch.bfloat16)], launches, reps)
    return 2.0 * n ** 3 / (med * 1e-6) / 1e12


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("routes", help="JSON lines from `fusedmoe bench --op layer --routes FILE`")
    ap.add_argument("--gemms", default="up,down", help="comma-separated: up, down (default both)")
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", default="", help="also write the rows to this file")
    args = ap.parse_args()

    import deep_gemm as dg

    gen = torch.Generator(device="cuda")
    gen.manual_seed(args.seed)
    print(f"# device {torch.cuda.get_device_name()}, torch {torch.__version__}, DeepGEMM "
          f"{getattr(dg, '__version__', '?')}, M alignment {dg.get_mk_alignment_for_contiguous_layout()}, "
          f"seed {args.seed}")
    dense = dense_fp8_tflops(args.launches, args.reps, gen)
    print(f"# dense FP8 rate (torch._scaled_mm 8192^3, same process): {dense:.1f} TFLOP/s")
    print("| preset | T | GEMM | groups | real rows | padded rows | N | K | median µs (p10-p90) | "
          "TFLOP/s real rows | % dense | rel err |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    out_rows = []
    with open(args.routes) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    for case in lines:
        H, I = case["hidden"], case["intermediate"]
        rows = [r for r in case["routes_per_expert"] if r > 0]
        if case["shared_rows"]:
            if case["shared_intermediate"] != I:
                print(f"# {case['preset']}: shared expert width {case['shared_intermediate']} != {I}: "
                      "left out (DeepGEMM groups share one N and K)", file=sys.stderr)
            else:
                rows.append(case["shared_rows"])
        for gemm in args.gemms.split(","):
            n, k = (2 * I, H) if gemm == "up" else (H, I)
            c = GroupedCase(dg, rows, n, k, gen)
            err = c.check()
            med, p10, p90 = time_graph([c], args.launches, args.reps)
            real = sum(rows)
            tf = 2.0 * real * n * k / (med * 1e-6) / 1e12
            print(f"| {case['preset']} | {case['tokens']} | {gemm} | {len(rows)} | {real} | "
                  f"{sum(c.padded)} | {n} | {k} | {med:.1f} ({p10:.1f}-{p90:.1f}) | {tf:.1f} | "
                  f"{100 * tf / dense:.1f}% | {err:.2e} |", flush=True)
            out_rows.append(dict(preset=case["preset"], tokens=case["tokens"], gemm=gemm,
                                 groups=len(rows), real_rows=real, padded_rows=sum(c.padded), n=n,
                                 k=k, median_us=med, p10_us=p10, p90_us=p90, tflops=tf,
                                 dense_fp8_tflops=dense, rel_err=err))
            del c
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(), dense_fp8_tflops=dense,
                           rows=out_rows), f, indent=1)


if __name__ == "__main__":
    main()
