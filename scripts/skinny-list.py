#!/usr/bin/env python3
"""The skinny shapes of the 1,000-shape grid the catalog does not win, as a `--problems`
list for `kaas tune` (comma-separated MxNxK, the narrowest first): K of at least MIN_K,
of 2^MIN_LOG2 to 2^MAX_LOG2 FLOP, whose 64×64 tiles make fewer than WAVES waves of SMS,
whose served speedup over cuBLASLt-autotune-max (graph mode) is at most LEAD, and whose M
or N is at most SIDE. The 2026-11-25 run's lists: `--side 16384` (322 tn shapes), `--side 128`
(211). The skinny, long-K mid shapes (2026-11-25): `--side 512 --min-k 1024 --min-log2 30
--max-log2 36 --waves 64`.

    python3 scripts/skinny-list.py kernels/h100/index.json.gz [--layout tn] [--side 128]
        [--lead 1.02] [--min-log2 0] [--max-log2 37] [--min-k 256] [--max-k inf] [--waves 2]
        [--sms 132]
        [--every 1]   (every Nth of the list, for a sample)
        [--order side|flops]   (narrowest first, or by FLOP then M, N, K)
        [--exclude M1xN1xK1,…]   (shapes to leave out, e.g. an earlier sample)

The 2026-11-25 run's nn sample, every 8th grid shape of 2^28 to 2^40 FLOP (both ends in):
`--layout nn --side 16384 --waves 1e9 --min-k 64 --min-log2 28 --max-log2 40.001
--lead inf --order flops --every 8`. The 2026-11-26 run's small shapes of K 256 and 512 (both
layouts): `--side 16384 --waves 1e9 --min-k 256 --max-k 512 --min-log2 20 --max-log2 28.1
--lead inf --order flops`.
"""
import argparse, math

import catalog_index

ap = argparse.ArgumentParser()
ap.add_argument("index")
ap.add_argument("--layout", default="tn", choices=["tn", "nn"])
ap.add_argument("--side", type=int, default=16384)
ap.add_argument("--lead", type=float, default=1.02)
ap.add_argument("--min-log2", type=float, default=0.0)
ap.add_argument("--max-log2", type=float, default=37.0)
ap.add_argument("--min-k", type=int, default=256)
ap.add_argument("--max-k", type=float, default=math.inf)
ap.add_argument("--waves", type=float, default=2.0)
ap.add_argument("--sms", type=int, default=132)
ap.add_argument("--every", type=int, default=1)
ap.add_argument("--order", choices=["side", "flops"], default="side")
ap.add_argument("--exclude", default="")
a = ap.parse_args()

cur = catalog_index.served_entries(catalog_index.load(a.index))
G = catalog_index.GRID
excluded = set(filter(None, a.exclude.split(",")))
out = []
for m in G:
    for n in G:
        for k in G:
            if not a.min_k <= k <= a.max_k or not 2 ** a.min_log2 <= 2 * m * n * k < 2 ** a.max_log2:
                continue
            if math.ceil(m / 64) * math.ceil(n / 64) >= a.waves * a.sms:
                continue
            if min(m, n) > a.side:
                continue
            e = cur.get((a.layout, m, n, k))
            if e and e["run"]["speedups"]["graph"]["cublaslt_autotune_max"] > a.lead:
                continue
            if f"{m}x{n}x{k}" in excluded:
                continue
            key = (min(m, n), k, m, n) if a.order == "side" else (2 * m * n * k, m, n, k)
            out.append((key, f"{m}x{n}x{k}"))
print(",".join(shape for _, shape in sorted(out)[:: max(1, a.every)]))
