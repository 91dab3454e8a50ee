"""Adopt tuning requests (`device-run.sh request`) into the shipped workload bundle.

    python3 scripts/workload-adopt.py [--best] OUT_DIR GRID_BUNDLE WORKLOAD_BUNDLE REQUEST_BUNDLE [REQUEST_BUNDLE ...]

GRID_BUNDLE is the grid catalog (kernels/h100), WORKLOAD_BUNDLE the shipped workload
bundle (kernels/h100-workloads), each REQUEST_BUNDLE a request's `bundle` folder (its
report's directory in request.tgz). A problem the grid holds an entry for stays the
grid's. A problem a request measured takes that request's entries and baselines (a later
REQUEST_BUNDLE wins over an earlier one); every other problem keeps the workload bundle's
(a WORKLOAD_BUNDLE without an index yet, as kernels/h200-workloads before its first
adoption, starts empty). Where the grid bundle measures one device class, only that
class's rows are taken from every source: a request's export also carries the shipped
figures of other classes for its problems.
With --best a later source takes a problem only where
its served kernel is at least as fast against cuBLASLt-autotune-max (graph) as the one it
would replace (a problem without a kernel counts as 1.0), as the catalog keeps a
re-measured entry only where it improves; its tune then comes from the same source.
Otherwise a problem's tune is the latest source's that has one; a request bundle whose folder sits
beside the report's `tunes.json` (the tunes as `GET /v1/tunes/…` showed them) takes its
finished tunes from there when its index carries none. Writes OUT_DIR/index.json and
OUT_DIR/ptx; canonicalize it with `kaas import` into a fresh database and `kaas export`
(docs/bundles.md).
"""

import json
import os
import shutil
import sys


from catalog_index import load_bundle as load, load_dir, ranked_speedups


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


def served_speedup(entries):
    """The best of a problem's served kernels over cuBLASLt-autotune-max (graph, capped by
    paced where timed: ranked_speedups), 1.0 for none."""
    return max([ranked_speedups(e["run"]["speedups"])["cublaslt_autotune_max"] for e in entries], default=1.0)


def only_class(idx, device_class):
    """The bundle's rows of one device class: a request's export also carries the other
    classes' figures for its problems (the shipped H100 answers beside the H200 tunes),
    which belong to that class's own bundle."""
    if device_class is None:
        return idx
    rows = {part: [x for x in idx.get(part, []) if x["device_class"] == device_class] for part in ("entries", "baselines", "tunes")}
    used = {e["artifact"] for e in rows["entries"]}
    return dict(idx, **rows, artifacts=[a for a in idx["artifacts"] if a["sha256"] in used],
                device_classes=[c for c in idx["device_classes"] if c["name"] == device_class])


def main(out, grid_dir, workload_dir, request_dirs, best=False, takes=None, later_tunes=False, grid_class_only=False):
    """`grid_class_only`: where the grid bundle measures one device class, only that class's
    rows of every source are taken (the command line's choice). `grid_dir` None: no problem is left to a grid bundle. `takes(new_entries,
    current_entries)`: with `best`, whether a later source takes a problem an earlier one
    measured (default: its served kernel is at least as fast, `served_speedup`).
    `later_tunes`: with `best`, a later source's tune that served no kernel
    (baseline_faster or failed) joins a problem whose figures stay an earlier source's."""
    # A grid problem with an entry is the grid's; one without (answered by the baseline
    # table until a tune measured it) takes the tune's baselines and trace here.
    grid_entries = load(grid_dir)["entries"] if grid_dir else []
    on_grid = {key(e["problem"]) for e in grid_entries}
    grid_classes = {e["device_class"] for e in grid_entries}
    device_class = grid_classes.pop() if grid_class_only and len(grid_classes) == 1 else None
    takes = takes or (lambda new, current: served_speedup(new) >= served_speedup(current))
    # A workload bundle not yet made (kernels/h200-workloads' first adoption) starts empty.
    bundles = [(workload_dir, only_class(load_dir(workload_dir), device_class))] + [(d, only_class(load(d), device_class)) for d in request_dirs]
    # Per problem, the latest source of its figures (dir, index, entries, baselines), and
    # the latest source of its tune.
    figures, tune = {}, {}
    for d, idx in bundles:
        mine = {}
        for e in idx["entries"]:
            mine.setdefault(key(e["problem"]), ([], []))[0].append(e)
        for b in idx["baselines"]:
            mine.setdefault(key(b["problem"]), ([], []))[1].append(b)
        taken = {k for k, (es, _) in mine.items() if k not in on_grid and not (best and k in figures and not takes(es, figures[k][2]))}
        figures.update({k: (d, idx, *mine[k]) for k in taken})
        for t in tunes_of(d, idx):
            k = key(t["problem"])
            if k not in on_grid and (not best or k in taken or k not in figures or (later_tunes and t["state"] != "served")):
                tune[k] = t
    entries, baselines, tunes, problems, artifacts = [], [], [], {}, {}
    os.makedirs(os.path.join(out, "ptx"), exist_ok=True)
    for k in sorted(set(figures) | set(tune)):
        d, idx, es, bs = figures.get(k, (None, None, [], []))
        # A tune's answer needs the figures it stands on: one that finished after its
        # request's export (served or baseline_faster, with no baselines here) is left out.
        ts = [t for t in [tune.get(k)] if t and (t["state"] == "failed" or bs)]
        if not (es or bs or ts):
            continue
        arts = {a["sha256"]: a for a in idx["artifacts"]} if idx else {}
        for e in es:
            artifacts[e["artifact"]] = arts[e["artifact"]]
            shutil.copy(os.path.join(d, "ptx", e["artifact"] + ".ptx"), os.path.join(out, "ptx", e["artifact"] + ".ptx"))
        entries += es
        baselines += bs
        tunes += ts
        problems[k] = (es or bs or ts)[0]["problem"]
    classes = {c["name"]: c for _, idx in bundles for c in idx["device_classes"]}
    index = dict(bundles[0][1], device_classes=sorted(classes.values(), key=lambda c: c["name"]), problems=[problems[k] for k in sorted(problems)],
                 artifacts=[artifacts[a] for a in sorted(artifacts)], entries=entries, baselines=baselines)
    if tunes:
        index["tunes"] = tunes
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(index, f)
    print(f"{len(problems)} problems, {len(entries)} entries, {len(baselines)} baselines, {len(tunes)} tunes, {len(artifacts)} artifacts in {out}")


if __name__ == "__main__":
    args = sys.argv[1:]
    best = "--best" in args
    args = [a for a in args if a != "--best"]
    if len(args) < 4:
        sys.exit(__doc__)
    main(args[0], args[1], args[2], args[3:], best, grid_class_only=True)
