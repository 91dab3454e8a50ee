#!/usr/bin/env python3
"""Keeps the problems of a `kaas tune --twins-of` state whose `_ec` twin won the tuner's
side-by-side timing by at least 0.5% (median rewards of the three samples each), for a
`device-run.sh verify` of them: `python3 scripts/twins-filter.py STATE[.json.gz] OUT.json`."""
import gzip, json, sys

st = json.load(gzip.open(sys.argv[1]) if sys.argv[1].endswith(".gz") else open(sys.argv[1]))
keep = {}
for key, r in st["results"].items():
    winner = r["winner"].get("Hopper", r["winner"])
    med = {}
    for cfg, samples in r["exhaustive"]:
        c = cfg.get("Hopper", cfg)
        s = sorted(samples)
        med["ec" if c.get("early_coords") else "plain"] = s[len(s) // 2]
    if winner.get("early_coords") and med.get("ec", 0) >= 1.005 * med.get("plain", float("inf")):
        keep[key] = r
print(f"twins ahead by >= 0.5%: {len(keep)} of {len(st['results'])}")
st["results"] = keep
json.dump(st, open(sys.argv[2], "w"))
