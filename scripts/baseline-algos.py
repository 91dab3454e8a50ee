#!/usr/bin/env python3
"""What cuBLASLt's autotuning picked, decoded: for the shapes of a `--problems` list (or the
whole grid), the tile, cluster shape, split-K count and custom option of the autotuned
algorithm the baseline table recorded (graph mode, the layout asked), counted. Tiles and
clusters are cuBLASLt's own column-major terms, m' × n' with m' = our N and n' = our M:
a 128x64 tile is 64 of our rows by 128 of our columns, a 1x2 cluster is two CTAs along
our M (they share B), 2x1 two along our N (they share A).

    python3 scripts/baseline-algos.py kernels/baselines-h100/index.json.gz [--layout tn]
        [--problems 4096x512x1024,...]
"""
import argparse
import collections
import gzip
import json

# cublasLtMatmulTile_t and cublasLtClusterShape_t (cublasLt.h); ids past these print as numbers.
TILES = dict(enumerate(["undefined", "8x8", "8x16", "16x8", "8x32", "16x16", "32x8", "8x64", "16x32", "32x16", "64x8", "32x32",
         "32x64", "64x32", "32x128", "64x64", "128x32", "64x128", "128x64", "64x256", "128x128", "256x64", "64x512",
         "128x256", "256x128", "512x64", "64x96", "96x64", "96x128", "128x160", "160x128", "192x128", "128x192",
         "128x96", "32x256", "256x32"]))
CLUSTERS = {0: "auto", 2: "1x1", 3: "2x1", 4: "4x1", 5: "1x2", 6: "2x2", 7: "4x2", 8: "1x4", 9: "2x4", 10: "4x4",
            11: "8x1", 12: "1x8", 13: "8x2", 14: "2x8", 15: "16x1", 16: "1x16"}


def name(table, i):
    return table.get(i, f"id {i}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("baselines", help="a baseline table's index.json.gz")
    ap.add_argument("--layout", default="tn", choices=["tn", "nn"])
    ap.add_argument("--problems", help="comma-separated MxNxK (default: every shape of the table)")
    args = ap.parse_args()

    want = None
    if args.problems:
        want = {tuple(int(x) for x in s.split("x")) for s in args.problems.split(",") if s}
    idx = json.load(gzip.open(args.baselines))
    picks = collections.Counter()
    clusters = collections.Counter()
    seen = 0
    for b in idx["baselines"]:
        p = b["problem"]
        if b["mode"] != "graph" or b["library"] != "cublaslt_autotune" or p["layout"] != args.layout or b["layout"] != args.layout:
            continue
        if want is not None and (p["m"], p["n"], p["k"]) not in want:
            continue
        a = b["config"]["algo"]["attributes"]
        tile, cluster = name(TILES, a["tile_id"]), name(CLUSTERS, a["cluster_shape_id"])
        picks[(tile, cluster, a["splitk_num"], a["custom_option"])] += 1
        clusters[cluster] += 1
        seen += 1
    print(f"{seen} autotuned picks ({args.layout}); clusters: " + ", ".join(f"{c} {n}" for c, n in clusters.most_common()))
    print("| picks | tile (m' x n') | cluster | split-K | custom option |")
    print("|---:|---|---|---:|---:|")
    for (tile, cluster, split, option), n in picks.most_common():
        print(f"| {n} | {tile} | {cluster} | {split} | {option} |")


if __name__ == "__main__":
    main()
