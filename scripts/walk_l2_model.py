#!/usr/bin/env python3
"""A model, not a measurement: how many weight bytes the gate/up GEMM's tile walk reads from DRAM
when its items run at different speeds.

Session 31 asked why the gate/up half-tile pairs doubled the kernel's DRAM traffic (ncu at
deepseek-v3 T=8192: ~16 GB against 8.0 GB) although the walk hands every weight tile's k-blocks
to as many items as before. This replays the walk on a toy machine:
- the bench's deepseek-v3 routing drawn in numpy. Logits are uniform in +-3 and the correction
  bias uniform in +-0.05, as in tools/layer_case.hpp. Routing is sigmoid, 8 groups, 4 kept, top 8,
  plus the shared expert's T rows. It is not the bench's exact draw: the model hits 205 experts,
  the bench hit 203.
- items in the engine's order: expert, weight tile of 256 rows, token tile of 128. With --pairs,
  an expert whose tail tile fits 64 rows has its two tails of weight tiles 2j and 2j + 1 as one
  pair item, placed between their full tiles (src/gemm/sm90_gemm_scheduler.cuh's HalfTile walk).
- 132 CTAs take items either round robin (the engine's static walk) or from one counter in order
  (dynamic fetching). An item reads its weight tile's 56 k-blocks of 32 KB one per time unit; a
  pair item reads both tiles' k-blocks and takes `r` units per k-block.
- an LRU L2 of weight k-blocks only, 50 MB of the H200's 60 (the activation rows also live there).

  scripts/walk_l2_model.py [--tokens 8192] [--r 1.0 1.5] [--l2-mb 50]

Output: for each walk, with and without pairs, the weight GB read from DRAM and the walk's
makespan in full-tile times. The makespan counts the items' work only, with no DRAM limit: it
bounds what the half tiles can save.
What it showed (session 31, docs/performance.md), in weight GB from DRAM at T=8192:
- without pairs, both walks read 6.10, against 6.05 GB of weights hit;
- pairs at r = 1.0: 6.13 for both walks;
- pairs at r = 1.5: the round robin reads 12.99 and the counter 6.23.
The measured difference was +8.1 GB of DRAM traffic. In the round robin, CTAs that share a weight
tile drift apart once their items run at different speeds. The counter hands out neighbouring
items together, whatever their speed.

--gemm down (session 32) walks the down GEMM instead: 28 weight tiles of 256 rows (7168 / 256),
16 k-blocks of 128 (2048). --activations counts the A side too, in both GEMMs: each item reads its
token tile's 128-row box of the k-block (16 KB), the L2 then holding weights and activations by
bytes. Measured for comparison (ncu, session 32, deepseek-v3 T=2048, both walks round robin): the
down GEMM read 3.85 GB from DRAM against 2.86 GB of weights and intermediate.

--static (session 45) walks the layer's static numbering (every expert's token tile 0 first, the
later ones after all of them; layer.cpp static_tiles, taken where the experts average <= 64 routes:
deepseek-v3 T=2048). Model / measured (ncu, session 45 call 6, H200), deepseek-v3 T=2048, weights +
activations, GB from DRAM: gate/up static 7.52 / 7.57, routing-numbered 5.70 / 6.82; down static
3.71 / 3.70, routing-numbered 2.80 / 2.90. The static walk also keeps most half tails at full
height (336 pairs against 1008 in the gate/up; makespan 30 against 24 tile times). The
routing-numbered gate/up's measured 6.82 GB is matched at r = 1.5-2 (6.47-6.68 GB, counter walk):
a pair reads two weight tiles' k-blocks, about twice a full tile's time where DRAM-bound.
"""
import argparse
import collections
import heapq

import numpy as np

E, K_ROUTED, GROUPS, KEPT_GROUPS = 256, 8, 8, 4
BLOCK_T = 128
GEMMS = {"gate_up": (16, 56), "down": (28, 16)}  # weight tiles of 256 rows, k-blocks of 128
WEIGHT_TILES, K_BLOCKS = GEMMS["gate_up"]       # set by --gemm
KBLOCK_BYTES = 256 * 128                         # a weight tile's k-block
A_BYTES = BLOCK_T * 128                          # a token tile's k-block (fp8 activations)


def route_counts(T, seed):
    rng = np.random.default_rng(seed)
    logits = rng.uniform(-3, 3, (T, E))
    bias = rng.uniform(-0.05, 0.05, E)
    choice = 1 / (1 + np.exp(-logits)) + bias
    group_score = np.sort(choice.reshape(T, GROUPS, E // GROUPS), axis=2)[:, :, -2:].sum(2)
    kept = np.zeros((T, GROUPS), bool)
    np.put_along_axis(kept, np.argsort(-group_score, axis=1)[:, :KEPT_GROUPS], True, 1)
    masked = np.where(np.repeat(kept, E // GROUPS, 1), choice, -np.inf)
    top = np.argsort(-masked, axis=1)[:, :K_ROUTED]
    return np.append(np.bincount(top.ravel(), minlength=E), T)  # + the shared expert


def walk_items(counts, pairs):
    """Items in the engine's order: (weight tiles (e, wb) it reads, its token tile (e, tb))."""
    out = []
    for e, n in enumerate(counts):
        if n > 0:
            out += walk_items_one(-(-n // BLOCK_T), n % BLOCK_T, e, pairs)
    return out


def walk_items_static(counts, pairs):
    """The layer's static numbering (layer.cpp static_tiles, session 45): token tile 0 of every
    expert first, (e, wb) in order, then the later token tiles of every expert in the engine's
    order (tb from 1; a pair where that part holds a half tail)."""
    out = [(((e, wb),), (e, 0)) for e, n in enumerate(counts) if n > 0 for wb in range(WEIGHT_TILES)]
    for e, n in enumerate(counts):
        tiles, tail = -(-n // BLOCK_T), n % BLOCK_T
        if tiles <= 1:
            continue
        out += [(w, (e, tb + 1)) for w, (_, tb) in walk_items_one(tiles - 1, tail, e, pairs)]
    return out


def walk_items_one(tiles, tail, e, pairs):
    """One expert's items over `tiles` token tiles (numbered from 0), the engine's order: token
    tiles innermost; with a half tail, per two weight tiles 2j, 2j + 1: 2j's full tiles, the pair
    item (both tails), 2j + 1's full tiles."""
    if not (pairs and 0 < tail <= BLOCK_T // 2):
        return [(((e, wb),), (e, tb)) for wb in range(WEIGHT_TILES) for tb in range(tiles)]
    out = []
    for j in range(WEIGHT_TILES // 2):
        out += [(((e, 2 * j),), (e, tb)) for tb in range(tiles - 1)]
        out.append((((e, 2 * j), (e, 2 * j + 1)), (e, tiles - 1)))
        out += [(((e, 2 * j + 1),), (e, tb)) for tb in range(tiles - 1)]
    if WEIGHT_TILES % 2:  # an odd last weight tile keeps its tail alone
        out += [(((e, WEIGHT_TILES - 1),), (e, tb)) for tb in range(tiles)]
    return out


def dram_gb(items, r, l2_mb, ctas, dynamic, activations=False):
    cap = l2_mb * 2**20
    l2 = collections.OrderedDict()  # key -> bytes, least recently used first
    held = 0
    missed = 0

    def touch(key, nbytes):
        nonlocal held, missed
        if key in l2:
            l2.move_to_end(key)
            return
        missed += nbytes
        l2[key] = nbytes
        held += nbytes
        while held > cap:
            held -= l2.popitem(last=False)[1]

    queues = None if dynamic else [items[c::ctas] for c in range(ctas)]
    nxt = 0
    events = []
    for c in range(ctas):
        if dynamic and nxt < len(items):
            events.append((0.0, c, nxt, 0))
            nxt += 1
        elif not dynamic and queues[c]:
            events.append((0.0, c, 0, 0))
    heapq.heapify(events)
    end = 0.0
    while events:
        t, c, i, kb = heapq.heappop(events)
        end = max(end, t)
        wtiles, ttile = items[i] if dynamic else queues[c][i]
        for tile in wtiles:
            touch(("w", tile, kb), KBLOCK_BYTES)
            if activations:
                touch(("a", ttile, kb), A_BYTES)
        dt = r if len(wtiles) == 2 else 1.0
        kb += 1
        if kb == K_BLOCKS:
            kb = 0
            if dynamic:
                if nxt >= len(items):
                    continue
                i, nxt = nxt, nxt + 1
            else:
                i += 1
                if i >= len(queues[c]):
                    continue
        heapq.heappush(events, (t + dt, c, i, kb))
    # (GB from DRAM, the walk's makespan in full-tile times: item work only, no DRAM limit)
    return missed / 1e9, (end + 1) / K_BLOCKS


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--r", type=float, nargs="+", default=[1.0, 1.5])
    ap.add_argument("--l2-mb", type=float, default=50)
    ap.add_argument("--ctas", type=int, default=132)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gemm", choices=sorted(GEMMS), default="gate_up")
    ap.add_argument("--activations", action="store_true", help="count the A side's bytes too")
    ap.add_argument("--static", action="store_true",
                    help="the layer's static numbering: every expert's token tile 0 first, the rest after")
    a = ap.parse_args()
    global WEIGHT_TILES, K_BLOCKS
    WEIGHT_TILES, K_BLOCKS = GEMMS[a.gemm]
    counts = route_counts(a.tokens, a.seed)
    hit = counts[:E] > 0
    print(f"T={a.tokens}: {hit.sum()} of {E} experts hit, at most {counts[:E].max()} routes "
          f"(mean {counts[:E][hit].mean():.0f}); weights of the experts hit: "
          f"{(hit.sum() + 1) * WEIGHT_TILES * K_BLOCKS * KBLOCK_BYTES / 1e9:.2f} GB, "
          f"activations once: {counts.sum() * K_BLOCKS * 128 / 1e9:.3f} GB ({a.gemm})")
    walk = walk_items_static if a.static else walk_items
    base = walk(counts, False)
    paired = walk(counts, True)
    print(f"items: {len(base)} without pairs, {len(paired)} with "
          f"({sum(len(i[0]) == 2 for i in paired)} pairs)")
    for dynamic in (False, True):
        name = "counter" if dynamic else "round robin"
        cases = [("no pairs", base, 1.0)] + [(f"pairs r={r}", paired, r) for r in a.r]
        cols = []
        for label, its, r in cases:
            gb, span = dram_gb(its, r, a.l2_mb, a.ctas, dynamic, a.activations)
            cols.append(f"{label} {gb:.2f} GB / {span:.1f}")
        what = "weight + activation" if a.activations else "weight"
        print(f"{name:>11}: {what} GB from DRAM / makespan in tile times: " + ", ".join(cols))


if __name__ == "__main__":
    main()
