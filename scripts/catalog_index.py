"""Shared by the catalog scripts: the 1,000-shape grid's sizes, and a bundle index's served
entry per problem (the latest measured, as the service serves it)."""
import gzip, json

GRID = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384]


def load(path):
    return json.load(gzip.open(path))


def served_entries(idx):
    """{(layout, m, n, k): the entry measured last} of an index."""
    served = {}
    for e in idx["entries"]:
        p = e["problem"]
        key = (p["layout"], p["m"], p["n"], p["k"])
        if key not in served or e["run"]["measured_at"] > served[key]["run"]["measured_at"]:
            served[key] = e
    return served
