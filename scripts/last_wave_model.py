#!/usr/bin/env python3
"""A model, not a measurement: how much of the fp8 gate/up GEMM's time its last wave idles, and
what running the last wave's items in halves (docs/wip/last_wave_halves.diff) would save.

The bench's routing for the softmax presets (qwen3-30b-a3b, qwen3.5-35b-a3b) drawn in numpy:
logits uniform in +-3 (tools/projection_case.hpp), top-k by logit; the shared MLP (qwen3.5) is one
more chunk with T routes. The walk's items as the engine counts them (src/gemm/half_tile_walk.hpp):
token tiles of 128, two-wave weight tiles of 256 rows, a tail of <= 64 routes paired with the next
weight tile's. Items of equal length on `--ctas` CTAs (one a SM), so the kernel takes
ceil(items / ctas) item times and its last wave idles the rest. With the last r = items % ctas
items halved where 2r <= ctas, a half taking `--half` of an item, it takes floor + half.

  scripts/last_wave_model.py [--draws 50] [--ctas 132] [--half 0.55]

Session 46's output: qwen3-30b-a3b T=2048 921-969 items, the last wave idles 9.9% on average and
halves save 5.4%; T=4096 4.3% / 2.1%; T=8192 1.2% / 0.0%. qwen3.5-35b-a3b T=2048 11.8% / 6.4%;
T=4096 3.9% / 0.8%; T=8192 3.4% / 2.2%.
"""
import argparse

import numpy as np

PRESETS = [("qwen3-30b-a3b", 128, 8, 768, 0), ("qwen3.5-35b-a3b", 256, 8, 512, 1)]


def walk_items(counts, weight_tiles, block_t=128):
    items = 0
    for c in counts:
        if c == 0:
            continue
        tiles = (c + block_t - 1) // block_t
        tail = c - (tiles - 1) * block_t
        if tail <= block_t // 2:  # pairs of half tails, an odd last weight tile's alone
            items += (tiles - 1) * weight_tiles + (weight_tiles + 1) // 2
        else:
            items += tiles * weight_tiles
    return items


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--draws", type=int, default=50)
    ap.add_argument("--ctas", type=int, default=132)
    ap.add_argument("--half", type=float, default=0.55)
    args = ap.parse_args()
    for name, E, k, I, shared_chunks in PRESETS:
        weight_tiles = 2 * I // 256
        for T in (2048, 4096, 8192):
            rows = []
            for seed in range(args.draws):
                rng = np.random.default_rng(seed)
                logits = rng.uniform(-3, 3, size=(T, E))
                top = np.argpartition(-logits, k - 1, axis=1)[:, :k]
                counts = np.bincount(top.ravel(), minlength=E).tolist() + [T] * shared_chunks
                n = walk_items(counts, weight_tiles)
                waves = -(-n // args.ctas)
                r = n % args.ctas
                idle = (waves - n / args.ctas) / waves
                save = (1 - args.half) / waves if 0 < r and 2 * r <= args.ctas else 0.0
                rows.append((n, idle, save))
            a = np.array(rows)
            print(f"{name} T={T}: items {a[:, 0].min():.0f}-{a[:, 0].max():.0f}, the last wave idles "
                  f"{a[:, 1].mean() * 100:.1f}% on average; halves save {a[:, 2].mean() * 100:.1f}% "
                  f"(at most {a[:, 2].max() * 100:.1f}%)")


if __name__ == "__main__":
    main()
