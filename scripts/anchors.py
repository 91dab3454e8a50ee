#!/usr/bin/env python3
"""The catalog beside CUDA-L2, the peer to beat: per FLOP bucket, the geometric-mean speedup
over cuBLASLt-autotune-max of CUDA-L2's published H100 kernels (its offline and server
modes, host-timed around each call) and of the catalog's served kernels (offline and graph
mode, the workers' side-by-side runs), on the 1,000-shape grid, one layout of ours at a time.

    python3 scripts/anchors.py ANCHORS_DIR kernels/h100/index.json.gz [--layout tn|nn|best]

ANCHORS_DIR holds cuda-l2-h100-f32-offline.csv and cuda-l2-h100-f32-server.csv (one row per
shape, `mnk` = M_N_K, speedups over each baseline). CUDA-L2 ships one kernel per shape and
compares it with the faster baseline layout ("-max"); so does the catalog's figure for a
layout. `best` takes, per shape, the faster of our two layouts' served speedups, as a user
free to store B either way would.

"Served" counts a shape where the kernel is slower than the baseline as 1.0 (the service
names the baseline there); "kernels" is the kernel's own ratio, as CUDA-L2 publishes it.
The two harnesses differ: CUDA-L2 times each call on the host through PyTorch, so its small
shapes carry PyTorch's and cuBLASLt's host overhead; our offline mode times back-to-back
launches through the driver API and cuBLASLt's C API. Ratios over one library are comparable
in kind, not to the percent: this is a map of where each is ahead, not a race result.
"""
import argparse
import collections
import csv
import os

import catalog_index

BASE = "cublaslt_autotune_max"
L2_BASE = "cuBLASLt-auto-tuning-max"


BUCKETS = catalog_index.BUCKETS
gm = catalog_index.geomean


def bucket(m, n, k):
    return catalog_index.bucket(2 * m * n * k)


def load_anchor(path):
    out = {}
    with open(path) as f:
        for row in csv.DictReader(f):
            m, n, k = (int(x) for x in row["mnk"].split("_"))
            out[(m, n, k)] = float(row[L2_BASE])
    return out


def ours(served, layout, mode, m, n, k):
    """Our catalog's served ratio for one shape: its entry's (the faster layout's, for
    `best`), or 1.0 where it has none or the entry is slower."""
    layouts = ("tn", "nn") if layout == "best" else (layout,)
    entries = (served.get((ly, m, n, k)) for ly in layouts)
    return max([1.0] + [e["run"]["speedups"][mode][BASE] for e in entries if e is not None])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("anchors", help="folder with cuda-l2-h100-f32-{offline,server}.csv")
    ap.add_argument("index", help="a catalog bundle's index.json.gz")
    ap.add_argument("--layout", default="tn", choices=["tn", "nn", "best"])
    args = ap.parse_args()

    l2 = {mode: load_anchor(os.path.join(args.anchors, f"cuda-l2-h100-f32-{mode}.csv")) for mode in ("offline", "server")}
    served = catalog_index.served_entries(catalog_index.load(args.index))
    G = catalog_index.GRID
    shapes = [(m, n, k) for m in G for n in G for k in G]
    missing = [s for s in shapes if s not in l2["offline"] or s not in l2["server"]]
    if missing:
        raise SystemExit(f"the anchors lack {len(missing)} grid shapes, e.g. {missing[0]}")

    cols = collections.OrderedDict()
    cols["CUDA-L2 offline, kernels"] = lambda s: l2["offline"][s]
    cols["CUDA-L2 offline, served"] = lambda s: max(1.0, l2["offline"][s])
    cols["CUDA-L2 server, kernels"] = lambda s: l2["server"][s]
    cols["kaas offline, served"] = lambda s: ours(served, args.layout, "offline", *s)
    cols["kaas graph, served"] = lambda s: ours(served, args.layout, "graph", *s)

    by = {name: collections.defaultdict(list) for name in cols}
    for s in shapes:
        for name, f in cols.items():
            v = f(s)
            by[name][bucket(*s)].append(v)
            by[name]["all"].append(v)

    print(f"geometric-mean speedup over cuBLASLt-autotune-max, 1,000 shapes (ours: layout {args.layout})")
    head = ["bucket", "shapes"] + list(cols)
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for b in BUCKETS + ["all"]:
        n = len(by[next(iter(cols))][b])
        print(f"| {b} | {n} | " + " | ".join(f"{gm(by[name][b]):.3f}" for name in cols) + " |")

    # Shape by shape in the same mode: where our served offline ratio beats CUDA-L2's kernel.
    ahead = collections.Counter()
    for s in shapes:
        o = ours(served, args.layout, "offline", *s)
        if o >= l2["offline"][s]:
            ahead[bucket(*s)] += 1
            ahead["all"] += 1
    print()
    print("shapes where kaas offline (served) >= CUDA-L2 offline: " +
          ", ".join(f"{b} {ahead[b]}/{len(by[next(iter(cols))][b])}" for b in BUCKETS + ["all"]))


if __name__ == "__main__":
    main()
