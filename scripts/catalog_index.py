"""Shared by the catalog scripts: the 1,000-shape grid's sizes, its FLOP buckets, a geometric
mean, reading a bundle's index (or an empty one), a bundle index's served entry per problem (the latest
measured, as the service serves it), and the served figures over the grid."""
import gzip, json, math, os, sys

# GRID_DIMS in src/bench/baselines.rs: M, N and K each take these sizes, in both layouts.
GRID = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384]
# The service's SERVE_MARGIN (src/catalog/mod.rs): a win below it is not served.
MARGIN = 1.01
BUCKETS = ["< 2^30", "2^30–2^36", "2^36–2^40", "≥ 2^40"]


def bucket(flop):
    """The size bucket (as CUDA-L2 reports them) of a problem of `flop` = 2·M·N·K."""
    l = math.log2(flop)
    return BUCKETS[0] if l < 30 else BUCKETS[1] if l < 36 else BUCKETS[2] if l < 40 else BUCKETS[3]


def geomean(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


def load(path):
    return json.load(gzip.open(path))


def empty_index():
    """A bundle index with nothing in it: where a bundle starts (kernels/h200, a workload bundle)."""
    return {"format": "kaas.catalog.v1", "device_classes": [], "problems": [], "artifacts": [], "entries": [], "baselines": []}


def has_index(d):
    return any(os.path.exists(os.path.join(d, n)) for n in ("index.json.gz", "index.json"))


def load_dir(d):
    """A bundle directory's index, or an empty one where there is none yet."""
    return load_bundle(d) if d and has_index(d) else empty_index()


def load_bundle(d):
    """The index of the bundle directory `d` (index.json.gz or index.json)."""
    for name in ("index.json.gz", "index.json"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return json.load(gzip.open(p) if name.endswith(".gz") else open(p))
    sys.exit(f"{d}: no index.json(.gz)")


def ranked_speedups(speedups):
    """The service's ranked_speedups (src/catalog/mod.rs): a run's graph-mode speedup table,
    each baseline's value no higher than the `paced` mode's where that was timed
    (large problems); None without a graph table."""
    graph = (speedups or {}).get("graph")
    if not graph:
        return None
    paced = (speedups or {}).get("paced") or {}
    return {b: min(x, paced[b]) if isinstance(paced.get(b), (int, float)) else x for b, x in graph.items()}


def served_entries(idx):
    """{(layout, m, n, k): the entry measured last} of an index."""
    served = {}
    for e in idx["entries"]:
        p = e["problem"]
        key = (p["layout"], p["m"], p["n"], p["k"])
        if key not in served or e["run"]["measured_at"] > served[key]["run"]["measured_at"]:
            served[key] = e
    return served


def grid_figures(served, layout, speedup):
    """One layout's figures over the 1,000-shape grid, every shape counted as served: the
    entry's `speedup(entry)` where it is at least MARGIN, else the baseline's 1.0 (also where
    there is no entry, or `speedup` gives None for it). Returns (served speedups, the served
    ones by FLOP bucket, the entries' own speedups, wins)."""
    out, kernels, wins, by_bucket = [], [], 0, {}
    for m in GRID:
        for n in GRID:
            for k in GRID:
                e = served.get((layout, m, n, k))
                x = speedup(e) if e else None
                s = 1.0
                if x is not None:
                    kernels.append(x)
                    if x >= MARGIN:
                        wins += 1
                        s = x
                out.append(s)
                by_bucket.setdefault(bucket(2 * m * n * k), []).append(s)
    return out, by_bucket, kernels, wins
