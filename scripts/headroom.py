#!/usr/bin/env python3
"""Where the catalog has room to grow: for every shape of the 1,000-shape grid (one
layout), cuBLASLt-autotune's graph-mode time against a simple bound, the larger of
FLOP / PEAK and (bytes of A, B and C) / BW + FLOOR, with FLOOR the shortest kernel
graph-mode time seen. The bound is a model for ranking shapes, not a measurement: PEAK,
BW and FLOOR are options. Prints the shapes with the most room, the served kernel's time
beside them, and the count by FLOP bucket and by the limit (memory or compute).

    python3 scripts/headroom.py kernels/h100/index.json.gz [--layout tn] [--top 40]
        [--peak-tflops 660] [--bw-tbs 3.0] [--floor-us 1.6] [--min-room 1.3]
"""
import argparse, collections, math

import catalog_index

ap = argparse.ArgumentParser()
ap.add_argument("index")
ap.add_argument("--layout", default="tn", choices=["tn", "nn"])
ap.add_argument("--top", type=int, default=40)
ap.add_argument("--peak-tflops", type=float, default=660.0)
ap.add_argument("--bw-tbs", type=float, default=3.0)
ap.add_argument("--floor-us", type=float, default=1.6)
ap.add_argument("--min-room", type=float, default=1.3)
a = ap.parse_args()

idx = catalog_index.load(a.index)
served = catalog_index.served_entries(idx)
autotune = {}
for b in idx["baselines"]:
    p = b["problem"]; key = (p["layout"], p["m"], p["n"], p["k"])
    if b["mode"] == "graph" and b["library"] == "cublaslt_autotune":
        autotune[key] = min(autotune.get(key, math.inf), b["median_us"])

bucket = catalog_index.bucket

rows = []
for (layout, m, n, k), base in autotune.items():
    if layout != a.layout:
        continue
    flop = 2 * m * n * k
    t_compute = flop / (a.peak_tflops * 1e12) * 1e6
    t_memory = 2 * (m * k + n * k + m * n) / (a.bw_tbs * 1e12) * 1e6 + a.floor_us
    bound = max(t_compute, t_memory)
    e = served.get((layout, m, n, k))
    ours = e["run"]["timings"]["graph"]["median_us"] if e else None
    rows.append((base / bound, m, n, k, base, bound, ours, "memory" if t_memory > t_compute else "compute", bucket(flop)))
rows.sort(reverse=True)
print(f"{a.layout}: autotune-max (graph) over the bound (peak {a.peak_tflops} TFLOP/s, {a.bw_tbs} TB/s, floor {a.floor_us} µs)")
print(f"{'room':>6} {'M':>6} {'N':>6} {'K':>6} {'autotune µs':>12} {'bound µs':>9} {'catalog µs':>11}  limit")
for r in rows[: a.top]:
    ours = f"{r[6]:.2f}" if r[6] else "-"
    print(f"{r[0]:6.2f} {r[1]:6} {r[2]:6} {r[3]:6} {r[4]:12.2f} {r[5]:9.2f} {ours:>11}  {r[7]}")
roomy = [r for r in rows if r[0] >= a.min_room]
print(f"{len(roomy)} of {len(rows)} shapes have autotune-max at ≥ {a.min_room}× the bound; by bucket and limit:")
for (b, lim), c in sorted(collections.Counter((r[8], r[7]) for r in roomy).items()):
    beaten = sum(1 for r in roomy if r[8] == b and r[7] == lim and r[6] and r[6] < r[4])
    print(f"  {b:>10} {lim:>8}: {c} ({beaten} with a catalog kernel faster than autotune-max)")
