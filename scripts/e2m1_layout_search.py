#!/usr/bin/env python3
"""Exhaustive search of e2m1 word layouts for the decode's cheapest shift-and-mask form
(src/gemm/e2m1_layout.hpp, code_bit / decode_pair).

A 32-bit word holds 8 E2M1 codes; each of the four bf16x2 registers needs two codes' sign at bits
15 / 31 and magnitude (e1 e0 m) at bits 8..6 / 24..22. A register is built from shifted copies of
the word, one mask each (LOP3 on the integer ALU; the first masks, the others mask-and-or). A left
shift is an IMAD.SHL on the FMA pipe, a right shift an SHF on the ALU; a shift amount used by
several registers is computed once. The search covers registers built from one or two shift
amounts (a register from three costs three masks, so 3 + 1 + 1 + 1 masks and a right shift can
never beat the best found) and prints every layout with the fewest ALU instructions per word.

  scripts/e2m1_layout_search.py      # session 51: ALU 7 (6 masks + 1 SHF), 4 left shifts
"""
import itertools
from collections import defaultdict

PARTS = [[15], [6, 7, 8], [31], [22, 23, 24]]  # sign lo, magnitude lo, sign hi, magnitude hi
SHIFTS = range(-24, 25)                          # > 0: left


def part_mask(part, shift):
    m = 0
    for t in PARTS[part]:
        src = t - shift
        if not 0 <= src < 32:
            return None
        m |= 1 << src
    return m


def patterns():
    """(source bits, masks, per-part shifts) of every register built from 1 or 2 shift amounts."""
    out = []
    for k in (1, 2):
        for shifts in itertools.combinations(SHIFTS, k):
            for assign in itertools.product(range(k), repeat=4):
                if len(set(assign)) != k:
                    continue
                used, ok = 0, True
                for part in range(4):
                    m = part_mask(part, shifts[assign[part]])
                    if m is None or used & m:
                        ok = False
                        break
                    used |= m
                if ok:
                    out.append((used, k, tuple(shifts[a] for a in assign)))
    return out


def main():
    by_lowest = defaultdict(list)
    for p in patterns():
        by_lowest[(p[0] & -p[0]).bit_length() - 1].append(p)
    found = defaultdict(list)

    def search(used, regs):
        if len(regs) == 4:
            if used == 0xFFFFFFFF:
                shifts = {s for r in regs for s in r[2] if s != 0}
                alu = sum(r[1] for r in regs) + sum(1 for s in shifts if s < 0)
                fma = sum(1 for s in shifts if s > 0)
                found[(alu, fma)].append([r[2] for r in regs])
            return
        free = ~used & 0xFFFFFFFF
        for p in by_lowest[(free & -free).bit_length() - 1]:  # the lowest free bit: no permutations
            if not used & p[0]:
                search(used | p[0], regs + [p])

    search(0, [])
    best = min(found)
    print(f"fewest ALU instructions per word: {best[0]} (with {best[1]} left shifts); "
          f"layouts as per-register (sign lo, magnitude lo, sign hi, magnitude hi) shifts:")
    for regs in found[best]:
        print("  ", regs)
    print("costs found:", {k: len(v) for k, v in sorted(found.items())[:6]})


if __name__ == "__main__":
    main()
