#!/usr/bin/env python3
"""Keeps the problems of a `kaas tune --twins-of` state whose best twin in the latency modes
(`_ec`, and the `_2d` or `_2g` grid where the code takes them) won the tuner's side-by-side
timing by at least 0.5% over the served entry (median rewards of the three samples each;
the entry is the first code of each problem's exhaustive samples, as `--twins-of` orders
them), for a `device-run.sh verify` of them:
`python3 scripts/twins-filter.py STATE[.json.gz] OUT.json`."""
import gzip, json, sys

st = json.load(gzip.open(sys.argv[1]) if sys.argv[1].endswith(".gz") else open(sys.argv[1]))
keep = {}
for key, r in st["results"].items():
    if len(r["exhaustive"]) < 2:
        continue
    med = [sorted(samples)[len(samples) // 2] for _, samples in r["exhaustive"]]
    best = max(range(1, len(med)), key=med.__getitem__)
    if r["winner"] == r["exhaustive"][best][0] and med[best] >= 1.005 * med[0]:
        keep[key] = r
print(f"twins ahead by >= 0.5%: {len(keep)} of {len(st['results'])}")
st["results"] = keep
json.dump(st, open(sys.argv[2], "w"))
