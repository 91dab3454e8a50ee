"""Adopt tuning requests (`device-run.sh request`) into the shipped workload bundle.

    python3 scripts/workload-adopt.py OUT_DIR GRID_BUNDLE WORKLOAD_BUNDLE REQUEST_BUNDLE [REQUEST_BUNDLE ...]

GRID_BUNDLE is the grid catalog (kernels/h100), WORKLOAD_BUNDLE the shipped workload
bundle (kernels/h100-workloads), each REQUEST_BUNDLE a request's `bundle` folder (its
report's directory in request.tgz). A problem the grid holds stays the grid's. A problem a
request measured takes that request's entries, baselines and finished tunes (a later
REQUEST_BUNDLE wins over an earlier one); every other problem keeps the workload bundle's. Writes
OUT_DIR/index.json and OUT_DIR/ptx; canonicalize it with `kaas import` into a fresh
database and `kaas export` (docs/bundles.md).
"""

import gzip
import json
import os
import shutil
import sys


def load(d):
    for name in ("index.json.gz", "index.json"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            return json.load(gzip.open(p) if name.endswith(".gz") else open(p))
    sys.exit(f"{d}: no index.json(.gz)")


def key(p):
    return (p["arch"], p["acc"], p["layout"], p["m"], p["n"], p["k"])


def main(out, grid_dir, workload_dir, request_dirs):
    grid = load(grid_dir)
    on_grid = {key(e["problem"]) for e in grid["entries"]} | {key(p) for p in grid["problems"]}
    # problem → (bundle dir, entries, baselines, tunes, index): the newest source of each.
    chosen = {}
    for d in [workload_dir, *request_dirs]:
        idx = load(d)
        mine = {}
        for e in idx["entries"]:
            mine.setdefault(key(e["problem"]), ([], [], []))[0].append(e)
        for b in idx["baselines"]:
            mine.setdefault(key(b["problem"]), ([], [], []))[1].append(b)
        for t in idx.get("tunes", []):
            mine.setdefault(key(t["problem"]), ([], [], []))[2].append(t)
        for k, (es, bs, ts) in mine.items():
            if k not in on_grid:
                chosen[k] = (d, es, bs, ts, idx)
    first = load(workload_dir)
    entries, baselines, tunes, problems, artifacts = [], [], [], {}, {}
    os.makedirs(os.path.join(out, "ptx"), exist_ok=True)
    for k in sorted(chosen):
        d, es, bs, ts, idx = chosen[k]
        arts = {a["sha256"]: a for a in idx["artifacts"]}
        for e in es:
            artifacts[e["artifact"]] = arts[e["artifact"]]
            shutil.copy(os.path.join(d, "ptx", e["artifact"] + ".ptx"), os.path.join(out, "ptx", e["artifact"] + ".ptx"))
        entries += es
        baselines += bs
        tunes += ts
        problems[k] = (es or bs or ts)[0]["problem"]
    classes = {c["name"]: c for d in [workload_dir, *request_dirs] for c in load(d)["device_classes"]}
    index = dict(first, device_classes=sorted(classes.values(), key=lambda c: c["name"]), problems=[problems[k] for k in sorted(problems)],
                 artifacts=[artifacts[a] for a in sorted(artifacts)], entries=entries, baselines=baselines)
    if tunes:
        index["tunes"] = tunes
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)
    print(f"{len(problems)} problems ({len(on_grid & set(problems))} on the grid), {len(entries)} entries, {len(baselines)} baselines, {len(tunes)} tunes, {len(artifacts)} artifacts in {out}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
