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
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from catalog_index import MARGIN, ranked_speedups  # noqa: E402

BASE = "cublaslt_autotune_max"


def bucket(m, n, k):
    f = math.log2(m * n * k)
    return "<2^30" if f < 30 else "2^30-36" if f < 36 else "2^36-40" if f < 40 else ">=2^40"


def graph(speedups):
    return mode(speedups, "graph")


def mode(speedups, name):
    try:
        return json.loads(speedups)[name][BASE] if speedups else None
    except (KeyError, TypeError, ValueError):
        return None


def serves(speedups):
    """The service's rule: every baseline beaten by MARGIN in the ranked speedups."""
    try:
        ranked = ranked_speedups(json.loads(speedups) if speedups else {})
    except ValueError:
        return False
    return bool(ranked) and all(isinstance(x, (int, float)) and x >= MARGIN for x in ranked.values())


def gm(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main():
    db = sqlite3.connect(sys.argv[1])
    # Only the runs this service's workers made, each a job's (an imported bundle's runs,
    # named regime or not, have none).
    runs = db.execute(
        "SELECT r.id, r.manifest_id, r.verdict, r.speedups, r.regimes, p.layout, p.m, p.n, p.k, r.message, r.details "
        "FROM runs r JOIN problems p ON p.id = r.problem_id WHERE r.regime IS NOT NULL "
        "AND EXISTS (SELECT 1 FROM jobs j WHERE j.run_id = r.id) ORDER BY r.id").fetchall()
    # The figure each kernel held before: its imported run (no job made it), the newest.
    legacy = {}
    for mid, sp in db.execute("SELECT manifest_id, speedups FROM runs r WHERE speedups IS NOT NULL "
                              "AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.run_id = r.id) ORDER BY id"):
        legacy[mid] = graph(sp)
    rows, verdicts, fresh = [], {}, []
    for rid, mid, verdict, sp, regimes, layout, m, n, k, message, details in runs:
        fresh.extend(fresh_rows(details, layout, m, n, k, verdict))
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
        reg = json.loads(regimes) if regimes else {}
        warm = (((reg.get("l2_warm") or {}).get("speedups") or {}).get("graph") or {}).get(BASE)
        cold_sets = (reg.get("l2_cold") or {}).get("buffer_sets")
        rows.append({"run": rid, "layout": layout, "m": m, "n": n, "k": k, "verdict": verdict, "cold": graph(sp), "warm": warm,
                     "paced": mode(sp, "paced"), "serves": serves(sp),
                     "before": legacy.get(mid), "cold_sets": cold_sets, "message": message if verdict != "pass" else ""})
    print(f"re-measured runs: {len(rows)}; verdicts: {verdicts}")
    for r in rows:
        if r["verdict"] != "pass":
            print(f"  NOT PASS {r['layout']} {r['m']}x{r['n']}x{r['k']}: {r['verdict']}: {r['message'][:300]}")
    paced = [r for r in rows if r["paced"] is not None]
    if paced:
        served = [r for r in paced if r["serves"]]
        print(f"\ntimed paced too (2^36 FLOP and up): {len(paced)}, {len(served)} served (every baseline beaten by 1% "
              "in both); over cuBLASLt-autotune-max, L2-cold:")
        print(f"  {'problem':<22} {'before':>7} {'graph':>7} {'paced':>7}  served")
        for r in paced:
            before = f"{r['before']:.3f}" if r["before"] else "-"
            problem = f"{r['layout']} {r['m']}x{r['n']}x{r['k']}"
            print(f"  {problem:<22} {before:>7} {r['cold']:>7.3f} {r['paced']:>7.3f}  "
                  + ("yes" if r in served else "no"))
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
    fresh_summary(fresh)
    if len(sys.argv) > 2:
        with open(sys.argv[2], "w") as f:
            json.dump({"runs": rows, "fresh_inputs": fresh}, f, indent=1)


def fresh_rows(details, layout, m, n, k, verdict):
    """The fresh-input stage's figures of one run, one row per regime, with what the stage
    cost against the whole job."""
    try:
        d = json.loads(details) if details else {}
    except ValueError:
        return []
    out = []
    for regime, f in (d.get("fresh_inputs") or {}).items():
        fig = f.get("figures") or {}
        out.append({"layout": layout, "m": m, "n": n, "k": k, "verdict": verdict, "regime": regime,
                    "ratio": fig.get("ratio"), "same_us": fig.get("same_us"), "fresh_us": fig.get("fresh_us"),
                    "refresh_us": fig.get("refresh_us"), "stride": f.get("sector_stride"), "passed": f.get("passed"),
                    "fresh_ms": d.get("fresh_ms"), "duration_ms": d.get("duration_ms")})
    return out


def quantile(xs, q):
    xs = sorted(x for x in xs if x is not None)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def fresh_summary(rows):
    """The fresh-input stage over the runs: the ratio of fresh to timed figures an honest
    catalog kernel shows, the rewrite's stride, and the stage's share of a job's time."""
    if not rows:
        print("\nfresh-input stage: no run carries its figures")
        return
    print(f"\nfresh-input stage: {len(rows)} regime checks, {sum(1 for r in rows if r['passed'])} passed")
    print(f"{'regime':<8} {'checks':>6} {'ratio p10':>9} {'median':>7} {'p90':>6} {'max':>6} {'stride>1':>8}")
    for regime in sorted({r["regime"] for r in rows}):
        g = [r for r in rows if r["regime"] == regime]
        ratios = [r["ratio"] for r in g]
        print(f"{regime:<8} {len(g):>6} {quantile(ratios, 0.1):>9.3f} {quantile(ratios, 0.5):>7.3f} {quantile(ratios, 0.9):>6.3f} "
              f"{max((x for x in ratios if x is not None), default=float('nan')):>6.3f} {sum(1 for r in g if (r['stride'] or 1) > 1):>8}")
    jobs = {(r["layout"], r["m"], r["n"], r["k"]): r for r in rows if r["fresh_ms"] and r["duration_ms"]}
    shares = [r["fresh_ms"] / (r["duration_ms"] - r["fresh_ms"]) for r in jobs.values() if r["duration_ms"] > r["fresh_ms"]]
    total_fresh = sum(r["fresh_ms"] for r in jobs.values())
    total = sum(r["duration_ms"] for r in jobs.values())
    if shares:
        print(f"stage time over the job's time without it: median {quantile(shares, 0.5):.3f}, p90 {quantile(shares, 0.9):.3f}; "
              f"all jobs: {total_fresh / 1e3:.1f} s of {total / 1e3:.1f} s ({total_fresh / max(total - total_fresh, 1e-9):.3f} added)")


main()
