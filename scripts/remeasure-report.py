"""What a re-measure pass found (`device-run.sh remeasure`), from the service's SQLite file.

    python3 scripts/remeasure-report.py DB [OUT.json]

For every run of a re-measured catalog kernel (a run of a manifest that the catalog held
before, with a named regime): its verdict, its graph speedup over cuBLASLt-autotune-max in
each regime, and the figure the catalog held before (timed over three rotating buffer
sets). Then, per layout and FLOP bucket, the geometric means over the passing runs (an
entry no longer faster than the baselines counts as what it measured, not 1.0: these are
the kernels' own figures, not the served catalog's), and the verdicts that withdrew
entries.
"""

import json
import math
import sqlite3
import sys

BASE = "cublaslt_autotune_max"


def bucket(m, n, k):
    f = math.log2(m * n * k)
    return "<2^30" if f < 30 else "2^30-36" if f < 36 else "2^36-40" if f < 40 else ">=2^40"


def graph(speedups):
    try:
        return json.loads(speedups)["graph"][BASE] if speedups else None
    except (KeyError, TypeError, ValueError):
        return None


def gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    db = sqlite3.connect(sys.argv[1])
    runs = db.execute(
        "SELECT r.id, r.manifest_id, r.verdict, r.speedups, r.regimes, p.layout, p.m, p.n, p.k, r.message "
        "FROM runs r JOIN problems p ON p.id = r.problem_id WHERE r.regime IS NOT NULL ORDER BY r.id").fetchall()
    legacy = {}
    for mid, sp in db.execute("SELECT manifest_id, speedups FROM runs WHERE regime IS NULL AND speedups IS NOT NULL"):
        legacy[mid] = graph(sp)
    rows, verdicts = [], {}
    for rid, mid, verdict, sp, regimes, layout, m, n, k, message in runs:
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        reg = json.loads(regimes) if regimes else {}
        warm = (((reg.get("l2_warm") or {}).get("speedups") or {}).get("graph") or {}).get(BASE)
        cold_sets = (reg.get("l2_cold") or {}).get("buffer_sets")
        rows.append({"run": rid, "layout": layout, "m": m, "n": n, "k": k, "verdict": verdict, "cold": graph(sp), "warm": warm,
                     "before": legacy.get(mid), "cold_sets": cold_sets, "message": message if verdict != "pass" else ""})
    print(f"re-measured runs: {len(rows)}; verdicts: {verdicts}")
    for r in rows:
        if r["verdict"] != "pass":
            print(f"  NOT PASS {r['layout']} {r['m']}x{r['n']}x{r['k']}: {r['verdict']}: {r['message'][:300]}")
    print(f"\n{'layout':<6} {'bucket':<9} {'runs':>5} {'before':>8} {'l2_cold':>8} {'l2_warm':>8} {'cold>1':>7} {'warm>1':>7}")
    groups = {}
    for r in rows:
        if r["verdict"] == "pass":
            groups.setdefault((r["layout"], bucket(r["m"], r["n"], r["k"])), []).append(r)
    for key in sorted(groups) + [("all", "all")]:
        g = groups.get(key) if key != ("all", "all") else [r for v in groups.values() for r in v]
        if not g:
            continue
        print(f"{key[0]:<6} {key[1]:<9} {len(g):>5} {gm([r['before'] for r in g]):>8.4f} {gm([r['cold'] for r in g]):>8.4f} "
              f"{gm([r['warm'] for r in g]):>8.4f} {sum(1 for r in g if (r['cold'] or 0) > 1):>7} {sum(1 for r in g if (r['warm'] or 0) > 1):>7}")
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump(rows, f, indent=1)


main()
