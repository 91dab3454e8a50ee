"""Adopt tuning requests (`device-run.sh request`) into the shipped workload bundle.

    python3 scripts/workload-adopt.py OUT_DIR GRID_BUNDLE WORKLOAD_BUNDLE REQUEST_BUNDLE [REQUEST_BUNDLE ...]

GRID_BUNDLE is the grid catalog (kernels/h100), WORKLOAD_BUNDLE the shipped workload
bundle (kernels/h100-workloads), each REQUEST_BUNDLE a request's `bundle` folder (its
report's directory in request.tgz). A problem the grid holds an entry for stays the
grid's. A problem a request measured takes that request's entries and baselines (a later
REQUEST_BUNDLE wins over an earlier one); every other problem keeps the workload bundle's.
A problem's tune is the latest source's that has one; a request bundle whose folder sits
beside the report's `tunes.json` (the tunes as `GET /v1/tunes/…` showed them) takes its
finished tunes from there when its index carries none. Writes OUT_DIR/index.json and
OUT_DIR/ptx; canonicalize it with `kaas import` into a fresh database and `kaas export`
(docs/bundles.md).
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


FINISHED = ("served", "baseline_faster", "failed")


def tunes_of(d, idx):
    """The bundle's finished tunes, or those of the report's tunes.json beside it."""
    if idx.get("tunes"):
        return idx["tunes"]
    views = os.path.join(os.path.dirname(os.path.abspath(d)), "tunes.json")
    if not os.path.exists(views):
        return []
    fields = ("device_class", "problem", "state", "budget_ms", "stage", "message", "trace", "result", "finished_at")
    return [{f: v[f] for f in fields} for v in json.load(open(views)).values() if v and v["state"] in FINISHED]


def main(out, grid_dir, workload_dir, request_dirs):
    grid = load(grid_dir)
    # A grid problem with an entry is the grid's; one without (answered by the baseline
    # table until a tune measured it) takes the tune's baselines and trace here.
    on_grid = {key(e["problem"]) for e in grid["entries"]}
    # problem → (bundle dir, entries, baselines, tunes, index): the newest source of each.
    chosen = {}
    for d in [workload_dir, *request_dirs]:
        idx = load(d)
        mine = {}
        for e in idx["entries"]:
            mine.setdefault(key(e["problem"]), ([], [], []))[0].append(e)
        for b in idx["baselines"]:
            mine.setdefault(key(b["problem"]), ([], [], []))[1].append(b)
        for t in tunes_of(d, idx):
            mine.setdefault(key(t["problem"]), ([], [], []))[2].append(t)
        for k, (es, bs, ts) in mine.items():
            if k in on_grid:
                continue
            if es or bs:
                chosen[k] = (d, es, bs, chosen.get(k, (None, [], [], [], None))[3], idx)
            if ts:
                prev = chosen.get(k, (d, [], [], [], idx))
                chosen[k] = (prev[0], prev[1], prev[2], ts, prev[4])
    first = load(workload_dir)
    entries, baselines, tunes, problems, artifacts = [], [], [], {}, {}
    os.makedirs(os.path.join(out, "ptx"), exist_ok=True)
    for k in sorted(chosen):
        d, es, bs, ts, idx = chosen[k]
        arts = {a["sha256"]: a for a in idx["artifacts"]}
        for e in es:
            artifacts[e["artifact"]] = arts[e["artifact"]]
            shutil.copy(os.path.join(d, "ptx", e["artifact"] + ".ptx"), os.path.join(out, "ptx", e["artifact"] + ".ptx"))
        # A tune's answer needs the figures it stands on: one that finished after its
        # request's export (served or baseline_faster, with no baselines here) is left out.
        ts = [t for t in ts if t["state"] == "failed" or bs]
        if not (es or bs or ts):
            continue
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
    print(f"{len(problems)} problems, {len(entries)} entries, {len(baselines)} baselines, {len(tunes)} tunes, {len(artifacts)} artifacts in {out}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
