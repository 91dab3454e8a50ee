#!/usr/bin/env bash
# The service end to end on the GPU machine: one release `kaas`, the tuner's PTX and the
# end-to-end inputs, staged here and run there through the device tool.
#
#   scripts/device-run.sh stage            (here) build the release `kaas`, compile every
#                                          tuner configuration to PTX (NVRTC here, so the
#                                          PTX is what CI regenerates), write the e2e
#                                          inputs; all under .dev/run/, `kaas` packed (xz)
#                                          (a plain .dev/run/kaas copied in later wins)
#                                          (and the GPU test binary with gpu-check.sh:
#                                          `bash .dev/run/gpu-check.sh remote [FILTER…]`)
#   scripts/device-run.sh stage-lite       (here) only the release `kaas` (xz) and the
#                                          scripts, for source, fleet and interfere
#   scripts/device-run.sh stage-fleet      (here) .dev/fl: only `kaas` (xz) and this
#                                          script, for `fleet` and `interfere` with .dev/pg
#                                          (the tree, a full .dev/run and .dev/pg together
#                                          pass the call's 64 MiB)
#   scripts/device-run.sh carry-size [PATH…]  (here) what a device call carrying PATH… sends,
#                                          against the tool's 64 MiB (exit 1 over it); the
#                                          stages print it for .dev/run
#   scripts/device-run.sh aside | restore  (here) move kernels/baselines-h100, -h200 and
#                                          kernels/h100-workloads (no H200 call reads them)
#                                          into .dev/aside for the calls, and back
#   scripts/device-run.sh stage-tune-ptx   (here, after stage-lite) the tune jobs' PTX,
#                                          .dev/run/tune-ptx.tar.xz (2 MB): `h200` with
#                                          TUNE_S > 0 then tunes without NVRTC;
#                                          KAAS_STAGE_TRIALS=T,… adds trial T's codes, for
#                                          `tune --trial T` on the device
#   bash .dev/run/device-run.sh e2e        (device) `kaas serve --workers auto` on SQLite,
#                                          then `kaas submit` (a correct kernel, one that
#                                          writes only part of C, a manifest template),
#                                          `kaas pull`, `kaas leaderboard`; logs in $OUT/e2e
#   bash .dev/run/device-run.sh tune ARGS… (device) `kaas tune ARGS…` with the staged PTX;
#                                          state in $OUT/tune-state.json.gz (another name:
#                                          KAAS_TUNE_STATE=NAME gives $OUT/NAME.json.gz)
#   bash .dev/run/device-run.sh profile SHAPE LAYOUT ONLY …
#                                          (device) for each triple (e.g. 8192x8192x8192 tn
#                                          128x256x64_s4_c2_m1_g16): ncu --set full of one
#                                          warm launch of the tuner's candidate whose entry
#                                          ends with ONLY, and of cuBLASLt's heuristic choice
#                                          (KAAS_PROFILE_AUTOTUNE=1: its autotuned algorithm
#                                          from kernels/h100's baseline table instead;
#                                          KAAS_PROFILE_TRIAL=T: ours among trial T's codes);
#                                          reports and a line each under $OUT/profile
#   bash .dev/run/device-run.sh whole KERNEL SIZE BUDGET_MS …
#                                          (device) `kaas run --bench` of a Hopper kernel
#                                          (k: the catalog's 8192³ tn entry; w: the tuner's
#                                          128×256 tile; persistent grid) on SIZE³, for each
#                                          triple: one whole sandboxed run, seconds per stage
#   bash .dev/run/device-run.sh pairs DIR BUDGET_MS
#                                          (device) `kaas run --bench` (graph mode) of every
#                                          NAME.ptx + NAME.json pair in DIR; a table of
#                                          speedups last, runs in $OUT/pairs
#   bash .dev/run/device-run.sh submit DIR SECONDS BENCH_MS
#                                          (device) serve with workers, submit every NAME.ptx
#                                          with its manifest template NAME.json for the
#                                          shapes in NAME.problems, export the catalog
#                                          bundle as `verify` does
#   bash .dev/run/device-run.sh pass LAYOUTS SECONDS [TUNE OPTIONS…]
#                                          (device) one catalog pass: `tune` each layout of
#                                          LAYOUTS (tn,nn) with the options into
#                                          $OUT/pass-LAYOUT.json.gz, then `verify` the
#                                          promising winners of all of them for SECONDS
#                                          (KAAS_VERIFY_PROMISING=1, 500 ms benchmarks, submit
#                                          threshold 0.5); what the queue still holds at the
#                                          end needs another `verify` of the gunzipped states
#                                          once kernels/h100 holds the bundle
#   bash .dev/run/device-run.sh adopt NAME (device) unpack the bundle the last `pass` or
#                                          `verify` exported ($OUT/bundle.tgz) into
#                                          kernels/h100, so that the next pass or verify of
#                                          the same call starts from it (its promising
#                                          filter and its server's catalog), and keep it as
#                                          $OUT/bundle-NAME.tgz; the last step's bundle.tgz
#                                          holds everything
#   bash .dev/run/device-run.sh suite SECONDS TEST…
#                                          (device, gpu-tests and gpu-check.sh staged in
#                                          .dev/run) the GPU tests TEST… (e.g. hopper::
#                                          pingpong_hopper_kernels_pass_the_verifier) in the
#                                          order given, KAAS_SUITE_JOBS (1) at a time, each
#                                          cut at what is left of SECONDS: a line each in $OUT/suite/suite.tsv
#                                          (passed, failed, cut or not run; runs that passed;
#                                          seconds), logs in $OUT/suite/logs.tgz. With
#                                          CUDA_VISIBLE_DEVICES=0 beside `h200` on the others
#                                          it shares a call with a catalog batch
#   bash scripts/device-run.sh h200 SECONDS [JOB_S BENCH_MS TUNE_S]
#                                          (device, with .dev/run carried) the next batch of
#                                          the H200 grid catalog: H100 kernels for problems
#                                          without an H200 answer (then tunes, TUNE_S > 0),
#                                          sized for the GPUs to finish in SECONDS; the
#                                          result in $OUT/h200-batch.tgz for
#                                          `scripts/h200-catalog.py adopt` (h200_catalog below)
#   [KAAS_VERIFY_NEW_ONLY=1 | KAAS_VERIFY_PROMISING=1] bash .dev/run/device-run.sh verify STATE[.gz] SECONDS BENCH_MS [OPTIONS…]
#                                          (device) serve with workers, submit the winners
#                                          of STATE, let the workers verify and benchmark
#                                          them for SECONDS, export the catalog to $OUT/catalog;
#                                          KAAS_VERIFY_NEW_ONLY=1 first drops the problems
#                                          kernels/h100 already holds an entry for;
#                                          KAAS_VERIFY_PROMISING=1 keeps only winners whose
#                                          tuner time beats cuBLASLt-autotune-max of the
#                                          shipped baseline table and, where kernels/h100
#                                          has an entry, that entry's time by 2%;
#                                          with it, KAAS_VERIFY_SKIP=FILE[:FILE…] drops the problems
#                                          an earlier verify measured (its measured.tsv:
#                                          layout, m, n, k, verdict, submission per run)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mode="${1:-stage}"; shift || true

# Only `kaas` (packed, pack_kaas) and these scripts: enough for e2e-free modes (source, fleet,
# interfere) and small enough to travel beside .dev/pg or a part of NVRTC (.dev/nvrtc-1, -2).
stage_lite() {
    local repo; repo="$(cd "$here/.." && pwd)"; cd "$repo"
    cargo build --release --bin kaas
    rm -rf .dev/run; mkdir -p .dev/run
    cp "${CARGO_TARGET_DIR:-$repo/target}/release/kaas" .dev/run/kaas
    cp "$here/device-run.sh" "$here/source-report.py" "$here/request-report.py" "$here/recheck.py" \
        "$here/swap-report.py" "$here/desc-modes.py" "$here/tune_code.py" .dev/run/
}

stage_fleet() {
    local repo; repo="$(cd "$here/.." && pwd)"; cd "$repo"
    [[ -f .dev/run/kaas.xz ]] || { stage_lite && pack_kaas .dev/run/kaas; }
    rm -rf .dev/fl; mkdir -p .dev/fl
    cp .dev/run/kaas.xz "$here/device-run.sh" .dev/fl/
    du -sh .dev/fl
}

# The tune jobs' PTX for workers without NVRTC (`kaas serve --tune-ptx-dir`): every code of
# the families a tune job searches, for tn and nn with fp32 accumulators (the grid's and the
# presets'), stamped with this binary's templates. xz: 37 MB of PTX in 2 MB (gzip: 6).
stage_tune_ptx() {
    local repo; repo="$(cd "$here/.." && pwd)"; cd "$repo"
    [[ -d .dev/run ]] || { echo "stage-lite first: .dev/run is what the call carries" >&2; exit 1; }
    cargo build --release --bin kaas
    rm -rf .dev/run/tune-ptx
    "${CARGO_TARGET_DIR:-$repo/target}/release/kaas" tune --emit-ptx .dev/run/tune-ptx --layouts tn,nn --families hopper,mma,gemv --acc f32 \
        ${KAAS_STAGE_TRIALS:+--trial "$KAAS_STAGE_TRIALS"} 2>"${TMPDIR:-/tmp}/kaas-emit-ptx.log" \
      || { tail -n 20 "${TMPDIR:-/tmp}/kaas-emit-ptx.log" >&2; exit 1; }
    tar cJf .dev/run/tune-ptx.tar.xz -C .dev/run tune-ptx && rm -rf .dev/run/tune-ptx && du -sh .dev/run/tune-ptx.tar.xz
}

stage() {
    local repo; repo="$(cd "$here/.." && pwd)"; cd "$repo"
    stage_lite; mkdir -p .dev/run/e2e
    # The GPU tests too (3-4 MB), so one staged folder serves both scripts:
    # `bash .dev/run/gpu-check.sh remote [FILTER…]` runs them with this `kaas` as sandbox.
    local gpu_tests
    gpu_tests="$(cargo test --release --no-run --test gpu --message-format=json 2>/dev/null | python3 -c 'import json,sys
for line in sys.stdin:
    try: m = json.loads(line)
    except ValueError: continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "gpu": print(m["executable"])' | tail -n 1)"
    [[ -x "$gpu_tests" ]] && cp "$gpu_tests" .dev/run/gpu-tests && cp "$here/gpu-check.sh" .dev/run/gpu-check.sh
    .dev/run/kaas tune --emit-ptx .dev/run/tune-ptx --layouts tn,nn --trial ksplit,chains,multicast,multicast-split,wide160,mma-deep,tma-store,bk128,bk256,narrow8,du,col-split,stream-k 2>"${TMPDIR:-/tmp}/kaas-emit-ptx.log" \
      || { tail -n 20 "${TMPDIR:-/tmp}/kaas-emit-ptx.log" >&2; exit 1; }
    # (Its last line: ptxas's registers and spills of every code, in tune-ptx/resources.tsv.)
    # The shipped catalog's latency twins (`tune --twins-of kernels/h100`) are built here
    # too: the service takes PTX up to ISA 8.8, and the device's NVRTC writes 9.0 (session
    # 26: a verify of twins the device had compiled was refused).
    .dev/run/kaas tune --emit-ptx .dev/run/tune-ptx --layouts tn,nn --twins-of kernels/h100 2>>"${TMPDIR:-/tmp}/kaas-emit-ptx.log" \
      || { tail -n 20 "${TMPDIR:-/tmp}/kaas-emit-ptx.log" >&2; exit 1; }
    # Compressed (about 15 MB of PTX): the working tree and what it carries travel in 64 MiB.
    tar czf .dev/run/tune-ptx.tar.gz -C .dev/run tune-ptx && rm -rf .dev/run/tune-ptx
    # And `kaas` packed (pack_kaas; staged_kaas unpacks it there): with the checkout, the
    # PTX and the GPU tests, a plain one took the call past 64 MiB (2026-11-27).
    pack_kaas .dev/run/kaas
    python3 - <<'PY'
import json, copy
idx = json.load(open("kernels/index.json"))
e2e = ".dev/run/e2e/"
for e in idx["entries"]:
    p = e["problem"]
    if p["m"] != 1024:
        continue
    name = f"simple_{p['layout']}"
    open(e2e + name + ".ptx", "w").write(open(f"kernels/ptx/{e['artifact']}.ptx").read())
    json.dump(e["manifest"], open(e2e + name + ".json", "w"), indent=1)
    bad = copy.deepcopy(e["manifest"])
    bad["launches"][0]["grid"][1] //= 2          # half the rows of C are never written
    json.dump(bad, open(e2e + f"partial_{p['layout']}.json", "w"), indent=1)
    t = {"abi": "kaas.hgemm.v1", "arch": p["arch"], "acc": p["acc"], "layout": p["layout"], "workspace_bytes": 0,
         "launches": [dict(e["manifest"]["launches"][0], grid=[{"ceil_div": ["N", 128]}, {"ceil_div": ["M", 128]}, 1])]}
    json.dump(t, open(e2e + f"template_{p['layout']}.json", "w"), indent=1)

# Whole-run kernels from the H100 catalog, each an entry on the persistent grid (one CTA
# per SM, so only the problem differs between shapes): `k`, the 8192³ tn entry, and `w`,
# the tuner's 128×256×64 tile (4 stages, 2 consumers).
import gzip, os
os.makedirs(".dev/run/whole", exist_ok=True)
h100 = json.load(gzip.open("kernels/h100/index.json.gz"))
e = next(e for e in h100["entries"] if e["problem"]["layout"] == "tn" and e["problem"]["m"] == e["problem"]["n"] == e["problem"]["k"] == 8192)
w = next(x for x in h100["entries"] if x["manifest"]["launches"][0]["entry"] == "kaas_wgmma_f32_tn_128x256x64_s4_c2_m1_g16"
         and x["manifest"]["launches"][0]["grid"][0] == e["manifest"]["launches"][0]["grid"][0])
for name, entry in (("k", e), ("w", w)):
    open(f".dev/run/whole/{name}.ptx", "w").write(open(f"kernels/h100/ptx/{entry['artifact']}.ptx").read())
    for size in (2048, 4096, 8192, 16384):
        m = copy.deepcopy(entry["manifest"])
        m["problem"].update(m=size, n=size, k=size)
        json.dump(m, open(f".dev/run/whole/{name}-m{size}.json", "w"), indent=1)
PY
    du -sh .dev/run
}

# `kaas` packed for the trip: xz takes the 34 MB release binary to 8.4 MB (gzip: 13.1). The
# checkout counts against the call's 64 MiB with its links followed (54 MiB on 2026-11-30),
# and with a gzipped binary, the GPU tests and the staged PTX it no longer fit.
pack_kaas() { xz -T0 -6 -f "$1"; }

# The staged `kaas`: a plain one if there is (one copied in by hand after the stage), else
# the stage's kaas.xz (or an older stage's kaas.gz), unpacked afresh on every call. Beside
# this script when it runs staged, else in the checkout's .dev/run (this script run from
# scripts/, so that its modes are the tree's own, with the stage carried).
staged_kaas() {
    local dir="$here"
    [[ -e "$dir/kaas" || -e "$dir/kaas.xz" || -e "$dir/kaas.gz" ]] || dir="$(repo_root)/.dev/run"
    if [[ -x "$dir/kaas" ]]; then echo "$dir/kaas"; return; fi
    mkdir -p /tmp/kaas-staged
    if [[ -e "$dir/kaas.xz" ]]; then xz -dc "$dir/kaas.xz"; else gunzip -c "$dir/kaas.gz"; fi > /tmp/kaas-staged/kaas
    chmod +x /tmp/kaas-staged/kaas
    echo /tmp/kaas-staged/kaas
}

setup_device() {
    export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
    K="$(staged_kaas)"; OUT="${OUT:-/tmp/out}"; mkdir -p "$OUT"
    export KAAS_URL=http://127.0.0.1:8080
}

ptx_dir() {  # sets PTX_DIR: the tuner's PTX, which travels compressed, unpacked once per machine
    local dir="$here" packed
    [[ -e "$dir/tune-ptx" || -e "$dir/tune-ptx.tar.xz" || -e "$dir/tune-ptx.tar.gz" ]] || dir="$(repo_root)/.dev/run"
    PTX_DIR="$dir/tune-ptx"
    for packed in "$dir/tune-ptx.tar.xz" "$dir/tune-ptx.tar.gz"; do
        [[ ! -d "$PTX_DIR" && -f "$packed" ]] || continue
        PTX_DIR=/tmp/kaas-tune-ptx
        # Python's tarfile reads both (a machine may lack the xz tool).
        [[ -d "$PTX_DIR/tune-ptx" ]] || { mkdir -p "$PTX_DIR" && python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$packed" "$PTX_DIR"; }
        PTX_DIR="$PTX_DIR/tune-ptx"
    done
}

# What tune jobs compile with: the PTX staged beforehand (stage-tune-ptx), which the workers
# read (TUNE_PTX holds the `kaas serve` option), else NVRTC 12 (`nvrtc` in the same warm
# machine first: the device's own NVRTC is another version).
tune_compiler() {
    ptx_dir
    if [[ -f "$PTX_DIR/templates.sha256" ]]; then TUNE_PTX=(--tune-ptx-dir "$PTX_DIR"); else TUNE_PTX=(); nvrtc12; fi
}

start_server() {  # $1 database file, $2 bench budget ms, then more `kaas serve` options
    export KAAS_DATABASE_URL="sqlite://$1?mode=rwc"
    local bench="$2"; shift 2
    "$K" serve --bind 127.0.0.1:8080 --workers auto --bench-budget-ms "$bench" --poll-ms 200 "$@" >"$OUT/serve.log" 2>&1 &
    SERVER=$!
    # Ready: migrated and the shipped catalog imported (a minute at most).
    for _ in $(seq 1 300); do curl -fs "$KAAS_URL/v1/health/ready" >/dev/null 2>&1 && break; sleep 0.2; done
    curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; h=json.load(sys.stdin); print("health:", h["status"], "|", h["local_workers"])'
}

e2e() {
    setup_device; OUT="$OUT/e2e"; mkdir -p "$OUT"
    start_server /tmp/kaas-e2e.db 1500
    export KAAS_TOKEN="$("$K" token create --name alice 2>/dev/null)"
    local E="$here/e2e" rc
    set +e
    echo "== submit: the shipped simple kernel, tn and nn at 1024³"
    "$K" submit "$E/simple_tn.ptx" --manifest "$E/simple_tn.json" --name "simple tn" 2>&1 | tee "$OUT/submit-simple-tn.txt"; echo "exit $?"
    "$K" submit "$E/simple_nn.ptx" --manifest "$E/simple_nn.json" --name "simple nn" 2>&1 | tee "$OUT/submit-simple-nn.txt"; echo "exit $?"
    echo "== submit: a grid that leaves half of C unwritten (must fail)"
    "$K" submit "$E/simple_tn.ptx" --manifest "$E/partial_tn.json" --name "partial C" 2>&1 | tee "$OUT/submit-partial.txt"; echo "exit $?"
    echo "== submit: one manifest template for three shapes"
    "$K" submit "$E/simple_tn.ptx" --manifest "$E/template_tn.json" --problem 256x512x1024,4096x1024x512,64x64x64 --name "template" 2>&1 | tee "$OUT/submit-template.txt"; echo "exit $?"
    echo "== pull and leaderboard"
    "$K" pull --problem 1024x1024x1024 --layout tn --device H100-SXM -o "$OUT/pulled"; echo "exit $?"
    sha256sum "$OUT/pulled/kernel.ptx"
    "$K" leaderboard --problem 1024x1024x1024 --layout tn
    "$K" leaderboard
    set -e
    curl -fs "$KAAS_URL/v1/health" >"$OUT/health.json"
    curl -fs "$KAAS_URL/metrics" | grep -E '^kaas_(jobs|runs|workers)' || true
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
}

tune() {
    setup_device
    local name="${KAAS_TUNE_STATE:-tune-state}"  # the state (and log) under $OUT: $name.json
    ptx_dir
    "$K" tune --ptx-dir "$PTX_DIR" --state "$OUT/$name.json" "$@" 2>&1 | tee "$OUT/$name.log" | grep -v '^\[' || true
    "$K" tune --state "$OUT/$name.json" --report
    # The full state is too large to come back whole: gunzip it here to resume or submit.
    gzip -f "$OUT/$name.json"
}

whole() {  # triples of KERNEL (k or w) SIZE BUDGET_MS
    setup_device; mkdir -p "$OUT/whole"
    while (( $# >= 3 )); do
        local kernel="$1" size="$2" budget="$3"; shift 3
        local t0; t0=$(date +%s.%N)
        "$K" run --ptx "$here/whole/$kernel.ptx" --manifest "$here/whole/$kernel-m$size.json" --bench --budget-ms "$budget" --modes graph,offline --json \
            >"$OUT/whole/run-$kernel-$size.json" 2>"$OUT/whole/run-$kernel-$size.err" || true
        echo "whole run $kernel ${size}³: $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$t0" "$(date +%s.%N)") s wall (budget ${budget} ms)" | tee -a "$OUT/whole/wall.txt"
    done
    python3 - "$OUT/whole" <<'PY'
import glob, json, os, sys
for path in sorted(glob.glob(os.path.join(sys.argv[1], "run-*.json"))):
    try:
        o = json.load(open(path))
    except Exception as e:
        print(path, "unreadable:", e); continue
    b = o.get("bench") or {}
    print(f"== {os.path.basename(path)}: verdict {o['verdict']}, sandbox {o['duration_ms'] / 1e3:.2f} s")
    for c in o["checks"]:
        print(f"   {c['duration_ms'] / 1e3:7.2f} s  {c['name']}")
    for k in ("setup_ms", "autotune_ms", "elapsed_ms", "recheck_ms", "total_ms"):
        if k in b:
            print(f"   {b[k] / 1e3:7.2f} s  bench {k[:-3]}")
    if b:
        print("   rounds", b.get("rounds"), "converged", b.get("converged"), "graph speedups", json.dumps(b.get("speedups", {}).get("graph", {})))
        print("   recheck:", (b.get("recheck") or {}).get("detail", "")[:300])
    if o["verdict"] != "pass":
        print("   message:", o["message"][:600])
PY
}

# One whole run (verifier, then the graph-mode benchmark) of $1.ptx with $1.json, its report
# in $3.json and its log in $3.err; a failed run is reported there, not fatal.
run_pair() {  # $1 NAME without .ptx/.json, $2 bench budget ms, $3 the report's path without .json
    "$K" run --ptx "$1.ptx" --manifest "$1.json" --bench --budget-ms "$2" --modes graph --json >"$3.json" 2>"$3.err" || true
}

pairs() {  # $1 a folder of NAME.ptx + NAME.json pairs, $2 bench budget ms
    setup_device; mkdir -p "$OUT/pairs"
    local dir="$1" budget="${2:-300}" m name
    for m in "$dir"/*.json; do
        name="$(basename "$m" .json)"
        run_pair "$dir/$name" "$budget" "$OUT/pairs/$name"
    done
    python3 - "$OUT/pairs" <<'PY'
import glob, json, os, sys
print(f"{'run':<44} {'verdict':<8} {'µs':>7} {'× autotune-max':>15} {'× cuBLAS-max':>13}")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        o = json.load(open(path))
    except Exception as e:
        print(f"{os.path.basename(path)[:-5]:<44} unreadable: {e}"); continue
    b = o.get("bench") or {}
    g = b.get("speedups", {}).get("graph", {})
    us = b.get("timings", {}).get("graph", {}).get("median_us", float("nan"))
    print(f"{os.path.basename(path)[:-5]:<44} {o['verdict']:<8} {us:7.2f} {g.get('cublaslt_autotune_max', float('nan')):15.3f} {g.get('cublas_max', float('nan')):13.3f}")
PY
}

# A template change proven against the template before it: stage-ab here builds
# .dev/run/ab/{old,new}, a sample of a bundle's served Hopper entries (NAME.ptx + NAME.json
# in each): old, the shipped artifact (the PTX the catalog serves and was timed with; `kaas
# tune --emit-ptx --entries-of` says which template revision rebuilds it), new, the same
# code from this checkout's templates (`kaas tune --twins-of BUNDLE --emit-ptx DIR`); `ab`
# there runs every pair through the verifier and the side-by-side benchmark, old and new in
# turn ($2 rounds, the order swapped each round), and prints each code's new/old time
# (graph mode, L2-cold, each run's median) and verdicts, then their geometric mean.
stage_ab() {  # $1 the new templates' PTX, $2 BUNDLE, $3 codes
    local repo; repo="$(cd "$here/.." && pwd)"
    rm -rf "$repo/.dev/run/ab" && mkdir -p "$repo/.dev/run/ab/old" "$repo/.dev/run/ab/new"
    python3 - "$1" "$2" "${3:-40}" "$repo/.dev/run/ab" "$here" <<'PY'
import collections, json, os, shutil, sys
sys.path.insert(0, sys.argv[5])
import catalog_index
new, bundle, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
served = catalog_index.served_entries(catalog_index.load_bundle(bundle)).values()
# Hopper entries, spread over layouts and FLOP buckets (round robin), whose code the new
# templates compiled.
groups = collections.defaultdict(list)
for e in sorted(served, key=lambda e: (e["problem"]["m"], e["problem"]["n"], e["problem"]["k"])):
    entry = e["manifest"]["launches"][0]["entry"]
    if entry.startswith("kaas_wgmma_") and os.path.exists(os.path.join(new, entry + ".ptx")):
        p = e["problem"]
        groups[(p["layout"], catalog_index.bucket(2 * p["m"] * p["n"] * p["k"]))].append(e)
picked, i = [], 0
while len(picked) < n and any(groups.values()):
    for g in sorted(groups):
        if groups[g] and len(picked) < n:
            picked.append(groups[g].pop(len(groups[g]) // 2 if i % 2 else 0))
    i += 1
for e in picked:
    p, entry = e["problem"], e["manifest"]["launches"][0]["entry"]
    name = f"{p['layout']}_{p['m']}x{p['n']}x{p['k']}_{entry}"
    for side, src in (("old", os.path.join(bundle, "ptx", e["artifact"] + ".ptx")), ("new", os.path.join(new, entry + ".ptx"))):
        shutil.copy(src, os.path.join(out, side, name + ".ptx"))
        with open(os.path.join(out, side, name + ".json"), "w") as f:
            json.dump(e["manifest"], f)
print(f"{len(picked)} codes in {out}/old and {out}/new")
PY
}

ab() {  # $1 folder with old/ and new/, $2 rounds, $3 bench budget ms
    setup_device; mkdir -p "$OUT/ab"
    local dir="$1" rounds="${2:-2}" budget="${3:-300}" m name r side
    for m in "$dir"/new/*.json; do
        name="$(basename "$m" .json)"
        for r in $(seq 1 "$rounds"); do
            for side in $( (( r % 2 )) && echo old new || echo new old); do
                run_pair "$dir/$side/$name" "$budget" "$OUT/ab/$name.$side.$r"
            done
        done
    done
    python3 - "$OUT/ab" <<'PY' | tee "$OUT/ab.txt"
import collections, glob, json, math, os, statistics, sys
runs = collections.defaultdict(lambda: {"old": [], "new": []})
for path in glob.glob(os.path.join(sys.argv[1], "*.json")):
    name, side, _ = os.path.basename(path)[:-5].rsplit(".", 2)
    try:
        o = json.load(open(path))
    except ValueError:
        o = {"verdict": "unreadable"}
    us = ((o.get("bench") or {}).get("timings", {}).get("graph", {}) or {}).get("median_us")
    runs[name][side].append((o.get("verdict"), us))
print(f"{'code':<84} {'old µs':>8} {'new µs':>8} {'new/old':>8}  verdicts")
ratios = []
for name in sorted(runs):
    o, n = runs[name]["old"], runs[name]["new"]
    ou = [u for v, u in o if v == "pass" and u]; nu = [u for v, u in n if v == "pass" and u]
    verdicts = "old " + ",".join(str(v) for v, _ in o) + " new " + ",".join(str(v) for v, _ in n)
    if ou and nu:
        r = statistics.median(nu) / statistics.median(ou); ratios.append(r)
        print(f"{name:<84} {statistics.median(ou):8.2f} {statistics.median(nu):8.2f} {r:8.3f}  {verdicts}")
    else:
        print(f"{name:<84} {'-':>8} {'-':>8} {'-':>8}  {verdicts}")
if ratios:
    g = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"new/old time over {len(ratios)} codes: geomean {g:.4f}, best {min(ratios):.3f}, worst {max(ratios):.3f}; "
          f"within 1% or faster: {sum(r <= 1.01 for r in ratios)}")
PY
}

verify() {  # $1 state file, $2 seconds, $3 bench budget ms, then `kaas tune` submit options
    setup_device
    local state="$1" seconds="$2" bench="${3:-1000}"; shift 3 || shift $#
    # A gzipped state (as `tune` and `pass` write it) travels at a fifth of the size.
    if [[ "$state" == *.gz ]]; then gunzip -c "$state" > /tmp/kaas-verify-state.json; state=/tmp/kaas-verify-state.json; fi
    if [[ "${KAAS_VERIFY_NEW_ONLY:-0}" == 1 ]]; then
        # Only the problems the shipped H100 catalog holds no entry for yet.
        python3 - "$state" "$here/../../kernels/h100/index.json.gz" <<'PY'
import gzip, json, sys
state, catalog = sys.argv[1], sys.argv[2]
st = json.load(open(state))
have = {tuple(e["problem"][k] for k in ("layout", "m", "n", "k")) for e in json.load(gzip.open(catalog))["entries"]}
before = len(st["results"])
st["results"] = {k: r for k, r in st["results"].items() if tuple(r["problem"][x] for x in ("layout", "m", "n", "k")) not in have}
json.dump(st, open(state, "w"))
print(f"new only: {len(st['results'])} of {before} tuned problems have no catalog entry yet")
PY
    fi
    if [[ "${KAAS_VERIFY_PROMISING:-0}" == 1 ]]; then
        python3 - "$state" "$here/../../kernels/h100/index.json.gz" "$here/../../kernels/baselines-h100/index.json.gz" <<'PY'
import gzip, json, os, sys
state, catalog, baselines = sys.argv[1:4]
st = json.load(open(state))
shape = lambda p: (p["m"], p["n"], p["k"])
entry_us = {(e["problem"]["layout"],) + shape(e["problem"]): e["run"]["timings"]["graph"]["median_us"] for e in json.load(gzip.open(catalog))["entries"]}
autotune = {}
for b in json.load(gzip.open(baselines))["baselines"]:
    if b["mode"] == "graph" and b["library"] == "cublaslt_autotune":
        autotune[shape(b["problem"])] = min(autotune.get(shape(b["problem"]), float("inf")), b["median_us"])
skip = set()
for path in filter(None, os.environ.get("KAAS_VERIFY_SKIP", "").split(":")):
    for line in open(path):
        layout, m, n, k = line.split("\t")[:4]
        skip.add((layout, int(m), int(n), int(k)))
def promising(r):
    p = r["problem"]; us = r["winner_us"]
    have = entry_us.get((p["layout"],) + shape(p))
    return us < autotune.get(shape(p), 0.0) and (have is None or us < 0.98 * have)
before = len(st["results"])
st["results"] = {k: r for k, r in st["results"].items() if promising(r)}
kept = len(st["results"])
st["results"] = {k: r for k, r in st["results"].items() if (r["problem"]["layout"],) + shape(r["problem"]) not in skip}
json.dump(st, open(state, "w"))
print(f"promising: {kept} of {before} tuned problems beat autotune-max and the catalog's entry"
      + (f"; {kept - len(st['results'])} of them measured already (KAAS_VERIFY_SKIP)" if skip else ""))
PY
    fi
    start_server /tmp/kaas-verify.db "$bench"
    export KAAS_TOKEN="$("$K" token create --name kaas-tuner --role admin 2>/dev/null)"
    # --limit 0: tune nothing more, only submit what the state holds.
    ptx_dir
    "$K" tune --ptx-dir "$PTX_DIR" --state "$state" --limit 0 --submit "$KAAS_URL" "$@" 2>&1 | tail -8
    drain_and_export "$seconds"
}

submit() {  # $1 a folder of NAME.ptx + NAME.json (manifest template) + NAME.problems, $2 seconds, $3 bench budget ms
    setup_device
    local dir="$1" seconds="$2" bench="${3:-800}" t
    start_server /tmp/kaas-submit.db "$bench"
    export KAAS_TOKEN="$("$K" token create --name kaas-tuner --role admin 2>/dev/null)"
    for t in "$dir"/*.json; do
        local name; name="$(basename "$t" .json)"
        "$K" submit "$dir/$name.ptx" --manifest "$t" --problem "$(cat "$dir/$name.problems")" --name "$name" --no-wait 2>&1 | tail -2 || true
    done
    drain_and_export "$seconds"
}

# Waits until the queue is empty (at most $1 seconds), stops the server and exports the
# catalog bundle to $OUT/bundle.tgz.
drain_and_export() {
    drain "$1"
    curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; print("queue left:", json.load(sys.stdin)["queue"])'
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
    # What the service measured, one line per run of a problem (layout m n k verdict
    # submission): a later `verify` of the same state skips these problems with
    # KAAS_VERIFY_SKIP=$OUT/measured.tsv instead of measuring them again.
    python3 - "${KAAS_DATABASE_URL#sqlite://}" "$OUT/measured.tsv" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1].split("?")[0])
# Runs of queued submissions only: the catalog imported at start has runs but no jobs.
rows = db.execute("SELECT p.layout, p.m, p.n, p.k, r.verdict, s.name FROM runs r JOIN problems p ON p.id = r.problem_id "
                  "JOIN submissions s ON s.id = r.submission_id "
                  "WHERE EXISTS (SELECT 1 FROM jobs j WHERE j.submission_id = s.id) ORDER BY r.id").fetchall()
with open(sys.argv[2], "w") as f:
    for row in rows:
        f.write("\t".join(str(x) for x in row) + "\n")
print(f"measured: {len(rows)} runs in {sys.argv[2]}")
PY
    # The new device class's part of the catalog (its entries and the baselines its runs
    # timed), as one gzipped bundle for kernels/.
    "$K" export "$OUT/full" >/dev/null
    python3 - "$OUT/full" "$OUT/bundle" <<'PY'
import gzip, json, os, shutil, sys
src, dst = sys.argv[1], sys.argv[2]
idx = json.load(open(os.path.join(src, "index.json")))
# The classes this machine measured (KAAS_EXPORT_CLASSES, comma-separated), else every
# class but H200 (whose baselines come with the shipped catalog on an H100 machine).
wanted = [c for c in os.environ.get("KAAS_EXPORT_CLASSES", "").split(",") if c]
classes = set(wanted) if wanted else {d["name"] for d in idx["device_classes"] if d["name"] != "H200"}
entries = [e for e in idx["entries"] if e["device_class"] in classes and e["submitter"] != "kaas"]
baselines = [b for b in idx["baselines"] if b["device_class"] in classes]
arts = {e["artifact"] for e in entries}
probs = {json.dumps(e["problem"], sort_keys=True) for e in entries} | {json.dumps(b["problem"], sort_keys=True) for b in baselines}
out = dict(idx, device_classes=[d for d in idx["device_classes"] if d["name"] in classes],
           problems=[p for p in idx["problems"] if json.dumps(p, sort_keys=True) in probs],
           artifacts=[a for a in idx["artifacts"] if a["sha256"] in arts], entries=entries, baselines=baselines)
os.makedirs(os.path.join(dst, "ptx"), exist_ok=True)
for a in arts:
    shutil.copy(os.path.join(src, "ptx", a + ".ptx"), os.path.join(dst, "ptx", a + ".ptx"))
with gzip.open(os.path.join(dst, "index.json.gz"), "wt") as f:
    f.write(json.dumps(out, indent=2) + "\n")
print(f"bundle: {len(entries)} entries, {len(arts)} artifacts, {len(baselines)} baselines, {len(out['problems'])} problems")
PY
    tar czf "$OUT/bundle.tgz" -C "$OUT" bundle && rm -rf "$OUT/full" "$OUT/bundle"
}

catalog_pass() {  # $1 layouts (comma-separated), $2 verify seconds, then `kaas tune` options
    setup_device
    local layouts="$1" seconds="$2"; shift 2
    local merged=/tmp/kaas-pass.json states=() l
    for l in ${layouts//,/ }; do
        KAAS_TUNE_STATE="pass-$l" tune --layouts "$l" "$@"
        gunzip -kf "$OUT/pass-$l.json.gz"
        states+=("$OUT/pass-$l.json")
    done
    python3 - "$merged" "${states[@]}" <<'PY'
import json, sys
out = {"results": {}}
for path in sys.argv[2:]:
    st = json.load(open(path))
    out = dict(st, results={**out["results"], **st["results"]})
json.dump(out, open(sys.argv[1], "w"))
PY
    rm -f "${states[@]}"  # they come back gzipped
    KAAS_VERIFY_PROMISING=1 verify "$merged" "$seconds" 500 --submit-threshold 0.5
}

adopt() {  # $1 a name for the bundle kept under $OUT
    setup_device
    local name="${1:?adopt NAME}" repo tmp
    repo="$(cd "$here/../.." && pwd)"; tmp="$(mktemp -d)"
    tar xzf "$OUT/bundle.tgz" -C "$tmp"
    cp "$tmp/bundle/index.json.gz" "$repo/kernels/h100/index.json.gz"
    rm -rf "$repo/kernels/h100/ptx" && cp -r "$tmp/bundle/ptx" "$repo/kernels/h100/ptx"
    mv "$OUT/bundle.tgz" "$OUT/bundle-$name.tgz"
    rm -rf "$tmp"
    echo "adopted: kernels/h100 is $OUT/bundle-$name.tgz"
}

profile() {  # triples of SHAPE LAYOUT ONLY: ncu of our kernel and of cuBLASLt's, one launch each
    setup_device; ptx_dir; mkdir -p "$OUT/profile"
    local ncu; ncu="$(command -v ncu || echo /usr/local/cuda/bin/ncu)"
    while (( $# >= 3 )); do
        local shape="$1" layout="$2" only="$3" tag="$1-$2-$3"; shift 3  # (two codes of one shape keep apart)
        # The tuner times cuBLASLt's heuristic choice first, then the --only candidates; a
        # few launches in, each is warm. Ours is the entry that ENDS with ONLY (so
        # 64x64x64_s8_c1_m1_g16 is not its _ska sibling). --clock-control none: the
        # clocks as they run.
        for who in "ours:^kaas_.*${only}\$" cublas:'^(nvjet|sm90|cutlass)'; do
            "$ncu" --clock-control none --set full --kernel-name "regex:${who#*:}" --launch-skip 5 --launch-count 1 \
                -f -o "$OUT/profile/$tag-${who%%:*}" "$K" tune --ptx-dir "$PTX_DIR" --state "/tmp/profile-$tag.json" \
                --problems "$shape" --layouts "$layout" --only "$only" --max-pulls 2 \
                ${KAAS_PROFILE_AUTOTUNE:+--reference-bundle kernels/h100} ${KAAS_PROFILE_TRIAL:+--trial "$KAAS_PROFILE_TRIAL"} >"$OUT/profile/$tag-${who%%:*}.log" 2>&1 || true
            rm -f "/tmp/profile-$tag.json"
            "$ncu" --import "$OUT/profile/$tag-${who%%:*}.ncu-rep" --page details --print-units base >"$OUT/profile/$tag-${who%%:*}.txt" 2>&1 || true
            # The tensor pipes' share of the active cycles (wgmma: the gmma pipe), which the
            # details page only charts: from the raw metrics the full set collected.
            "$ncu" --import "$OUT/profile/$tag-${who%%:*}.ncu-rep" --page raw --print-units base 2>/dev/null \
              | grep -E 'pipe_tensor.*pct_of_peak_sustained_active' >"$OUT/profile/$tag-${who%%:*}.pipes" || true
        done
    done
    # One line per profile: the kernel, its time and clock, and where its cycles went.
    for f in "$OUT"/profile/*.txt; do
        python3 - "$f" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
try:
    pipes = open(sys.argv[1][:-4] + ".pipes").read().splitlines()
except OSError:
    pipes = []
def last_number(line):
    try:
        return float(line.split()[-1].replace(",", ""))
    except (IndexError, ValueError):
        return None
# The busiest tensor pipe (HMMA for mma.sync, GMMA for wgmma), % of its peak over active cycles.
tensor = max((x for x in map(last_number, pipes) if x is not None), default=None)
def get(name):
    m = re.search(r"^\s*" + re.escape(name) + r"\s+(?:(\S+)\s+)?([\d.,]+)\s*$", t, re.M)
    return m.group(2) if m else "?"
kernel = (re.search(r"^\s*(\S+)\s*\(\d+, \d+, \d+\)x", t, re.M) or re.search(r"^  (\S+)", t, re.M))
print(sys.argv[1].rsplit("/", 1)[-1][:-4], "|", (kernel.group(1)[:60] if kernel else "?"), "| dur", get("Duration"), "| SM Hz", get("SM Frequency"),
      "| SM busy %", get("SM Busy"), "| mem %", get("Memory Throughput"), "| DRAM %", get("DRAM Throughput"), "| L2 %", get("L2 Cache Throughput"), "| L2 hit %", get("L2 Hit Rate"),
      "| tensor pipe %", "?" if tensor is None else f"{tensor:.1f}", "| regs", get("Registers Per Thread"), "| grid", get("Grid Size"), "| IPC", get("Executed Ipc Active"))
PY
    done
}

# The checkout's root, whether this script runs staged (.dev/run/) or from scripts/.
repo_root() {
    if [[ "$(basename "$here")" == scripts ]]; then (cd "$here/.." && pwd); else (cd "$here/../.." && pwd); fi
}

# What a device call sends: the checkout's tracked and untracked (not ignored) files, links
# followed (kernels/h200's links into kernels/h100 count again), and the carried paths. The
# device tool refuses a call over 64 MiB before it starts; two calls of 2026-11-30 were.
carry_size() {
    local tree carry=0
    tree="$(cd "$(repo_root)" && { git ls-files -z; git ls-files -z -o --exclude-standard; } | { xargs -0 -r stat -L -c %s 2>/dev/null || true; } | awk '{s += $1} END {print s + 0}')"
    (( $# )) && carry="$(cd "$(repo_root)" && du -sbL "$@" | awk '{s += $1} END {print s + 0}')"
    awk -v t="$tree" -v c="$carry" 'BEGIN {
        printf "a call carrying this sends %.1f MiB (checkout %.1f, carried %.1f) of the 64 MiB allowed\n", (t + c) / 1048576, t / 1048576, c / 1048576
        if (t + c > 64 * 1048576) {
            print "over: `scripts/device-run.sh aside` moves what an H200 call does not read out of the checkout (kernels/baselines-h100, kernels/baselines-h200, kernels/h100-workloads: 10 MiB); `restore` puts it back, before any commit"
            exit 1
        } }'
}

# What H200 calls do not read, moved out of the checkout for them (the device tool counts
# the checkout, links followed, against the call's 64 MiB) into .dev/aside (ignored, so
# never sent), and back. `restore` refuses to overwrite: what is in the checkout wins.
ASIDE=(kernels/baselines-h100 kernels/baselines-h200 kernels/h100-workloads)
aside() {
    cd "$(repo_root)"; mkdir -p .dev/aside/kernels
    local d; for d in "${ASIDE[@]}"; do [[ -e "$d" ]] && mv "$d" ".dev/aside/$d"; done
    echo "moved aside: ${ASIDE[*]} (\`$0 restore\` before any commit)"; carry_size .dev/run || true
}
restore() {
    cd "$(repo_root)"
    local d; for d in "${ASIDE[@]}"; do
        [[ -e ".dev/aside/$d" ]] || continue
        if [[ -e "$d" ]]; then echo "$d is in the checkout already; .dev/aside/$d left as is" >&2; continue; fi
        mv ".dev/aside/$d" "$d"
    done
    git status --short -- "${ASIDE[@]}" | head -3
}

stage_nvrtc() {
    local repo; repo="$(cd "$here/.." && pwd)"; cd "$repo"
    eval "$(bash "$here/cuda-tools.sh" 2>/dev/null)"
    local lib; lib="$(dirname "$KAAS_PTXAS")/../../cuda_nvrtc/lib"
    # Two folders, each carried by a call of its own: the tree (kernels/ grows with every
    # catalog batch) and all of NVRTC no longer fit one carry's 64 MiB. The library is cut
    # into parts; `nvrtc` there keeps each part it is given and unpacks once it has all.
    rm -rf .dev/nvrtc .dev/nvrtc-1 .dev/nvrtc-2; mkdir -p .dev/nvrtc-1 .dev/nvrtc-2
    xz -T0 -9 -c "$lib/libnvrtc.so.12" | split -b 20M -d -a 1 - .dev/nvrtc-1/libnvrtc.so.12.xz.part
    mv .dev/nvrtc-1/libnvrtc.so.12.xz.part[1-9] .dev/nvrtc-2/
    ls .dev/nvrtc-[12]/libnvrtc.so.12.xz.part* | wc -l | tr -d ' ' > .dev/nvrtc-2/parts
    gzip -c "$lib"/libnvrtc-builtins.so.12.? > .dev/nvrtc-2/libnvrtc-builtins.so.12.gz
    tar czf .dev/nvrtc-2/headers.tgz -C .dev/cuda cutlass/cutlass_library/source/include/cute \
        cutlass/cutlass_library/source/include/cutlass cccl/nvidia/cuda_cccl/include nvidia/cuda_runtime/include nvidia/cuda_nvcc/include/crt
    echo "$KAAS_HEADER_SET" > .dev/nvrtc-2/header_set
    du -sh .dev/nvrtc-1 .dev/nvrtc-2
}

# NVRTC 12.9 and the header set for compiling CUDA source on the device: the parts that
# calls carried (.dev/nvrtc-1, .dev/nvrtc-2) gathered in .dev/nvrtc-kept, unpacked once per
# machine into .dev/nvrtc12 (ignored, so both stay between calls), then exported as the
# service's compile environment.
nvrtc12() {
    local repo dst keep; repo="$(repo_root)"; dst="$repo/.dev/nvrtc12"; keep="$repo/.dev/nvrtc-kept"
    if [[ ! -e "$dst/lib/libnvrtc.so.12" ]]; then
        # What this call carried joins what earlier calls of the same warm machine left.
        mkdir -p "$keep"
        for d in "$repo/.dev/nvrtc-1" "$repo/.dev/nvrtc-2"; do [[ -d "$d" ]] && cp -f "$d"/* "$keep"/; done
        local have; have=$(ls "$keep"/libnvrtc.so.12.xz.part* 2>/dev/null | wc -l)
        if [[ ! -f "$keep/parts" || "$have" -lt "$(cat "$keep/parts")" ]]; then
            echo "NVRTC 12: $have part(s) here of $(cat "$keep/parts" 2>/dev/null || echo '?'): carry .dev/nvrtc-1 in one call and .dev/nvrtc-2 in the next (stage-nvrtc)" >&2
            return 1
        fi
        mkdir -p "$dst/lib"
        cat "$keep"/libnvrtc.so.12.xz.part* | python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), open(sys.argv[1], "wb"))' \
            "$dst/lib/libnvrtc.so.12.tmp"
        mv "$dst/lib/libnvrtc.so.12.tmp" "$dst/lib/libnvrtc.so.12"
        gunzip -c "$keep/libnvrtc-builtins.so.12.gz" > "$dst/lib/libnvrtc-builtins.so.12.9"
        ln -sf libnvrtc.so.12 "$dst/lib/libnvrtc.so"
        # The headers serve CUDA source submissions only; the tuner's templates include none.
        if [[ -f "$keep/headers.tgz" ]]; then
            tar xzf "$keep/headers.tgz" -C "$dst"
            cp "$keep/header_set" "$dst/header_set"
        else
            echo "none (templates only)" > "$dst/header_set"
        fi
    fi
    export LD_LIBRARY_PATH="$dst/lib:${LD_LIBRARY_PATH:-}"
    export KAAS_CUDA_INCLUDE="$dst/nvidia/cuda_runtime/include:$dst/nvidia/cuda_nvcc/include:$dst/nvidia/cuda_nvcc/include/crt:$dst/cccl/nvidia/cuda_cccl/include"
    export KAAS_CUTLASS_INCLUDE="$dst/cutlass/cutlass_library/source/include"
    KAAS_HEADER_SET="$(cat "$dst/header_set")"; export KAAS_HEADER_SET
    export KAAS_PTXAS="${KAAS_PTXAS:-/usr/local/cuda/bin/ptxas}"
}

source_run() {  # $1 a folder of NAME.cu + NAME.json + NAME.problems, $2 seconds, $3 bench budget ms
    setup_device; nvrtc12
    local dir="$1" seconds="$2" bench="${3:-800}" cu name t0
    OUT="$OUT/source"; mkdir -p "$OUT"
    start_server /tmp/kaas-source.db "$bench"
    export KAAS_TOKEN="$("$K" token create --name author 2>/dev/null)"
    : >"$OUT/compile.tsv"
    for cu in "$dir"/*.cu; do
        name="$(basename "$cu" .cu)"; t0=$(date +%s.%N)
        "$K" submit "$cu" --template "$dir/$name.json" --problem "$(cat "$dir/$name.problems")" --name "$name" --no-wait >"$OUT/submit-$name.txt" 2>&1 || true
        printf '%s\t%s\n' "$name" "$(python3 -c "print(f'{$(date +%s.%N) - $t0:.2f}')")" >>"$OUT/compile.tsv"
        tail -n 4 "$OUT/submit-$name.txt"
    done
    drain "$seconds"
    python3 "$here/source-report.py" "$KAAS_URL" "$OUT"
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
}

# Waits until the queue is empty, at most $1 seconds.
drain() {
    local deadline=$((SECONDS + $1)) q
    while (( SECONDS < deadline )); do
        q="$(curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; q=json.load(sys.stdin)["queue"]; print(q["queued"]+q["running"])')"
        [[ "$q" == 0 ]] && break
        sleep 2
    done
}

# Postgres 16 from the pgserver wheel (.dev/pg/pgserver-*.whl, carried: the device has no
# network and no Postgres), unpacked once per machine under /tmp, a fresh cluster on
# port 55432 run as `nobody` where we are root (postgres refuses root). Sets PGBIN and
# PG_BASE (the URL without a database).
pg_start() {
    local repo whl; repo="$(repo_root)"
    whl="$(ls "$repo"/.dev/pg/pgserver-*.whl 2>/dev/null | head -n 1)"
    [[ -n "$whl" ]] || { echo "no Postgres here: download the pgserver wheel into .dev/pg (see docs/deployment.md) and carry .dev/pg" >&2; return 1; }
    PGBIN=/tmp/kaas-pginstall/pgserver/pginstall/bin
    if [[ ! -x "$PGBIN/postgres" ]]; then
        python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$whl" /tmp/kaas-pginstall
        chmod -R a+rx /tmp/kaas-pginstall
    fi
    local as=(); [[ "$(id -u)" == 0 ]] && as=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    "${as[@]}" "$PGBIN/pg_ctl" -D /tmp/kaas-pg/data stop -m fast >/dev/null 2>&1 || true
    rm -rf /tmp/kaas-pg; mkdir -p /tmp/kaas-pg; [[ "$(id -u)" == 0 ]] && chown nobody /tmp/kaas-pg
    "${as[@]}" "$PGBIN/initdb" -D /tmp/kaas-pg/data -U postgres --auth=trust -E UTF8 --locale=C >/tmp/kaas-pg/initdb.log 2>&1 \
        || { cat /tmp/kaas-pg/initdb.log; return 1; }
    "${as[@]}" "$PGBIN/pg_ctl" -D /tmp/kaas-pg/data -w -l /tmp/kaas-pg/postgres.log \
        -o "-p 55432 -k /tmp/kaas-pg -c listen_addresses=127.0.0.1 -c max_connections=400" start >/dev/null
    PG_BASE=postgres://postgres@127.0.0.1:55432
    echo "postgres: $("$PGBIN/postgres" --version)"
}

pg_stop() {
    local as=(); [[ "$(id -u)" == 0 ]] && as=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    "${as[@]}" "$PGBIN/pg_ctl" -D /tmp/kaas-pg/data stop -m fast >/dev/null 2>&1 || true
    cp /tmp/kaas-pg/postgres.log "$OUT/postgres.log" 2>/dev/null || true
}

# JOBS catalog entries of the shipped H100 bundle, as NAME.ptx + NAME.json under $1: tn
# and nn problems of 2^33 FLOP/2 (2048³ and its permutations, no side under 512), so
# every job costs about the same and the makespan divides evenly over the GPUs.
fleet_jobs() {
    local repo; repo="$(repo_root)"
    python3 - "$repo/kernels/h100" "$1" "$2" <<'PY'
import gzip, json, math, os, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
os.makedirs(dst, exist_ok=True)
idx = json.load(gzip.open(os.path.join(src, "index.json.gz")))
def cost(p): return sum(int(math.log2(p[d])) for d in "mnk")
pick = sorted((e for e in idx["entries"] if cost(e["problem"]) == 33 and min(e["problem"][d] for d in "mnk") >= 512),
              key=lambda e: (e["problem"]["layout"], e["problem"]["acc"], e["problem"]["m"], e["problem"]["n"]))[:n]
for e in pick:
    p = e["problem"]
    name = f"{p['acc']}_{p['layout']}_{p['m']}x{p['n']}x{p['k']}"
    open(os.path.join(dst, name + ".ptx"), "w").write(open(os.path.join(src, "ptx", e["artifact"] + ".ptx")).read())
    json.dump(e["manifest"], open(os.path.join(dst, name + ".json"), "w"))
print(f"fleet jobs: {len(pick)} catalog kernels of 2^33 multiply-adds")
PY
}

# The fleet as an operator deploys it, on this machine's GPUs: a database, API replicas
# without workers, and one `kaas worker --gpu I` process per GPU. For each GPU count of
# $1 (e.g. 1,2,4): a fresh database, the same $2 catalog kernels submitted through the
# replicas in turn, and the wall time until the queue is empty; $3 the benchmark budget
# per job in ms. KAAS_FLEET_DB=sqlite: one SQLite file and one replica instead of
# Postgres and two. Logs in $OUT/fleet; a table of jobs per minute last.
fleet() {
    setup_device
    local counts="$1" jobs="${2:-24}" bench="${3:-500}" db="${KAAS_FLEET_DB:-postgres}" g i n pids url
    OUT="$OUT/fleet"; mkdir -p "$OUT"
    fleet_jobs /tmp/kaas-fleet-jobs "$jobs"
    [[ "$db" == postgres ]] && pg_start
    : >"$OUT/fleet.tsv"
    for g in ${counts//,/ }; do
        pids=()
        if [[ "$db" == postgres ]]; then
            "$PGBIN/psql" -h 127.0.0.1 -p 55432 -U postgres -qc "create database fleet_g$g"
            export KAAS_DATABASE_URL="$PG_BASE/fleet_g$g"
            local ports=(8080 8081)
        else
            export KAAS_DATABASE_URL="sqlite:///tmp/kaas-fleet-g$g.db?mode=rwc"; rm -f "/tmp/kaas-fleet-g$g.db"*
            local ports=(8080)
        fi
        for i in "${!ports[@]}"; do
            "$K" serve --bind "127.0.0.1:${ports[$i]}" --workers 0 >"$OUT/api-g$g-$i.log" 2>&1 & pids+=($!)
        done
        for i in "${!ports[@]}"; do
            for _ in $(seq 1 300); do curl -fs "http://127.0.0.1:${ports[$i]}/v1/health/ready" >/dev/null 2>&1 && break; sleep 0.2; done
        done
        for ((i = 0; i < g; i++)); do
            "$K" worker --gpu "$i" --bench-budget-ms "$bench" --poll-ms 200 >"$OUT/worker-g$g-$i.log" 2>&1 & pids+=($!)
        done
        for _ in $(seq 1 300); do
            n="$(curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; print(sum(w["state"] == "idle" for w in json.load(sys.stdin).get("workers", [])))' 2>/dev/null || echo 0)"
            [[ "$n" -ge "$g" ]] && break; sleep 0.5
        done
        export KAAS_TOKEN="$("$K" token create --name fleet --role admin 2>/dev/null)"
        (while sleep 2; do nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits | tr '\n' ' '; echo; done) >"$OUT/util-g$g.txt" 2>&1 & local mon=$!
        local t0=$SECONDS k=0 m
        for m in /tmp/kaas-fleet-jobs/*.json; do
            KAAS_URL="http://127.0.0.1:${ports[$((k % ${#ports[@]}))]}" "$K" submit "${m%.json}.ptx" --manifest "$m" --name "$(basename "$m" .json)" --no-wait >>"$OUT/submit-g$g.log" 2>&1 || echo "submit failed: $m"
            k=$((k + 1))
        done
        local start=$(date +%s.%N)
        drain 1200
        local wall; wall="$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")"
        kill "$mon" 2>/dev/null || true
        local done_runs; done_runs="$(cat "$OUT"/worker-g$g-*.log | grep -c 'job finished' || true)"
        local per; per="$(for ((i = 0; i < g; i++)); do printf '%s ' "$(grep -c 'job finished' "$OUT/worker-g$g-$i.log" || true)"; done)"
        printf '%s\t%s\t%s\t%s\t%s\n' "$g" "$k" "$done_runs" "$wall" "$per" | tee -a "$OUT/fleet.tsv"
        kill "${pids[@]}" 2>/dev/null || true; wait "${pids[@]}" 2>/dev/null || true
    done
    [[ "$db" == postgres ]] && pg_stop
    python3 - "$OUT/fleet.tsv" "$db" <<'PY'
import sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"fleet on {sys.argv[2]}: GPUs | jobs submitted | runs finished | wall s | jobs/min | × 1 GPU | runs per worker")
base = None
for g, sub, fin, wall, per in rows:
    rate = int(fin) / float(wall) * 60
    base = base or (rate if g == "1" else None)
    print(f"{g} | {sub} | {fin} | {wall} | {rate:.1f} | {rate / base:.2f}" if base else f"{g} | {sub} | {fin} | {wall} | {rate:.1f} | -", "|", per)
PY
}

# Timing interference between neighbouring GPUs: one catalog kernel (2048³ tn f32)
# benchmarked on GPU 0 (`kaas run --bench`, graph mode) $1 times alone and $1 times while
# GPUs 1… run back-to-back fp16 matrix products through PyTorch, alternating; medians
# and speedups over cuBLASLt-autotune-max side by side.
interfere() {
    setup_device
    local rounds="${1:-3}" budget="${2:-1500}" r ngpu
    OUT="$OUT/interfere"; mkdir -p "$OUT"
    ngpu="$(nvidia-smi -L | wc -l)"
    fleet_jobs /tmp/kaas-interfere 64 >/dev/null
    local X=/tmp/kaas-interfere/f32_tn_2048x2048x2048
    for ((r = 0; r < rounds; r++)); do
        CUDA_VISIBLE_DEVICES=0 "$K" run --ptx "$X.ptx" --manifest "$X.json" --bench --budget-ms "$budget" --modes graph --json >"$OUT/alone-$r.json" 2>/dev/null || true
        local hogs=() i
        for ((i = 1; i < ngpu; i++)); do
            CUDA_VISIBLE_DEVICES=$i python3 -c 'import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.half)
end = time.time() + 600
while time.time() < end:
    for _ in range(20):
        a @ a
    torch.cuda.synchronize()' >"$OUT/hog-$r-$i.log" 2>&1 & hogs+=($!)
        done
        # Until every neighbour is busy (PyTorch takes seconds to start), at most 90 s.
        for _ in $(seq 1 90); do
            nvidia-smi --query-gpu=index,utilization.gpu --format=csv,noheader,nounits | awk -F', ' '$1 > 0 && $2 < 50 {idle++} END {exit idle > 0}' && break
            sleep 1
        done
        nvidia-smi --query-gpu=index,utilization.gpu,power.draw --format=csv,noheader >>"$OUT/busy-util.txt"
        CUDA_VISIBLE_DEVICES=0 "$K" run --ptx "$X.ptx" --manifest "$X.json" --bench --budget-ms "$budget" --modes graph --json >"$OUT/busy-$r.json" 2>/dev/null || true
        nvidia-smi --query-gpu=index,utilization.gpu,power.draw --format=csv,noheader >>"$OUT/busy-util.txt"
        kill "${hogs[@]}" 2>/dev/null || true; wait "${hogs[@]}" 2>/dev/null || true
    done
    python3 - "$OUT" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("neighbours | round | kernel median µs | cuBLASLt-autotune-max µs | speedup")
for kind in ("alone", "busy"):
    for r in range(rounds):
        try:
            o = json.load(open(f"{out}/{kind}-{r}.json"))
            b = o["bench"]
            t = b["timings"]["graph"]["median_us"]
            sp = b["speedups"]["graph"]["cublaslt_autotune_max"]
            print(f"{kind} | {r} | {t:.2f} | {t * sp:.2f} | {sp:.3f}")
        except Exception as e:
            print(f"{kind} | {r} | unreadable: {e}")
PY
}

# Tuning on demand, as a user asks for it (NVRTC first, in two calls of their own that
# carry .dev/nvrtc-1, then .dev/nvrtc-2, each running `bash scripts/device-run.sh nvrtc`;
# then, within the warm machine's 30 s, this mode carrying .dev/run: the tree, NVRTC and
# `kaas` exceed one carry): a worker per GPU (with NVRTC 12.9, since the
# tune job compiles the tuner's templates), `kaas request --workload $1 --tokens $2` (and
# KAAS_REQUEST_PROBLEMS, a problem list) as
# an admin with a search budget of $3 ms per problem, at most $4 seconds; the table of
# scripts/request-report.py last, and the request's part of the catalog as a bundle in
# $OUT/request/bundle.
request_run() {
    setup_device; tune_compiler
    local workloads="$1" tokens="$2" budget="${3:-20000}" seconds="${4:-480}" bench="${5:-800}" w ids=()
    local top="$OUT/request"; mkdir -p "$top"; OUT="$top"
    rm -f /tmp/kaas-request.db*
    # KAAS_REQUEST_RETUNE_M=M (or LO-HI): the shipped catalog with the workload bundle's
    # problems of at most M (LO to HI) rows of A left out, so that they are tuned again (a
    # new family for them).
    # KAAS_REQUEST_RETUNE_LOST_FROM=M: those of at least M rows whose tune ended
    # baseline_faster left out (a changed search for them).
    if [[ -n "${KAAS_REQUEST_RETUNE_M:-}${KAAS_REQUEST_RETUNE_LOST_FROM:-}" ]]; then
        local cat=/tmp/kaas-request-catalog; rm -rf "$cat"; cp -r "$(repo_root)/kernels" "$cat"
        python3 - "$cat/h100-workloads/index.json.gz" "${KAAS_REQUEST_RETUNE_M:-0}" "${KAAS_REQUEST_RETUNE_LOST_FROM:-0}" <<'PY'
import gzip, json, sys
path, rows, lost_from = sys.argv[1], sys.argv[2], int(sys.argv[3])
lo, hi = (int(x) for x in rows.split("-")) if "-" in rows else (1, int(rows))
idx = json.load(gzip.open(path))
key = lambda p: json.dumps(p, sort_keys=True)
lost = {key(t["problem"]) for t in idx.get("tunes", []) if lost_from and t["state"] == "baseline_faster" and t["problem"]["m"] >= lost_from}
keep = lambda p: not lo <= p["m"] <= hi and key(p) not in lost
for part in ("problems", "entries", "baselines", "tunes"):
    idx[part] = [x for x in idx.get(part, []) if keep(x if part == "problems" else x["problem"])]
used = {e["artifact"] for e in idx["entries"]}
idx["artifacts"] = [a for a in idx["artifacts"] if a["sha256"] in used]
json.dump(idx, gzip.open(path, "wt"))
print(f"catalog: workload problems with {lo} <= M <= {hi}, and {len(lost)} baseline_faster ones of M >= {lost_from}, left out; {len(idx['problems'])} kept")
PY
        export KAAS_REQUEST_CATALOG="$cat"
    fi
    # KAAS_REQUEST_CATALOG: another catalog tree (e.g. one without the shipped workload
    # bundle, to tune its problems again).
    start_server /tmp/kaas-request.db "$bench" --tune-budget-ms "$budget" ${KAAS_REQUEST_CATALOG:+--catalog "$KAAS_REQUEST_CATALOG"} "${TUNE_PTX[@]}"
    export KAAS_TOKEN="$("$K" token create --name ml-engineer --role admin 2>/dev/null)"
    # KAAS_REQUEST_PROBLEMS: first, a request of, a list of problems (`sm_90/f16/tn/MxNxK,…`),
    # queued before the workloads and reported as "problems".
    [[ -n "${KAAS_REQUEST_PROBLEMS:-}" ]] && ids+=("problems:$("$K" request --problem "$KAAS_REQUEST_PROBLEMS" --no-wait 2>>"$top/request.log" | tail -n 1)")
    for w in ${workloads//,/ }; do
        ids+=("$w:$("$K" request --workload "$w" ${tokens:+--tokens "$tokens"} --no-wait 2>>"$top/request.log" | tail -n 1)")
    done
    tail -n "${#ids[@]}" "$top/request.log"
    drain "$seconds"
    "$K" export "$top/full" >/dev/null
    for w in "${ids[@]}"; do
        mkdir -p "$top/${w%%:*}"
        echo "== ${w%%:*} (request ${w#*:})"
        python3 "$here/request-report.py" "$KAAS_URL" "${w#*:}" "$top/serve.log" "$top/full" "$top/${w%%:*}" | tee "$top/${w%%:*}/report.txt" | tail -n 12
    done
    rm -rf "$top/full"
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
    # One file back (the device tool returns a limited number of files).
    tar czf "$top.tgz" -C "$top" . && rm -rf "$top"
}

# The H100 catalog measured on this machine's GPUs (an H200's): every $1-th entry of
# kernels/h100 in (layout, acc, FLOP) order, so every bucket is sampled, submitted as
# it is (PTX and concrete manifest) to a server with a worker per GPU, benchmarks of $3
# ms, at most $2 seconds; this class's part of the catalog as $OUT/bundle.tgz and a
# table of what the H100 kernels do on this GPU.
recheck() {
    setup_device
    local every="${1:-8}" seconds="${2:-480}" bench="${3:-500}" m
    local dir=/tmp/kaas-recheck; rm -rf "$dir"; mkdir -p "$dir"
    python3 "$here/recheck.py" pick "$(repo_root)/kernels/h100" "$dir" "$every"
    start_server /tmp/kaas-recheck.db "$bench"
    export KAAS_TOKEN="$("$K" token create --name h100-recheck --role admin 2>/dev/null)"
    for m in "$dir"/*.json; do
        "$K" submit "${m%.json}.ptx" --manifest "$m" --name "$(basename "$m" .json)" --no-wait >>"$OUT/recheck-submit.log" 2>&1 || echo "submit failed: $m"
    done
    KAAS_EXPORT_CLASSES="$(curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; print(",".join(sorted({w["device_class"] for w in json.load(sys.stdin)["workers"] if w["device_class"]})))')" \
        drain_and_export "$seconds"
    python3 "$here/recheck.py" table "$OUT/bundle.tgz"
}

# Re-measure the catalog: every EVERY-th entry of the workers' device class from OFFSET,
# through today's verification and both timing regimes (`kaas remeasure`); a GPU class
# the shipped catalog has no entries for gets the H100 entries submitted instead, as
# `recheck` does. The report (scripts/remeasure-report.py) last; the run rows and the
# exported catalog in $OUT/remeasure.tgz.
remeasure() {
    setup_device
    local every="${1:-8}" offset="${2:-0}" seconds="${3:-420}" bench="${4:-600}" class m
    local db=/tmp/kaas-remeasure.db; rm -f "$db"
    T_REMEASURE="$(date -u +%Y-%m-%dT%H:%M:%S)"
    start_server "$db" "$bench"
    class="$(curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; print(sorted({w["device_class"] for w in json.load(sys.stdin)["workers"] if w["device_class"]})[0])')"
    echo "workers' device class: $class"
    # KAAS_REMEASURE_UNMEASURED=1: only entries not yet timed in a named regime.
    local only=(); [[ "${KAAS_REMEASURE_UNMEASURED:-0}" == 1 ]] && only=(--unmeasured)
    # KAAS_REMEASURE_UNPACED=1: only served entries of 2^36 FLOP and up not yet timed paced.
    [[ "${KAAS_REMEASURE_UNPACED:-0}" == 1 ]] && only+=(--unpaced)
    if [[ "$("$K" remeasure --device-class "$class" --every "$every" --offset "$offset" "${only[@]}" | tee "$OUT/remeasure-queue.txt")" == 0\ * && ${#only[@]} == 0 ]]; then
        local dir=/tmp/kaas-recheck; rm -rf "$dir"; mkdir -p "$dir"
        # The same entries `kaas remeasure --every --offset` would take (the offset too).
        python3 "$here/recheck.py" pick "$(repo_root)/kernels/h100" "$dir" "$every" "$offset"
        export KAAS_TOKEN="$("$K" token create --name remeasure --role admin 2>/dev/null)"
        for m in "$dir"/*.json; do
            "$K" submit "${m%.json}.ptx" --manifest "$m" --name "$(basename "$m" .json)" --no-wait >>"$OUT/remeasure-submit.log" 2>&1 || echo "submit failed: $m"
        done
    fi
    cat "$OUT/remeasure-queue.txt"
    drain "$seconds"
    curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; print("queue left:", json.load(sys.stdin)["queue"])'
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
    # From the checkout's scripts/: it shares catalog_index.py's rule.
    python3 "$(repo_root)/scripts/remeasure-report.py" "$db" "$OUT/remeasure-runs.json" | tee "$OUT/remeasure.txt"
    "$K" export "$OUT/full" >/dev/null
    # Only what this pass measured: its runs' entries and the baselines timed beside them
    # (the whole export, every shipped bundle, is too large to come back from a call).
    python3 - "$OUT/full" "$T_REMEASURE" <<'PY'
import json, os, sys
full, since = sys.argv[1], sys.argv[2]
idx = json.load(open(os.path.join(full, "index.json")))
idx["entries"] = [e for e in idx["entries"] if e["run"]["measured_at"] >= since]
idx["baselines"] = [b for b in idx["baselines"] if b["measured_at"] >= since]
arts = {e["artifact"] for e in idx["entries"]}
idx["artifacts"] = [a for a in idx["artifacts"] if a["sha256"] in arts]
keys = {json.dumps(x["problem"], sort_keys=True) for x in idx["entries"] + idx["baselines"]}
idx["problems"] = [p for p in idx["problems"] if json.dumps(p, sort_keys=True) in keys]
idx["tunes"] = []
json.dump(idx, open(os.path.join(full, "index.json"), "w"), indent=1)
for f in os.listdir(os.path.join(full, "ptx")):
    if f[:-4] not in arts:
        os.remove(os.path.join(full, "ptx", f))
print(f"export: {len(idx['entries'])} entries and {len(idx['baselines'])} baselines measured since {since}")
PY
    tar czf "$OUT/remeasure.tgz" -C "$OUT" full remeasure-runs.json remeasure.txt serve.log && rm -rf "$OUT/full"
}

# The GPU tests named, in turn, inside one deadline. libtest would run a filter's matches
# alphabetically; one invocation per test keeps the caller's order, so the most important
# run first and a cut costs the least important.
suite() {
    setup_device
    local seconds="$1"; shift
    local t0=$SECONDS dir="$OUT/suite" logs t at_once="${KAAS_SUITE_JOBS:-1}"
    # Its own folder: two suites of one call (one per GPU) must not share logs.
    logs="$(mktemp -d /tmp/kaas-suite.XXXXXX)"
    mkdir -p "$dir"
    printf 'test\tverdict\truns passed\tseconds\n' >"$dir/suite.tsv"
    # KAAS_SUITE_JOBS tests at once on the one GPU: a verifier run is mostly NVRTC and the
    # sandbox's start on the CPU, so side by side they finish sooner; the verdicts do not
    # depend on timing (the race stage runs its own co-running kernels anyway).
    for t in "$@"; do
        while (( $(jobs -rp | wc -l) >= at_once )); do wait -n || true; done
        suite_test "$t" "$logs" "$dir/suite.tsv" $(( seconds - (SECONDS - t0) )) &
    done
    wait
    tar czf "$dir/logs.tgz" -C "$logs" .
    column -t -s $'\t' "$dir/suite.tsv" 2>/dev/null || cat "$dir/suite.tsv"
}

# One test of a suite, with $4 seconds left of its deadline: its line in $3.
suite_test() {
    local t="$1" logs="$2" tsv="$3" left="$4" name="${1##*::}" s=$SECONDS rc=0 verdict passed
    if (( left < 20 )); then printf '%s\tnot run\t0\t0\n' "$name" >>"$tsv"; return; fi
    OUT="$logs/$name" timeout "$left" bash "$here/gpu-check.sh" remote --exact "$t" >"$logs/$name.out" 2>&1 || rc=$?
    # gpu-check.sh's own status is tee's; the test binary's verdict is libtest's line.
    if (( rc == 124 )); then verdict=cut
    elif grep -q '^test result: ok. 1 passed' "$logs/$name/gpu.log" 2>/dev/null; then verdict=passed
    else verdict=failed; fi
    passed="$(grep -c ': Pass ' "$logs/$name/gpu.log" 2>/dev/null || true)"
    printf '%s\t%s\t%s\t%s\n' "$name" "$verdict" "${passed:-0}" "$((SECONDS - s))" | tee -a "$tsv"
}

# The H200 grid catalog (kernels/h200), one batch a call; the next call continues where
# the adopted batches left it (scripts/h200-catalog.py, which plans, submits and exports).
# Once every problem is answered, the tunes go to the problems an H100 kernel answers
# without winning (retunes).
# The batch: the H100 catalog's kernels (PTX and concrete manifests) for the grid problems
# without an H200 answer, spread over layouts and FLOP buckets, as many as this machine's
# GPUs (a worker each) finish in $1 seconds at $2 GPU seconds a job; with $4 > 0, tunes of
# the problems no H100 kernel answers fill what is left of the time, at $4 seconds each
# (they compile the tuner's templates: NVRTC, `nvrtc` in the same warm machine first).
# $3: the benchmark budget in ms. The queue is drained for at most $1 + KAAS_H200_SLACK
# (60) seconds; what it still holds is planned again next time. Back: $OUT/h200-batch.tgz
# for `python3 scripts/h200-catalog.py adopt`, the plan and the batch's figures
# (report.txt), and the server's log.
h200_catalog() {
    T_CALL=$SECONDS
    setup_device
    local seconds="${1:-420}" job="${2:-4.2}" bench="${3:-600}" tune="${4:-0}" repo gpus class
    repo="$(repo_root)"; gpus="$(nvidia-smi -L | wc -l)"
    # CUDA_VISIBLE_DEVICES=1,2,… leaves the other GPUs to another job of the same call (the
    # GPU suite, say): the workers, and so the batch's size, follow the GPUs it names.
    [[ -n "${CUDA_VISIBLE_DEVICES:-}" ]] && gpus="$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)"
    local batch=/tmp/kaas-h200-batch cat=/tmp/kaas-h200-catalog db=/tmp/kaas-h200.db helper="$repo/scripts/h200-catalog.py"
    rm -rf "$batch" "$cat" "$db"* /tmp/kaas-h200-full; mkdir -p "$cat"
    # Tunes compile the tuner's templates: with PTX staged beforehand (stage-tune-ptx) the
    # workers read it, else NVRTC (`nvrtc` in the same warm machine first).
    TUNE_PTX=()
    [[ "$tune" != 0 ]] && tune_compiler
    python3 "$helper" plan --catalog "$repo/kernels" --gpus "$gpus" --seconds "$seconds" --job-seconds "$job" --tune-seconds "$tune" --out "$batch" \
        ${KAAS_H200_IMPROVE:+--improve} --exclude /tmp/kaas-h200-planned.txt | tee "$OUT/plan.txt"
    # The server imports only what the batch needs: the template kernels and kernels/h200
    # (its answers, and the tunes' seeds). The H100 catalog and the baseline tables would
    # cost the start most of a minute for nothing: every run times its own baselines.
    cp "$repo/kernels/index.json" "$cat/" && cp -r "$repo/kernels/ptx" "$cat/"
    # A batch with retunes: kernels/h200 without their problems, which it would answer.
    if python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])).get("retunes") else 1)' "$batch/plan.json"; then
        python3 "$helper" without "$batch" "$cat/h200" --catalog "$repo/kernels" | tee -a "$OUT/plan.txt"
    elif [[ -d "$repo/kernels/h200" ]]; then
        ln -s "$repo/kernels/h200" "$cat/h200"
    fi
    # One local client submits hundreds of jobs: no per-token rate limit. Tunes search
    # for KAAS_H200_TUNE_BUDGET_MS, as kernels/h100-workloads' were.
    start_server "$db" "$bench" --catalog "$cat" --rate-limit-per-minute 1000000 --rate-limit-burst 1000000 \
        --tune-budget-ms "${KAAS_H200_TUNE_BUDGET_MS:-20000}" "${TUNE_PTX[@]}"
    # The workers' class, once they have announced it (their GPU probe follows readiness).
    for _ in $(seq 1 120); do
        class="$(curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; print(" ".join(sorted({w["device_class"] for w in json.load(sys.stdin)["workers"] if w["device_class"]})))')"
        [[ -n "$class" ]] && break; sleep 0.5
    done
    [[ "$class" != *" "* && -n "$class" ]] || { echo "workers' device classes: '$class' (one expected)" >&2; exit 1; }
    echo "workers' device class: $class ($gpus GPUs)" | tee -a "$OUT/plan.txt"
    export KAAS_TOKEN="$("$K" token create --name kaas-tuner --role admin 2>/dev/null)"
    local t0=$SECONDS
    python3 "$helper" submit "$batch" --url "$KAAS_URL" --device "$class" | tee -a "$OUT/plan.txt"
    # KAAS_CALL_LIMIT: the device call's limit in seconds (its limit_s, less than asked for
    # when little device time is left). The drain ends early enough for the export and
    # the packing (about a minute) to finish inside it: a batch killed before its export
    # returns nothing.
    local drain_s=$(( ${seconds%.*} + ${KAAS_H200_SLACK:-60} ))
    if [[ -n "${KAAS_CALL_LIMIT:-}" ]]; then
        local room=$(( KAAS_CALL_LIMIT - (SECONDS - T_CALL) - 75 ))
        (( room < drain_s )) && { echo "drain cut to ${room} s by KAAS_CALL_LIMIT=${KAAS_CALL_LIMIT}" | tee -a "$OUT/plan.txt"; drain_s=$room; }
    fi
    drain "$drain_s"
    local wall=$((SECONDS - t0))
    curl -fs "$KAAS_URL/v1/health" | python3 -c 'import json,sys; print("queue left:", json.load(sys.stdin)["queue"])' | tee -a "$OUT/plan.txt"
    kill "$SERVER"; wait "$SERVER" 2>/dev/null || true
    "$K" export /tmp/kaas-h200-full >/dev/null
    python3 "$helper" export /tmp/kaas-h200-full "$db" "$OUT/h200-batch" --catalog "$cat" --device "$class" --wall-seconds "$wall" --gpus "$gpus" | tee -a "$OUT/plan.txt"
    python3 "$helper" status --catalog "$repo/kernels" --batch "$OUT/h200-batch" | tee "$OUT/report.txt"
    tar czf "$OUT/h200-batch.tgz" -C "$OUT" h200-batch && rm -rf "$OUT/h200-batch" /tmp/kaas-h200-full
    gzip -f "$OUT/serve.log"
}

case "$mode" in
    stage) stage ;;
    stage-lite) stage_lite && pack_kaas .dev/run/kaas && carry_size .dev/run ;;
    carry-size) carry_size "$@" ;;
    aside) aside ;;
    restore) restore ;;
    profile) profile "$@" ;;
    pass) catalog_pass "$@" ;;
    adopt) adopt "$@" ;;
    e2e) e2e ;;
    tune) tune "$@" ;;
    verify) verify "$@" ;;
    whole) whole "$@" ;;
    pairs) pairs "$@" ;;
    stage-ab) stage_ab "$@" ;;
    ab) ab "$@" ;;
    submit) submit "$@" ;;
    stage-nvrtc) stage_nvrtc ;;
    stage-tune-ptx) stage_tune_ptx ;;
    stage-fleet) stage_fleet ;;
    nvrtc) nvrtc12 && echo "NVRTC 12 ready: $(ls -la "$(repo_root)/.dev/nvrtc12/lib")" ;;
    source) source_run "$@" ;;
    fleet) fleet "$@" ;;
    request) request_run "$@" ;;
    recheck) recheck "$@" ;;
    remeasure) remeasure "$@" ;;
    h200) h200_catalog "$@" ;;
    suite) suite "$@" ;;
    interfere) interfere "$@" ;;
    *) echo "usage: $0 stage | e2e | tune ARGS… | profile SHAPE LAYOUT ONLY… | pass LAYOUTS SECONDS [TUNE ARGS…] | whole KERNEL SIZE BUDGET_MS… | pairs DIR BUDGET_MS | verify STATE SECONDS BENCH_MS [TUNE SUBMIT OPTIONS…]" >&2; exit 2 ;;
esac
