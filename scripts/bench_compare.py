#!/usr/bin/env python3
"""Side-by-side medians of `fusedmoe bench --json` files: one row per (op, shape, T, mode), one
column per file, and each column's ratio to the first. For A/B runs of two binaries (or one binary
with a knob) in the same device call.

  scripts/bench_compare.py old=old.json new=new.json [full=full.json] [--ops layer,layer.down]

A label is optional (`a.json b.json` labels them by file name). Rows missing from a file print
as '-'. The ceilings of each process are printed first: clocks move between processes, so a
difference the size of the ceilings' spread is noise.
"""
import argparse
import json
import math
import os
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = {}
    for r in doc.get("rows", []):
        shape = r["shape"]
        # The tuning run's rows (`bench --op layer --configs all`) share op, shape and T: one row
        # per config pair.
        if r["op"].endswith(".tune"):
            shape += " " + r.get("config", "").split("/")[0]
        key = (r["op"], shape, r["tokens"], r.get("mode", ""))
        rows[key] = r
    return doc, rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="[label=]path.json, the first is the baseline")
    ap.add_argument("--ops", default="", help="comma-separated ops to keep (default: all)")
    args = ap.parse_args(argv)
    labels, docs, tables = [], [], []
    for spec in args.files:
        label, _, path = spec.rpartition("=")
        if not label:
            label = os.path.splitext(os.path.basename(path))[0]
        try:
            doc, rows = load(path)
        except (OSError, ValueError, KeyError) as e:
            print(f"bench_compare: cannot read {path}: {e}", file=sys.stderr)
            return 2
        labels.append(label)
        docs.append(doc)
        tables.append(rows)
    keep = set(filter(None, args.ops.split(",")))
    for label, doc in zip(labels, docs):
        c = doc.get("ceilings", {})
        dev = doc.get("device", "?")
        name = dev.get("name", "?") if isinstance(dev, dict) else dev
        print(f"# {label}: {name}, commit {doc.get('commit', '?')}, bytes {c.get('copy_gbps', '?')} GB/s,"
              f" FP8 {c.get('fp8_gemm_tflops', '?')} / BF16 {c.get('bf16_gemm_tflops', '?')} TFLOP/s")
    keys = []
    for rows in tables:
        for k in rows:
            if k not in keys and (not keep or k[0] in keep):
                keys.append(k)
    wo = max([24] + [len(k[0]) for k in keys])
    ws = max([28] + [len(k[1]) for k in keys])
    head = f"{'op':{wo}s} {'shape':{ws}s} {'T':>6s} " + " ".join(f"{l:>10s}" for l in labels)
    head += "".join(f" {l + '/' + labels[0]:>12s}" for l in labels[1:])
    print(head)
    logs = [[] for _ in labels[1:]]
    for k in keys:
        vals = [t[k]["median_us"] if k in t else None for t in tables]
        line = f"{k[0]:{wo}s} {k[1]:{ws}s} {k[2]:6d} "
        line += " ".join(f"{v:10.2f}" if v is not None else f"{'-':>10s}" for v in vals)
        for i, v in enumerate(vals[1:]):
            if v is not None and vals[0]:
                line += f" {v / vals[0]:12.3f}"
                logs[i].append(math.log(v / vals[0]))
            else:
                line += f" {'-':>12s}"
        print(line)
    for label, lg in zip(labels[1:], logs):
        if lg:
            print(f"# geomean {label}/{labels[0]} over {len(lg)} rows: {math.exp(sum(lg) / len(lg)):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
