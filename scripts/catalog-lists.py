#!/usr/bin/env python3
"""Problem lists for `kaas tune --problems` from a catalog bundle: the grid's shapes
(smallest M·N·K first, comma-separated MxNxK) whose served entry in a layout is, or is not,
a kind of code, or that have no entry at all.

    # nn shapes whose entry is a ping-pong code without uniform descriptors
    python3 scripts/catalog-lists.py kernels/h100/index.json.gz --layout nn --entry _pp --not-entry _du
    # shapes whose entry in either layout is an atomic split-K code
    python3 scripts/catalog-lists.py kernels/h100/index.json.gz --layout any --entry _ska
    # 2^30–2^36 FLOP shapes without an entry in either layout
    python3 scripts/catalog-lists.py kernels/h100/index.json.gz --layout any --missing --min-log2 30 --max-log2 36
    # the same, each in the layouts it lacks one in (`tn:MxNxK`, which `kaas tune` takes in
    # that layout only): one list for one `device-run.sh pass tn,nn`
    python3 scripts/catalog-lists.py kernels/h100/index.json.gz --missing --min-log2 30 --max-log2 36 --qualified
    # shapes below 2^36 FLOP whose entry is within 5% of cuBLASLt-autotune-max (graph mode),
    # either side: where a better pick of the search decides a win
    python3 scripts/catalog-lists.py kernels/h100/index.json.gz --max-log2 36 --min-speedup 0.95 --max-speedup 1.05 --qualified
"""
import argparse, math
import catalog_index

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("index", help="a bundle's index.json.gz")
ap.add_argument("--layout", choices=["tn", "nn", "any"], default="any", help="the entry's layout; any: either")
ap.add_argument("--entry", action="append", default=[], help="the entry name contains this (all of them)")
ap.add_argument("--not-entry", action="append", default=[], help="the entry name does not contain this (none of them)")
ap.add_argument("--missing", action="store_true", help="shapes without a served entry instead")
ap.add_argument("--min-log2", type=float, help="only shapes of at least 2^X FLOP")
ap.add_argument("--max-log2", type=float, help="only shapes of fewer than 2^X FLOP")
ap.add_argument("--min-speedup", type=float, help="only entries at least this fast × cuBLASLt-autotune-max (graph mode)")
ap.add_argument("--max-speedup", type=float, help="only entries slower than this × cuBLASLt-autotune-max (graph mode)")
ap.add_argument("--qualified", action="store_true", help="print LAYOUT:MxNxK, once per layout the shape qualifies in")
a = ap.parse_args()
if a.missing and (a.entry or a.not_entry or a.min_speedup is not None or a.max_speedup is not None):
    ap.error("--missing takes no --entry, --not-entry or speedup bounds")

served = catalog_index.served_entries(catalog_index.load(a.index))
layouts = ["tn", "nn"] if a.layout == "any" else [a.layout]
G = catalog_index.GRID


def layouts_of(shape):
    """The layouts (of those asked for) in which the shape qualifies."""
    flop = math.log2(2 * shape[0] * shape[1] * shape[2])
    if (a.min_log2 is not None and flop < a.min_log2) or (a.max_log2 is not None and flop >= a.max_log2):
        return []
    out = []
    for layout in layouts:
        e = served.get((layout,) + shape)
        if a.missing:
            if e is None:
                out.append(layout)
            continue
        if e is None:
            continue
        name = e["manifest"]["launches"][0]["entry"]
        x = e["run"]["speedups"]["graph"]["cublaslt_autotune_max"]
        if (a.min_speedup is not None and x < a.min_speedup) or (a.max_speedup is not None and x >= a.max_speedup):
            continue
        if all(t in name for t in a.entry) and not any(t in name for t in a.not_entry):
            out.append(layout)
    return out


grid = sorted(((m, n, k) for m in G for n in G for k in G), key=lambda s: (s[0] * s[1] * s[2], s))
items = []
for m, n, k in grid:
    found = layouts_of((m, n, k))
    if a.qualified:
        items += [f"{l}:{m}x{n}x{k}" for l in found]
    elif found:
        items.append(f"{m}x{n}x{k}")
print(",".join(items))
