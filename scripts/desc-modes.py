#!/usr/bin/env python3
"""The wgmma descriptor modes side by side, from a tuner state's exhaustive samples (`kaas
tune --trial du,dr --exhaustive-every 1`): each code timed plain, with uniform descriptors
(`_du`) and with stepped ones (`_dr`) in the same run. Prints, per pair of modes, the
geometric mean over codes of the ratio of their median rewards (above 1: the first mode
faster), by kind of code, and per problem the best code of each mode.

    python3 scripts/desc-modes.py STATE.json[.gz]
"""
import collections, gzip, json, math, statistics, sys

import tune_code  # beside this script

path = sys.argv[1]
state = json.load(gzip.open(path) if path.endswith(".gz") else open(path))


def mode(c):
    tags = tune_code.hopper(c)[6]
    return "dr" if "dr" in tags else "du" if "du" in tags else "plain"


def kind(c):
    bm, bn, _, _, _, cluster_m, tags = tune_code.hopper(c)
    k = f"{bm}x{bn}"
    if c.get("split", 1) > 1:
        k += " split-K"
    for tag in ("pp", "kw", "cs"):
        if tag in tags:
            k += " " + tag
    if cluster_m * tune_code.count(tags, "n") > 1:
        k += " pair+"
    return k


def gm(v):
    return math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")


pairs = collections.defaultdict(list)  # (a, b) -> [(kind, ratio)]
best = []
for key, r in sorted(state["results"].items()):
    codes = collections.defaultdict(dict)  # code without its descriptor mode -> mode -> median reward
    for cand, samples in r.get("exhaustive", []):
        if tune_code.hopper(cand) is None:
            continue  # the mma family has no descriptors
        ok = [s for s in samples if s > 0]
        if not ok:
            continue
        # The code without its descriptor mode's tag.
        base = json.dumps({**cand, "code": "_".join(t for t in cand["code"].split("_") if t not in ("du", "dr"))}, sort_keys=True)
        codes[base][mode(cand)] = statistics.median(ok)
    per_mode = collections.defaultdict(float)
    for base, modes in codes.items():
        for m, v in modes.items():
            per_mode[m] = max(per_mode[m], v)
        for a, b in (("dr", "du"), ("dr", "plain"), ("du", "plain")):
            if a in modes and b in modes:
                pairs[(a, b)].append((kind(json.loads(base)), modes[a] / modes[b]))
    best.append((key, dict(per_mode)))

for (a, b), v in pairs.items():
    print(f"{a} / {b}: geomean {gm([x for _, x in v]):.4f} over {len(v)} codes; faster in {sum(x > 1 for _, x in v)}")
    by = collections.defaultdict(list)
    for k, x in v:
        by[k].append(x)
    for k, xs in sorted(by.items(), key=lambda kv: -len(kv[1]))[:12]:
        print(f"    {k:<24} {gm(xs):.4f} ({len(xs)})")
print(f"\n{'problem':<34} {'best plain':>10} {'best du':>8} {'best dr':>8}  (rewards: × the reference)")
for key, m in best:
    print(f"{key:<34} {m.get('plain', float('nan')):10.3f} {m.get('du', float('nan')):8.3f} {m.get('dr', float('nan')):8.3f}")
