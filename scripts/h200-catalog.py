#!/usr/bin/env python3
"""The H200 grid catalog (`kernels/h200`), built a batch at a time over many GPU runs: every
one of the grid's 2,000 problems (tn and nn, f32 accumulation) answered from measurements
made on an H200 -- a kernel that wins, or a measured `baseline_faster`.

    python3 scripts/h200-catalog.py status [--batch DIR]
        what kernels/h200 answers and what is left, per layout and FLOP bucket, and its
        served geometric mean over cuBLASLt-autotune-max in both regimes beside kernels/h100's
        (--batch: the same for one returned batch alone)
    python3 scripts/h200-catalog.py plan --gpus 4 --seconds 420 [--job-seconds 4.2] [--tune-seconds S] [--out DIR]
        the next batch: first the H100 catalog's kernels (their PTX and concrete manifests)
        for problems without an H200 answer, in an order spread over layouts and FLOP
        buckets, as many as the GPUs finish in the seconds at --job-seconds of GPU time
        each; then, with --tune-seconds, tune jobs for the problems no H100 kernel can
        answer (none, or it failed on an H200). --out writes it for `submit`
    python3 scripts/h200-catalog.py adopt BATCH.tgz [BATCH.tgz ...] [--kaas BIN]
        merges returned batches (`device-run.sh h200`'s $OUT/h200-batch.tgz) into
        kernels/h200 so that it only improves, then canonicalizes it through
        `kaas import` and `kaas export` (docs/bundles.md)

On the device (`bash scripts/device-run.sh h200 SECONDS`, which runs all of this):

    python3 scripts/h200-catalog.py submit DIR --url URL --device H200     (token: $KAAS_TOKEN)
    python3 scripts/h200-catalog.py export FULL_EXPORT DB OUT --catalog TREE --device H200

A problem has an H200 answer when kernels/h200 holds an entry for it (a passing run,
winning or not: the service answers a losing one `baseline_faster`) or a tune of it on the
H200 that ended `baseline_faster`, as the service counts answers (no H100 stand-in then). An H100 kernel that failed verification on
an H200 is kept in kernels/h200/failed.tsv, so later plans do not submit it again; its
problem is left to a tune.
"""

import argparse
import collections
import concurrent.futures
import gzip
import importlib.util
import json
import math
import os
import shutil
import sqlite3
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request

import catalog_index
from catalog_index import GRID, bucket, geomean, has_index, load_dir

HERE = os.path.dirname(os.path.abspath(__file__))
KERNELS = os.path.join(os.path.dirname(HERE), "kernels")
CLASS = "H200"
# The regime the catalog ranks by (RANKED in src/harness/bench.rs), and the one shown beside.
RANKED, BESIDE = "l2_cold", "l2_warm"
AUTOTUNE_MAX = "cublaslt_autotune_max"
# The tune state that is an answer without a catalog entry, as the service counts it
# (src/catalog/mod.rs, `tuned_to_baseline`): a served tune's kernel is an entry, and a
# failed tune measured nothing to answer with.
ANSWERING_TUNES = ("baseline_faster",)
# Verdicts that do not judge the kernel (Verdict::is_kernel_fault): such a run is retried.
NOT_THE_KERNELS_FAULT = ("pass", "internal_error")
FAILED_TSV = "failed.tsv"
FAILED_FIELDS = ["layout", "m", "n", "k", "artifact", "verdict", "measured_at", "message"]
# Tuning requests take at most this many problems (TuneLimits::max_problems).
TUNE_REQUEST_PROBLEMS = 256


def key(p):
    return (p["layout"], p["m"], p["n"], p["k"])


def grid_problems():
    """The grid (GRID_DIMS in src/harness/baselines.rs, as kernels/h100 and
    kernels/baselines-h200 cover it): every (layout, M, N, K), f32 accumulation, sm_90."""
    return [(l, m, n, k) for l in ("tn", "nn") for m in GRID for n in GRID for k in GRID]


def on_grid(p):
    return p["arch"] == "sm_90" and p["acc"] == "f32" and p["m"] in GRID and p["n"] in GRID and p["k"] in GRID


def graph_speedups(run, regime=None):
    """A run's graph-mode speedups in `regime` (None: its ranked, top-level figures, as the
    service judges them: capped by the paced mode's, catalog_index.ranked_speedups)."""
    if regime is None or run.get("regime") == regime:
        s = run.get("speedups") or {}
    else:
        s = ((run.get("regimes") or {}).get(regime) or {}).get("speedups") or {}
    return catalog_index.ranked_speedups(s)


def beats_all(speedups):
    """The service's beats_all (src/catalog/mod.rs): every baseline beaten by SERVE_MARGIN."""
    return bool(speedups) and all(isinstance(v, (int, float)) and v >= catalog_index.MARGIN for v in speedups.values())


class Catalog:
    """kernels/h200 as it stands, with the H100 catalog it starts from."""

    def __init__(self, root):
        self.root = root
        self.h200_dir = os.path.join(root, "h200")
        self.h200 = load_dir(self.h200_dir)
        self.h100_dir = os.path.join(root, "h100")
        self.h100 = catalog_index.load_bundle(self.h100_dir)
        self.failed = read_failed(os.path.join(self.h200_dir, FAILED_TSV))

    def answers(self):
        return answers(self.h200)

    def tuned(self):
        """The grid problems an H200 tune has searched, whatever it ended in."""
        return {key(t["problem"]) for t in self.h200.get("tunes", []) if t["device_class"] == CLASS}


def answers(idx):
    """{(layout, m, n, k): how the bundle answers it on the H200}: `kernel` (an entry that
    beats every baseline), `baseline` (an entry that does not: a measured baseline_faster),
    `tuned` (no entry; a tune that ended baseline_faster)."""
    out = {}
    for e in idx.get("entries", []):
        if e["device_class"] == CLASS and e["run"]["verdict"] == "pass" and on_grid(e["problem"]):
            k = key(e["problem"])
            won = beats_all(graph_speedups(e["run"]))
            out[k] = "kernel" if won or out.get(k) == "kernel" else "baseline"
    for t in idx.get("tunes", []):
        if t["device_class"] == CLASS and t["state"] in ANSWERING_TUNES and on_grid(t["problem"]):
            out.setdefault(key(t["problem"]), "tuned")
    return out


def read_failed(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        return [dict(zip(head, line.rstrip("\n").split("\t"))) for line in f if line.strip()]


def write_failed(path, rows):
    rows = sorted({(r["layout"], int(r["m"]), int(r["n"]), int(r["k"]), r["artifact"]): r for r in rows}.items())
    with open(path, "w") as f:
        f.write("\t".join(FAILED_FIELDS) + "\n")
        for _, r in rows:
            f.write("\t".join(str(r.get(c, "")).replace("\t", " ").replace("\n", " ") for c in FAILED_FIELDS) + "\n")


def failed_keys(rows):
    return {(r["layout"], int(r["m"]), int(r["n"]), int(r["k"]), r["artifact"]) for r in rows}


def spread(items, problem_of):
    """`items` in an order that spreads every prefix over layouts and FLOP buckets alike:
    each (layout, bucket) group in bit-reversed order of its FLOP-sorted list (so a prefix
    of a group samples all its sizes), the groups interleaved by the fraction of each taken.
    A batch cut anywhere is then a small copy of the whole, so its figures read as the
    catalog's will, and every bucket finishes at about the same batch."""
    groups = collections.defaultdict(list)
    for it in items:
        p = problem_of(it)
        groups[(p["layout"], bucket(2 * p["m"] * p["n"] * p["k"]))].append(it)
    ranked = []
    for g, xs in groups.items():
        xs.sort(key=lambda it: (lambda p: (p["m"] * p["n"] * p["k"], p["m"], p["n"], p["k"]))(problem_of(it)))
        bits = max(1, math.ceil(math.log2(len(xs))))
        order = sorted(range(1 << bits), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))
        for r, i in enumerate(i for i in order if i < len(xs)):
            ranked.append(((r + 0.5) / len(xs), g, xs[i]))
    ranked.sort(key=lambda t: (t[0], t[1]))
    return [t[2] for t in ranked]


def problem_dict(k):
    layout, m, n, kk = k
    return {"arch": "sm_90", "acc": "f32", "layout": layout, "m": m, "n": n, "k": kk}


def path_of(k):
    """A grid problem's path, as the service names it."""
    return "sm_90/f32/{}/{}x{}x{}".format(*k)


def improvements(cat):
    """The problems under 2^30 FLOP that an H100 kernel wins on the H200 and no H200 tune
    has searched: tuned there, a kernel may win by more (adopt keeps a tune's kernel only
    where it is faster). The kernels that kept the least of their H100 speedup on the
    H200 first."""
    ans = cat.answers()
    tuned = cat.tuned()
    h100 = catalog_index.served_entries(cat.h100)
    served = catalog_index.served_entries(cat.h200)

    def kept(k):
        on_h200 = (graph_speedups(served[k]["run"]) or {}).get(AUTOTUNE_MAX)
        on_h100 = (graph_speedups(h100[k]["run"]) or {}).get(AUTOTUNE_MAX) if k in h100 else None
        return on_h200 / on_h100 if on_h200 and on_h100 else 1.0

    small = [k for k in grid_problems() if ans.get(k) == "kernel" and k not in tuned and k in served
             and bucket(2 * k[1] * k[2] * k[3]) == catalog_index.BUCKETS[0]]
    return sorted(small, key=kept)


def work_left(cat):
    """(the H100 entries to measure on an H200, the problems to tune, the problems to tune
    again): for every grid problem without an H200 answer, its H100 kernel unless that
    failed on an H200, else a tune; and every problem answered by an entry that does not
    win (an H100 kernel that lost on the H200) and not yet tuned on an H200, a retune: the
    H100 tuner's winner is not the H200's."""
    ans = cat.answers()
    tuned = cat.tuned()
    retunes = [k for k in grid_problems() if ans.get(k) == "baseline" and k not in tuned]
    h100 = {k: e for k, e in catalog_index.served_entries(cat.h100).items() if on_grid(e["problem"])}
    failed = failed_keys(cat.failed)
    kernels, tunes = [], []
    for k in grid_problems():
        if k in ans:
            continue
        e = h100.get(k)
        if e is not None and k + (e["artifact"],) not in failed:
            kernels.append(e)
        else:
            tunes.append(k)
    return kernels, tunes, retunes


def plan(a):
    cat = Catalog(a.catalog)
    kernels, tunes, retunes = work_left(cat)
    improve = improvements(cat) if a.improve else []
    # Problems an earlier call of this machine submitted whose batch has not been adopted
    # into the carried tree yet: planned again, they would be measured twice.
    if a.exclude and os.path.exists(a.exclude):
        with open(a.exclude) as f:
            done = {line.strip() for line in f if line.strip()}
        kernels = [e for e in kernels if path_of(key(e["problem"])) not in done]
        tunes = [k for k in tunes if path_of(k) not in done]
        retunes = [k for k in retunes if path_of(k) not in done]
        improve = [k for k in improve if path_of(k) not in done]
        print(f"excluded: {len(done)} problem(s) this machine submitted before (--exclude {a.exclude})")
    # The H100 winners first: they are what H200 clients are offered as stand-ins until
    # measured there, and where a win on the H200 is likeliest. The entries that lost on
    # the H100 follow; measured on an H200 they answer their problem too, for a fraction
    # of a tune's GPU time.
    won = [e for e in kernels if beats_all(graph_speedups(e["run"]))]
    lost = [e for e in kernels if not beats_all(graph_speedups(e["run"]))]
    kernels = spread(won, lambda e: e["problem"]) + spread(lost, lambda e: e["problem"])
    # Unanswered problems first; then the retunes, smallest FLOP bucket first, where a tune
    # most often serves: of kernels/h200's first 317 tunes, 9 of 11 under 2^30 FLOP served a
    # kernel, 27 of 171 in 2^30–2^36 and 11 of 135 above (where both catalogs' served
    # figure is 1.000).
    # With --improve, the small problems' improvements (in their own order) come right after.
    n_first = len(tunes)
    tunes = spread(tunes, problem_dict) + improve + [k for b in catalog_index.BUCKETS
                                                     for k in spread([k for k in retunes if bucket(2 * k[1] * k[2] * k[3]) == b], problem_dict)]
    capacity = a.gpus * a.seconds
    n_kernels = min(len(kernels), int(capacity // a.job_seconds))
    left = capacity - n_kernels * a.job_seconds
    n_tunes = min(len(tunes), int(left // a.tune_seconds)) if a.tune_seconds > 0 else 0
    batch_k, batch_t, batch_r = kernels[:n_kernels], tunes[:min(n_tunes, n_first)], tunes[n_first:n_tunes]
    print(f"left: {len(kernels)} H100 kernels to measure on an H200, {n_first} problems to tune, {len(retunes)} to tune again"
          + (f" and {len(improve)} small ones to improve" if a.improve else "") + "; "
          f"capacity {a.gpus} GPUs x {a.seconds:.0f} s = {capacity:.0f} GPU s")
    print(f"batch: {len(batch_k)} H100 kernels at {a.job_seconds} s"
          + (f", {len(batch_t)} tunes and {len(batch_r)} retunes at {a.tune_seconds} s" if a.tune_seconds > 0 else " (no tunes: --tune-seconds 0)")
          + f" = {len(batch_k) * a.job_seconds + (len(batch_t) + len(batch_r)) * a.tune_seconds:.0f} GPU s")
    per = collections.Counter((e["problem"]["layout"], bucket(2 * e["problem"]["m"] * e["problem"]["n"] * e["problem"]["k"])) for e in batch_k)
    per_t = collections.Counter((k[0], bucket(2 * k[1] * k[2] * k[3])) for k in batch_t + batch_r)
    for g in sorted(set(per) | set(per_t), key=lambda g: (g[0], catalog_index.BUCKETS.index(g[1]))):
        print(f"  {g[0]} {g[1]}: {per[g]} kernels" + (f", {per_t[g]} tunes" if per_t[g] else ""))
    if a.out:
        os.makedirs(os.path.join(a.out, "ptx"), exist_ok=True)
        jobs = []
        for e in batch_k:
            src = os.path.join(cat.h100_dir, "ptx", e["artifact"] + ".ptx")
            shutil.copy(src, os.path.join(a.out, "ptx", e["artifact"] + ".ptx"))
            jobs.append({k: e[k] for k in ("problem", "artifact", "name", "description", "manifest")})
        with open(os.path.join(a.out, "plan.json"), "w") as f:
            json.dump({"kernels": jobs, "tunes": [path_of(k) for k in batch_t], "retunes": [path_of(k) for k in batch_r]}, f)
        if a.exclude:
            with open(a.exclude, "a") as f:
                f.writelines(path_of(key(e["problem"])) + "\n" for e in batch_k)
                f.writelines(path_of(k) + "\n" for k in batch_t + batch_r)
        print(f"written to {a.out}")


def post(url, token, body):
    """POSTs JSON with the token; sent again after a 429's Retry-After, as `kaas` does."""
    data = json.dumps(body).encode()
    for _ in range(10):
        req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            wait = e.headers.get("Retry-After") if e.code == 429 else None
            if wait is None:
                return e.code, json.loads(e.read() or b"null")
            time.sleep(min(60, int(wait)))
    return 429, None


def submit(a):
    """Queues a written plan on a server: one submission per H100 entry (its PTX, manifest,
    name and description, so the H200 entry reads as the H100 one does), several at a time
    since each is assembled by ptxas where the server has it; then the tunes."""
    token = os.environ["KAAS_TOKEN"]
    p = json.load(open(os.path.join(a.batch, "plan.json")))

    def one(job):
        ptx = open(os.path.join(a.batch, "ptx", job["artifact"] + ".ptx")).read()
        body = {"ptx": ptx, "manifests": [job["manifest"]], "name": job["name"], "description": job["description"], "device_classes": [a.device]}
        status, answer = post(a.url + "/v1/submissions", token, body)
        return job["problem"], status, answer

    bad = 0
    with concurrent.futures.ThreadPoolExecutor(a.parallel) as pool:
        for prob, status, answer in pool.map(one, p["kernels"]):
            if status not in (200, 202):
                bad += 1
                print(f"submit {prob['layout']} {prob['m']}x{prob['n']}x{prob['k']}: {status} {json.dumps(answer)[:300]}")
    print(f"submitted: {len(p['kernels']) - bad} of {len(p['kernels'])} H100 kernels")
    tunes = p["tunes"] + p.get("retunes", [])
    for i in range(0, len(tunes), TUNE_REQUEST_PROBLEMS):
        chunk = tunes[i:i + TUNE_REQUEST_PROBLEMS]
        body = {"problems": chunk, "device": a.device}
        if a.tune_budget_ms:
            body["budget_ms"] = a.tune_budget_ms
        status, answer = post(a.url + "/v1/tuning-requests", token, body)
        print(f"tuning request of {len(chunk)} problems: {status}" + ("" if status in (200, 201) else f" {json.dumps(answer)[:300]}"))


def without(a):
    """(device) kernels/h200 without the figures and tunes of the batch's retunes, for the
    server the batch runs on: a problem answered there is not tuned again."""
    p = json.load(open(os.path.join(a.batch, "plan.json")))
    drop = set(p.get("retunes", []))
    src = os.path.join(a.catalog, "h200")
    idx = load_dir(src)
    keep = lambda x: path_of(key(x["problem"])) not in drop
    for part in ("entries", "baselines", "tunes"):
        if part in idx:
            idx[part] = [x for x in idx[part] if keep(x)]
    idx["problems"] = [x for x in idx["problems"] if path_of(key(x)) not in drop]
    used = {e["artifact"] for e in idx["entries"]}
    idx["artifacts"] = [x for x in idx["artifacts"] if x["sha256"] in used]
    os.makedirs(a.out)
    with open(os.path.join(a.out, "index.json"), "w") as f:
        json.dump(idx, f)
    os.symlink(os.path.abspath(os.path.join(src, "ptx")), os.path.join(a.out, "ptx"))
    print(f"kernels/h200 for the server: {len(drop)} retuned problems left out, {len(idx['entries'])} entries kept")


def export(a):
    """The batch's part of a server's export: the entries, baselines and tunes of the
    workers' class that the catalog tree the server started from did not hold, their
    problems and PTX, as a bundle in OUT; and OUT/failed.tsv, the runs of this batch's jobs
    that failed verification for a fault of the kernel (from the server's SQLite file)."""
    full = catalog_index.load_bundle(a.full)
    before = [load_dir(d) for d in bundle_dirs(a.catalog)]
    had_e = {(json.dumps(e["problem"], sort_keys=True), e["artifact"], e["run"]["measured_at"]) for i in before for e in i["entries"]}
    had_b = {(json.dumps(b["problem"], sort_keys=True), b["library"], b["layout"], b["mode"], b["measured_at"]) for i in before for b in i["baselines"]}
    had_t = {(json.dumps(t["problem"], sort_keys=True), t["finished_at"]) for i in before for t in i.get("tunes", [])}
    ps = lambda x: json.dumps(x["problem"], sort_keys=True)
    entries = [e for e in full["entries"] if e["device_class"] == a.device and (ps(e), e["artifact"], e["run"]["measured_at"]) not in had_e]
    baselines = [b for b in full["baselines"] if b["device_class"] == a.device and (ps(b), b["library"], b["layout"], b["mode"], b["measured_at"]) not in had_b]
    tunes = [t for t in full.get("tunes", []) if t["device_class"] == a.device and (ps(t), t["finished_at"]) not in had_t]
    arts = {e["artifact"] for e in entries}
    probs = {ps(x) for x in entries + baselines + tunes}
    out = dict(full, device_classes=[d for d in full["device_classes"] if d["name"] == a.device],
               problems=[p for p in full["problems"] if json.dumps(p, sort_keys=True) in probs],
               artifacts=[x for x in full["artifacts"] if x["sha256"] in arts], entries=entries, baselines=baselines)
    out.pop("tunes", None)
    if tunes:
        out["tunes"] = tunes
    os.makedirs(os.path.join(a.out, "ptx"), exist_ok=True)
    for s in arts:
        shutil.copy(os.path.join(a.full, "ptx", s + ".ptx"), os.path.join(a.out, "ptx", s + ".ptx"))
    with gzip.open(os.path.join(a.out, "index.json.gz"), "wt") as f:
        json.dump(out, f)
    if a.db == "-":
        # An export without its database (a `kaas remeasure` pass's, say): no failed runs known.
        print(f"batch: {len(entries)} entries, {len(baselines)} baselines, {len(tunes)} tunes, {len(arts)} PTX")
        return
    db = sqlite3.connect(a.db.split("?")[0])
    # The runs of this server's jobs only: the imported catalog's runs have none.
    rows = db.execute("SELECT p.layout, p.m, p.n, p.k, m.artifact_sha256, r.verdict, r.created_at, r.message, r.details FROM runs r "
                      "JOIN problems p ON p.id = r.problem_id JOIN manifests m ON m.id = r.manifest_id "
                      "WHERE r.device_class = ? AND r.id IN (SELECT run_id FROM jobs WHERE run_id IS NOT NULL) ORDER BY r.id", (a.device,)).fetchall()
    runs = collections.Counter(r[5] for r in rows)
    failed = [dict(zip(FAILED_FIELDS, r)) for r in rows if r[5] not in NOT_THE_KERNELS_FAULT]
    write_failed(os.path.join(a.out, FAILED_TSV), failed)
    print(f"batch: {len(entries)} entries, {len(baselines)} baselines, {len(tunes)} tunes, {len(arts)} PTX; runs by verdict: {dict(runs)}")
    # What a job cost on this GPU (the sandbox's wall time: verification and benchmark),
    # for the next plan's --job-seconds.
    secs = sorted(json.loads(r[8] or "{}").get("duration_ms", 0) / 1e3 for r in rows if r[8] and "tune_id" not in json.loads(r[8]))
    if secs:
        print(f"seconds per H100-kernel job (sandbox wall): mean {sum(secs) / len(secs):.2f}, median {secs[len(secs) // 2]:.2f}, p90 {secs[int(len(secs) * 0.9)]:.2f} over {len(secs)}")
    if a.wall_seconds and a.gpus and rows:
        print(f"throughput: {len(rows)} runs in {a.wall_seconds:.0f} s on {a.gpus} GPUs = {a.wall_seconds * a.gpus / len(rows):.2f} GPU s a run (the plan's --job-seconds)")


def bundle_dirs(tree):
    """The bundle folders of a catalog tree, as the service imports them (tree_dirs)."""
    subs = sorted(os.path.join(tree, d) for d in os.listdir(tree) if os.path.isdir(os.path.join(tree, d)))
    return [d for d in [tree] + subs if has_index(d)]


def best_ranked_speedup(entries):
    """The highest graph-mode speedup over cuBLASLt-autotune-max among passing entries timed
    in the ranked regime; None where there is none."""
    xs = [(graph_speedups(e["run"]) or {}).get(AUTOTUNE_MAX) for e in entries if e["run"]["verdict"] == "pass" and e["run"].get("regime") == RANKED]
    xs = [x for x in xs if isinstance(x, (int, float))]
    return max(xs) if xs else None


def improves(new, current):
    """Whether a batch's entries for a problem replace the ones kernels/h200 holds: only by
    a faster one in the ranked regime. Faster is the higher speedup over
    cuBLASLt-autotune-max measured side by side in each run, not the lower median: the runs
    come from different machines and days, whose clocks and baselines differ, and a ratio
    taken within one run compares across them where two medians do not. A batch without a
    ranked entry for the problem (a tune that ended baseline_faster, say) takes it only
    where kernels/h200 holds no entry for it."""
    n = best_ranked_speedup(new)
    if n is None:
        return not current
    c = best_ranked_speedup(current)
    return c is None or n > c


def workload_adopt():
    """scripts/workload-adopt.py, whose merge (a problem's figures and tune from one source,
    a later source taking it only where it improves) is this one's."""
    spec = importlib.util.spec_from_file_location("workload_adopt", os.path.join(HERE, "workload-adopt.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def find_kaas(given):
    for path in [given, os.environ.get("KAAS_BIN")] + [os.path.join(os.path.dirname(HERE), "target", p, "kaas") for p in ("release", "debug")]:
        if path and os.access(path, os.X_OK):
            return path
    sys.exit("no kaas binary: build one (cargo build --bin kaas) or give --kaas")


def link_shared_ptx(ptx_dir, shared_dir):
    """Replaces each PTX file that kernels/h100 holds byte for byte (most H200 entries are
    H100 kernels re-measured) with a relative symbolic link to it, and returns how many.
    An artifact is named by its sha256, so the catalog reads the same bytes either way;
    the repository, and the working tree the device machine is sent (64 MiB), stop
    carrying every shared kernel twice."""
    linked = 0
    if not os.path.isdir(shared_dir):
        return linked
    rel = os.path.relpath(shared_dir, ptx_dir)
    for name in sorted(os.listdir(ptx_dir)):
        mine, theirs = os.path.join(ptx_dir, name), os.path.join(shared_dir, name)
        if os.path.islink(mine) or not os.path.isfile(theirs) or os.path.islink(theirs):
            continue
        with open(mine, "rb") as f, open(theirs, "rb") as g:
            if f.read() != g.read():
                continue
        os.remove(mine)
        os.symlink(os.path.join(rel, name), mine)
        linked += 1
    return linked


def adopt(a):
    tmp = tempfile.mkdtemp(prefix="kaas-h200-adopt-")
    try:
        sources = []
        for i, src in enumerate(a.batches):
            d = os.path.join(tmp, f"batch{i}")
            if os.path.isdir(src):
                shutil.copytree(src, d)
            else:
                with tarfile.open(src) as t:
                    t.extractall(os.path.join(tmp, f"unpacked{i}"), filter="data")
                inner = [os.path.join(tmp, f"unpacked{i}", x) for x in os.listdir(os.path.join(tmp, f"unpacked{i}"))]
                shutil.move(inner[0] if len(inner) == 1 and os.path.isdir(inner[0]) else os.path.join(tmp, f"unpacked{i}"), d)
            idx = catalog_index.load_bundle(d)
            other = {x["device_class"] for x in idx["entries"] + idx["baselines"] + idx.get("tunes", [])} - {CLASS}
            if other:
                sys.exit(f"{src}: holds {', '.join(sorted(other))} measurements; kernels/h200 takes {CLASS} ones only")
            sources.append(d)
        h200 = os.path.join(a.catalog, "h200")
        merged = os.path.join(tmp, "merged")
        # A retune that found nothing faster keeps the problem's entry and joins it as
        # its tune (the search the problem's page shows, and what plans count as tuned).
        workload_adopt().main(merged, None, h200, sources, best=True, takes=improves, later_tunes=True)
        # Canonical, as every shipped bundle is (docs/bundles.md): import into a fresh
        # database, export again.
        kaas = find_kaas(a.kaas)
        url = f"sqlite://{os.path.join(tmp, 'adopt.db')}?mode=rwc"
        canon = os.path.join(tmp, "canonical")
        for cmd in ([kaas, "import", merged, "--database-url", url], [kaas, "export", canon, "--database-url", url]):
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                sys.exit(f"{' '.join(cmd)}: {r.stderr.strip()}")
        before = answers(load_dir(h200))
        failed = read_failed(os.path.join(h200, FAILED_TSV))
        for d in sources:
            failed += read_failed(os.path.join(d, FAILED_TSV))
        os.makedirs(h200, exist_ok=True)
        with open(os.path.join(canon, "index.json"), "rb") as f:
            text = f.read()
        with open(os.path.join(h200, "index.json.gz"), "wb") as f:
            f.write(gzip.compress(text, mtime=0))
        if os.path.exists(os.path.join(h200, "index.json")):
            os.remove(os.path.join(h200, "index.json"))
        shutil.rmtree(os.path.join(h200, "ptx"), ignore_errors=True)
        shutil.copytree(os.path.join(canon, "ptx"), os.path.join(h200, "ptx"))
        linked = link_shared_ptx(os.path.join(h200, "ptx"), os.path.join(a.catalog, "h100", "ptx"))
        # A kernel that failed on an H200 stays listed (later plans skip it) until its
        # problem has an answer.
        after = answers(json.loads(text))
        write_failed(os.path.join(h200, FAILED_TSV), [r for r in failed if (r["layout"], int(r["m"]), int(r["n"]), int(r["k"])) not in after])
        gained = collections.Counter(after[k] for k in after if k not in before)
        print(f"kernels/h200: {len(after)} grid problems answered ({len(after) - len(before)} more: {dict(gained)}); "
              f"{linked} PTX files are links into kernels/h100")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ranked_speedup(e):
    return (graph_speedups(e["run"]) or {}).get(AUTOTUNE_MAX) if e["run"].get("regime") == RANKED else None


def beside_speedup(e):
    return (graph_speedups(e["run"], BESIDE) or {}).get(AUTOTUNE_MAX)


def figures_table(label, served):
    """Served geomean over autotune-max per layout and bucket in both regimes (an
    unanswered or losing problem counts 1.0, as catalog-figures.py counts it)."""
    rows = []
    for layout in ("tn", "nn"):
        for regime, speedup in ((RANKED, ranked_speedup), (BESIDE, beside_speedup)):
            s, byb, kern, wins = catalog_index.grid_figures(served, layout, speedup)
            rows.append(f"| {label} | {layout} | {regime} | {geomean(s):.4f} | " + " | ".join(f"{geomean(byb[b]):.3f}" for b in catalog_index.BUCKETS)
                        + f" | {len(kern)} | {wins} |")
    return rows


def status(a):
    cat = Catalog(a.catalog)
    idx = load_dir(a.batch) if a.batch else cat.h200
    what = f"batch {a.batch}" if a.batch else "kernels/h200"
    ans = answers(idx)
    kernels, tunes, retunes = work_left(cat)
    left_k = collections.Counter((e["problem"]["layout"], bucket(2 * e["problem"]["m"] * e["problem"]["n"] * e["problem"]["k"])) for e in kernels)
    left_t = collections.Counter((k[0], bucket(2 * k[1] * k[2] * k[3])) for k in tunes)
    total = collections.Counter((k[0], bucket(2 * k[1] * k[2] * k[3])) for k in grid_problems())
    kinds = collections.defaultdict(collections.Counter)
    for k, how in ans.items():
        kinds[(k[0], bucket(2 * k[1] * k[2] * k[3]))][how] += 1
    print(f"{what}: {len(ans)} of {len(grid_problems())} grid problems answered on {CLASS}"
          + ("" if a.batch else f"; left: {len(kernels)} H100 kernels to measure, {len(tunes)} problems to tune"
             f", {len(retunes)} to tune again ({len(cat.failed)} H100 kernels failed on an H200)"))
    print("| layout | FLOP bucket | problems | answered | kernel wins | baseline faster (entry) | baseline faster (tune) |"
          + ("" if a.batch else " left: H100 kernel | left: tune |"))
    print("|---|---|---:|---:|---:|---:|---:|" + ("" if a.batch else "---:|---:|"))
    for g in sorted(total, key=lambda g: (g[0], catalog_index.BUCKETS.index(g[1]))):
        c = kinds[g]
        print(f"| {g[0]} | {g[1]} | {total[g]} | {sum(c.values())} | {c['kernel']} | {c['baseline']} | {c['tuned']} |"
              + ("" if a.batch else f" {left_k[g]} | {left_t[g]} |"))
    print()
    print("Served geometric mean over cuBLASLt-autotune-max, graph mode, over each layout's 1,000 grid problems "
          f"(a problem without a winning kernel, or not yet answered, counts 1.0; a kernel is served from {catalog_index.MARGIN}x)")
    print("| catalog | layout | regime | served geomean | " + " | ".join(catalog_index.BUCKETS) + " | entries | wins |")
    print("|---|---|---|---:|" + "---:|" * (len(catalog_index.BUCKETS) + 2))
    h200_served = {k: e for k, e in catalog_index.served_entries(idx).items() if e["device_class"] == CLASS}
    for row in figures_table(f"{CLASS} ({what})", h200_served) + figures_table("H100-SXM (kernels/h100)", catalog_index.served_entries(cat.h100)):
        print(row)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="the next batch")
    p.add_argument("--catalog", default=KERNELS, help="the catalog tree (default: the repo's kernels/)")
    p.add_argument("--gpus", type=int, required=True, help="GPU workers that run the batch")
    p.add_argument("--seconds", type=float, required=True, help="seconds the workers have")
    # Measured on H100 workers, 600 ms benchmarks: 319 re-measure jobs in 450 s on 3 GPUs
    # (BENCHMARKS.md, the catalog re-measure).
    p.add_argument("--job-seconds", type=float, default=4.2, help="GPU seconds per H100-kernel job (verification and benchmark)")
    p.add_argument("--tune-seconds", type=float, default=0.0, help="GPU seconds per tune job; 0 plans none")
    p.add_argument("--out", help="write the batch here (plan.json, ptx/) for `submit`")
    p.add_argument("--improve", action="store_true",
                   help="after the first tunes, tune the small problems an H100 kernel wins (see improvements())")
    p.add_argument("--exclude", help="a file of problem paths planned before and not yet adopted: left out, and this batch's appended")
    s = sub.add_parser("status", help="what is answered and what is left")
    s.add_argument("--catalog", default=KERNELS)
    s.add_argument("--batch", help="a returned batch folder (its figures alone)")
    d = sub.add_parser("adopt", help="merge returned batches into kernels/h200")
    d.add_argument("batches", nargs="+", help="h200-batch.tgz files or unpacked folders")
    d.add_argument("--catalog", default=KERNELS)
    d.add_argument("--kaas", help="the kaas binary for the canonical round trip (default: target/release or target/debug)")
    u = sub.add_parser("submit", help="(device) queue a written batch on a server")
    u.add_argument("batch")
    u.add_argument("--url", required=True)
    u.add_argument("--device", default=CLASS)
    u.add_argument("--parallel", type=int, default=8, help="submissions in flight at once")
    u.add_argument("--tune-budget-ms", type=int, help="the tunes' search budget (admins), else the server's")
    w = sub.add_parser("without", help="(device) kernels/h200 without a batch's retuned problems")
    w.add_argument("batch")
    w.add_argument("out")
    w.add_argument("--catalog", required=True, help="the catalog tree kernels/h200 is in")
    e = sub.add_parser("export", help="(device) the batch's part of a server's export")
    e.add_argument("full", help="`kaas export` of the server's database")
    e.add_argument("db", help="the server's SQLite file ('-': none, no failed runs recorded)")
    e.add_argument("out")
    e.add_argument("--catalog", required=True, help="the catalog tree the server started from")
    e.add_argument("--device", default=CLASS)
    e.add_argument("--wall-seconds", type=float, help="seconds from the first submission to the drained queue")
    e.add_argument("--gpus", type=int, help="the workers that ran the batch")
    a = ap.parse_args()
    {"plan": plan, "status": status, "adopt": adopt, "submit": submit, "without": without, "export": export}[a.cmd](a)


if __name__ == "__main__":
    main()
