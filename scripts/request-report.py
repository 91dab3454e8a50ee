"""What `device-run.sh request` ends with: a tuning request's problems, each with its
state, its speedup over cuBLASLt-autotune-max (graph mode, measured side by side in the
run that admitted it), the seconds its tune job held a GPU and the seconds from the
request to its end; then the summary the issue asks for (served geometric mean with
every other problem counted as 1.0, wins, the split by token count, median and p90
times). It also writes the part of the catalog the request produced as a bundle.

    python3 scripts/request-report.py KAAS_URL REQUEST_ID SERVE_LOG EXPORT_DIR OUT_DIR
"""

import gzip
import json
import math
import os
import re
import shutil
import statistics
import sys
import urllib.request
from datetime import datetime


def get(url: str):
    return json.load(urllib.request.urlopen(url))


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def job_seconds(log: str) -> dict:
    """Seconds each job held its worker, from the worker's `running job` (a verify job)
    or `tuning` (a tune job) and `job finished` log lines."""
    start, held = {}, {}
    for line in open(log, errors="replace"):
        m = re.match(r"(\S+Z)\s+\S+\s+kaas::work::worker: (running job|tuning|job finished).*?\bjob=(\d+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
        if not m:
            continue
        t, what, job = ts(m.group(1)), m.group(2), int(m.group(3))
        if what in ("running job", "tuning"):
            start[job] = t
        elif job in start:
            held[job] = (t - start[job]).total_seconds()
    return held


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(math.ceil(q * len(xs))) - 1)] if xs else float("nan")


def main(url, request_id, serve_log, export_dir, out):
    req = get(f"{url}/v1/tuning-requests/{request_id}")
    json.dump(req, open(f"{out}/request.json", "w"), indent=1)
    held = job_seconds(serve_log)
    created = ts(req["created_at"])
    rows, tunes = [], {}
    for item in req["items"]:
        tune = get(url + item["tune"]) if item.get("tune") else None
        tunes[item["problem"]] = tune
        end = tune and tune.get("finished_at")
        rows.append({
            "problem": item["problem"], "label": item.get("label") or "", "state": item["state"],
            "speedup": item.get("speedup"), "held_s": held.get(tune and tune.get("job_id")) if tune else None,
            # Only tunes this request waited for: one that finished before it (a shipped
            # catalog's, answered at once) has no time from the request.
            "to_end_s": (ts(end) - created).total_seconds() if end and ts(end) >= created else None,
            "code": ((tune or {}).get("result") or {}).get("code"),
            "tried": len(((tune or {}).get("trace") or {}).get("tried", [])),
        })
    json.dump(tunes, open(f"{out}/tunes.json", "w"), indent=1)
    print("problem | label | state | × autotune-max | code | codes tried | GPU s | request → end s")
    for r in rows:
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.3f}"
        f = lambda x: "-" if x is None else f"{x:.1f}"
        print(f"{r['problem']} | {r['label']} | {r['state']} | {sp} | {r['code'] or '-'} | {r['tried']} | {f(r['held_s'])} | {f(r['to_end_s'])}")
    served = [r for r in rows if r["state"] == "served" and r["speedup"]]
    ratio = lambda r: r["speedup"] if r in served else 1.0
    geo = math.exp(sum(math.log(ratio(r)) for r in rows) / len(rows)) if rows else float("nan")
    print(f"\n{len(rows)} problems: {req['counts']}; served geometric mean over cuBLASLt-autotune-max "
          f"(others 1.0) {geo:.4f}; wins {len(served)}")
    by_tokens = {}
    for r in rows:
        m = re.search(r"@ (\d+) tokens", r["label"])
        by_tokens.setdefault(int(m.group(1)) if m else 0, []).append(r)
    for t in sorted(by_tokens):
        rs = by_tokens[t]
        g = math.exp(sum(math.log(ratio(r)) for r in rs) / len(rs))
        print(f"  tokens {t}: {len(rs)} problems, served {sum(r in served for r in rs)}, geomean {g:.4f}")
    held_s = [r["held_s"] for r in rows if r["held_s"] is not None]
    ends = [r["to_end_s"] for r in rows if r["to_end_s"] is not None]
    print(f"GPU seconds per tune: median {statistics.median(held_s) if held_s else float('nan'):.1f}, p90 {pct(held_s, 0.9):.1f} (n={len(held_s)})")
    print(f"request → end: median {statistics.median(ends) if ends else float('nan'):.1f} s, p90 {pct(ends, 0.9):.1f} s")

    # The request's part of the catalog: its served entries and every baseline measured
    # for its problems, as a bundle for kernels/.
    idx = json.load(open(os.path.join(export_dir, "index.json")))
    wanted = {r["problem"] for r in rows}
    path = lambda p: f"{p['arch']}/{p['acc']}/{p['layout']}/{p['m']}x{p['n']}x{p['k']}"
    entries = [e for e in idx["entries"] if path(e["problem"]) in wanted]
    baselines = [b for b in idx["baselines"] if path(b["problem"]) in wanted]
    tunes = [t for t in idx.get("tunes", []) if path(t["problem"]) in wanted]
    arts = {e["artifact"] for e in entries}
    probs = {path(e["problem"]) for e in entries} | {path(b["problem"]) for b in baselines} | {path(t["problem"]) for t in tunes}
    bundle = dict(idx, entries=entries, baselines=baselines, tunes=tunes,
                  artifacts=[a for a in idx["artifacts"] if (a["sha256"] if isinstance(a, dict) else a) in arts],
                  problems=[p for p in idx["problems"] if path(p) in probs])
    dst = os.path.join(out, "bundle")
    os.makedirs(os.path.join(dst, "ptx"), exist_ok=True)
    with gzip.open(os.path.join(dst, "index.json.gz"), "wt") as f:
        json.dump(bundle, f)
    for a in arts:
        shutil.copy(os.path.join(export_dir, "ptx", a + ".ptx"), os.path.join(dst, "ptx", a + ".ptx"))
    print(f"bundle: {len(entries)} entries, {len(baselines)} baselines, {len(tunes)} tunes, {len(arts)} artifacts in {dst}")


if __name__ == "__main__":
    main(*sys.argv[1:6])
