#!/usr/bin/env python3
"""Where a kernel's warps wait, from an ncu source page exported as CSV.

  ncu -i REPORT.ncu-rep --page source --csv --print-source sass > K.csv     (per SASS instruction)
  ncu -i REPORT.ncu-rep --page source --csv --print-source cuda,sass > K.csv (per source line)
  scripts/ncu_stalls.py K.csv [--top 20]

The report must be collected with source counters (`--set full`, and `--import-source yes` for
source lines). For each kernel in the file (a "Kernel Name" row starts each one) it prints the
warp-stall samples by reason, then the instructions (or source lines) with the most samples and
their two main reasons. A per-line export has one section per source file ("File Path"); those
are summed per file first.
"""
import argparse
import collections
import csv
import io
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def sections(lines):
    """(kernel name, file path or None, rows as dicts) for each table in the export."""
    kernel, path, header, rows = "?", None, None, []
    out = []

    def flush():
        if header and rows:
            out.append((kernel, path, rows[:]))

    for rec in csv.reader(io.StringIO("\n".join(lines))):
        if not rec:
            continue
        if rec[0] in ("Kernel Name", "Function Name", "File Path"):
            flush()
            rows.clear()
            header = None
            if rec[0] == "Kernel Name":
                kernel, path = rec[1], None
            elif rec[0] == "Function Name":  # a per-line export: the kernel of the file's lines
                kernel = rec[1]
            elif rec[0] == "File Path":
                path = rec[1]
            continue
        if rec[0] in ("Address", "Line No", "# Address"):
            flush()
            rows.clear()
            # A per-line export names two columns "Source" (the line's, then an instruction's).
            header = [h if h not in rec[:i] else h + " 2" for i, h in enumerate(rec)]
            continue
        if header and len(rec) == len(header):
            row = dict(zip(header, rec))
            # A per-line export interleaves the lines with their instructions: keep the lines.
            if "Line No" in row and not row["Line No"].strip().isdigit():
                continue
            rows.append(row)
    flush()
    # The export can repeat a kernel's table (seen with several launches): keep one of each.
    unique, seen = [], set()
    for kernel, path, rows in out:
        key = (kernel, path, tuple(tuple(sorted(r.items())) for r in rows[:50]), len(rows))
        if key not in seen:
            seen.add(key)
            unique.append((kernel, path, rows))
    return unique


def num(s):
    try:
        return float(s.replace(",", "")) if s else 0.0
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    with open(args.csv, encoding="utf-8", errors="replace") as f:
        lines = f.read().splitlines()
    tables = sections(lines)
    if not tables:
        sys.exit(f"{args.csv}: no source table found (export with --page source --csv)")
    by_kernel = collections.OrderedDict()
    for kernel, path, rows in tables:
        by_kernel.setdefault(kernel, []).append((path, rows))
    for kernel, parts in by_kernel.items():
        all_rows = [(path, r) for path, rows in parts for r in rows]
        if not all_rows or SAMPLES not in all_rows[0][1]:
            continue
        reasons = [h for h in all_rows[0][1] if h.startswith("stall_") and "Not Issued" not in h]
        total = sum(num(r[SAMPLES]) for _, r in all_rows)
        if total == 0:
            continue
        executed = sum(num(r.get(EXECUTED, "")) for _, r in all_rows)
        print(f"== {kernel}")
        print(f"   {total:.0f} warp samples, {executed / 1e6:.2f} M warp instructions executed")
        agg = collections.Counter()
        for _, r in all_rows:
            for h in reasons:
                agg[h] += num(r[h])
        print("   by reason: " + ", ".join(f"{h[6:]} {100 * v / total:.1f}%" for h, v in agg.most_common(8)))
        if any(path for path, _ in all_rows):
            files = collections.Counter()
            for path, r in all_rows:
                files[path or "?"] += num(r[SAMPLES])
            print("   by file: " + ", ".join(f"{p.split('/')[-1]} {100 * v / total:.1f}%" for p, v in files.most_common(6)))
        top = sorted(all_rows, key=lambda pr: -num(pr[1][SAMPLES]))[: args.top]
        for path, r in top:
            s = num(r[SAMPLES])
            if s == 0:
                break
            main2 = sorted(((num(r[h]), h) for h in reasons), reverse=True)[:2]
            where = (path.split("/")[-1] + ":" + r.get("Line No", "")) if path else r.get("Address", "")[-6:]
            text = r.get("Source", "").strip()[:64]
            why = ", ".join(f"{h[6:]} {100 * v / s:.0f}%" for v, h in main2 if v > 0)
            print(f"   {100 * s / total:5.1f}%  {where:>14}  {text:<64}  {why}")


if __name__ == "__main__":
    main()
