#!/usr/bin/env python3
"""Keeps the problems of a `kaas tune --twins-of` state whose twin in the latency modes (`_ec`,
and `_2d` where the code takes it) won the tuner's side-by-side timing by at least 0.5%
(median rewards of the three samples each), for a `device-run.sh verify` of them:
`python3 scripts/twins-filter.py STATE[.json.gz] OUT.json`."""
import gzip, json, sys

st = json.load(gzip.open(sys.argv[1]) if sys.argv[1].endswith(".gz") else open(sys.argv[1]))
keep = {}


def modes(c):
    """How far into the latency modes a code is: the twin is the one further in."""
    return (bool(c.get("grid2d")), bool(c.get("early_coords")))


for key, r in st["results"].items():
    winner = r["winner"].get("Hopper", r["winner"])
    med = {}
    for cfg, samples in r["exhaustive"]:
        s = sorted(samples)
        med[modes(cfg.get("Hopper", cfg))] = s[len(s) // 2]
    if len(med) != 2:
        continue
    twin, entry = max(med), min(med)
    if modes(winner) == twin and med[twin] >= 1.005 * med[entry]:
        keep[key] = r
print(f"twins ahead by >= 0.5%: {len(keep)} of {len(st['results'])}")
st["results"] = keep
json.dump(st, open(sys.argv[2], "w"))
