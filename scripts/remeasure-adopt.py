"""Adopt a re-measure pass (`device-run.sh remeasure`) into shipped bundles.

    python3 scripts/remeasure-adopt.py OUT_DIR SHIPPED_BUNDLE EXPORT_DIR [EXPORT_DIR ...]

SHIPPED_BUNDLE is a bundle directory (index.json.gz or index.json, ptx/); each EXPORT_DIR
is the `full` export of a re-measure pass (its remeasure.tgz). For every entry of the
shipped bundle that a pass measured again — the same device class, problem, artifact and
manifest, with a run whose regime is named — the entry's run is replaced by the new one
and the problem's baselines on that device class by those the new run timed beside it.
An entry whose new run did not pass is dropped (the service withdraws it the same way).
Writes OUT_DIR/index.json with OUT_DIR/ptx linked to the shipped PTX; canonicalize it
with `kaas import` into a fresh database and `kaas export` (docs/bundles.md).
"""

import json
import os
import sys


from catalog_index import load_bundle as load


def key(device_class, p):
    return (device_class, p["arch"], p["acc"], p["layout"], p["m"], p["n"], p["k"])


def main():
    out, shipped_dir, exports = sys.argv[1], sys.argv[2], sys.argv[3:]
    shipped = load(shipped_dir)
    new_runs, new_baselines = {}, {}
    for d in exports:
        idx = load(d)
        for e in idx["entries"]:
            if e["run"].get("regime"):
                new_runs[key(e["device_class"], e["problem"])] = e
        for b in idx["baselines"]:
            new_baselines.setdefault(key(b["device_class"], b["problem"]), []).append(b)
    entries, replaced, dropped, touched = [], 0, 0, set()
    for e in shipped["entries"]:
        k = key(e["device_class"], e["problem"])
        n = new_runs.get(k)
        if n is None or n["artifact"] != e["artifact"] or n["manifest"] != e["manifest"]:
            entries.append(e)
            continue
        touched.add(k)
        if n["run"]["verdict"] != "pass":
            dropped += 1
            continue
        entries.append({**e, "run": n["run"]})
        replaced += 1
    baselines = [b for b in shipped["baselines"] if key(b["device_class"], b["problem"]) not in touched]
    for k in sorted(touched):
        fresh = [b for b in new_baselines.get(k, []) if b["measured_at"] >= new_runs[k]["run"]["measured_at"][:19]]
        baselines.extend(fresh)
    used = {e["artifact"] for e in entries}
    shipped["entries"] = entries
    shipped["baselines"] = baselines
    shipped["artifacts"] = [a for a in shipped["artifacts"] if a["sha256"] in used]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "index.json"), "w") as f:
        json.dump(shipped, f, indent=2)
    ptx = os.path.join(out, "ptx")
    if not os.path.exists(ptx):
        os.symlink(os.path.abspath(os.path.join(shipped_dir, "ptx")), ptx)
    print(f"{shipped_dir}: {replaced} entries re-measured, {dropped} dropped, {len(entries)} entries, {len(baselines)} baselines")


main()
