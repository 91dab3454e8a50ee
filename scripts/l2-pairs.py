#!/usr/bin/env python3
"""Pairs of runs that differ only in the tensor maps' L2 promotion, for `device-run.sh pairs`.

Takes COUNT Hopper entries (those with tensor maps) of one layout from a catalog index,
evenly spread over the FLOP range, and writes for each the entry's PTX with two manifests:
NAME_p128.json as shipped (no `l2_promotion`, so 128B) and NAME_p256.json with
`"l2_promotion": "256B"` on every tensor map. Each `kaas run --bench` times its kernel side
by side with cuBLAS and cuBLASLt, so the two runs of a pair compare through their ratios
to the same baselines.

    python3 scripts/l2-pairs.py kernels/h100/index.json.gz .dev/run/l2 --layout tn --count 24
"""
import argparse
import copy
import json
import os
import shutil

import catalog_index


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("out")
    ap.add_argument("--layout", choices=["tn", "nn"], default="tn")
    ap.add_argument("--count", type=int, default=24)
    ap.add_argument("--promotion", default="256B")
    args = ap.parse_args()

    idx = catalog_index.load(args.index)
    ptx_dir = os.path.join(os.path.dirname(args.index), "ptx")

    def has_tensor_maps(e):
        return any("tensor_map" in p for l in e["manifest"]["launches"] for p in l["params"])

    entries = [e for e in idx["entries"] if e["problem"]["layout"] == args.layout and has_tensor_maps(e)]
    entries.sort(key=lambda e: (e["problem"]["m"] * e["problem"]["n"] * e["problem"]["k"], e["problem"]["m"], e["problem"]["n"]))
    if not entries:
        raise SystemExit(f"no {args.layout} entry with tensor maps in {args.index}")
    count = min(args.count, len(entries))
    picked = [entries[round(i * (len(entries) - 1) / max(count - 1, 1))] for i in range(count)]

    os.makedirs(args.out, exist_ok=True)
    for e in picked:
        p = e["problem"]
        name = f"{p['layout']}_{p['m']}x{p['n']}x{p['k']}"
        wide = copy.deepcopy(e["manifest"])
        for launch in wide["launches"]:
            for param in launch["params"]:
                if "tensor_map" in param:
                    param["tensor_map"]["l2_promotion"] = args.promotion
        for suffix, manifest in (("p128", e["manifest"]), (f"p{args.promotion.rstrip('B')}", wide)):
            shutil.copy(os.path.join(ptx_dir, e["artifact"] + ".ptx"), os.path.join(args.out, f"{name}_{suffix}.ptx"))
            with open(os.path.join(args.out, f"{name}_{suffix}.json"), "w") as f:
                json.dump(manifest, f, indent=1)
    print(f"{count} pairs of {len(entries)} {args.layout} entries with tensor maps in {args.out}")


if __name__ == "__main__":
    main()
