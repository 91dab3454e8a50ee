"""Synthetic catalog bundles for the catalog and lock tests (not a test module)."""

import gzip
import hashlib
import json
from pathlib import Path

BUNDLE = Path(__file__).resolve().parent.parent.parent.parent / "kernels"  # the repo's shipped catalog


def ptx(entry: str) -> str:
    return (f".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry {entry}(\n"
            f"\t.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u32 p3\n)\n{{ ret; }}\n")


def problem(layout="tn", m=64, n=128, k=256):
    return {"arch": "sm_90", "acc": "f32", "layout": layout, "m": m, "n": n, "k": k}


def entry(text: str, prob: dict, device="H100-SXM", speedups=None, median_us=10.0, entry_name="k"):
    sha = hashlib.sha256(text.encode()).hexdigest()
    manifest = {"abi": "kaas.hgemm.v1", "problem": prob, "workspace_bytes": 0, "launches": [
        {"entry": entry_name, "grid": [1, 1, 1], "block": [128, 1, 1], "cluster": [1, 1, 1], "shared_mem_bytes": 0,
         "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}, {"i32": "K"}]}]}
    run = {"verdict": "pass", "message": "", "measured_at": "2026-11-22T00:00:00Z",
           "timings": None if speedups is None else {"graph": {"median_us": median_us}},
           "speedups": None if speedups is None else {"graph": speedups, "offline": {}}, "device": None}
    return {"device_class": device, "problem": prob, "artifact": sha, "submitter": "t", "name": f"{entry_name}-{prob['m']}",
            "description": "", "manifest": manifest, "run": run}


def baseline(prob: dict, library: str, us: float, mode="graph", device="H100-SXM", layout=None):
    return {"device_class": device, "problem": prob, "library": library, "layout": layout or prob["layout"], "mode": mode,
            "median_us": us, "timing": {}, "config": {"algo": 1}, "measured_at": "2026-11-22T00:00:00Z"}


def write_bundle(path: Path, entries=(), baselines=(), ptxs=(), gz=False) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "ptx").mkdir(exist_ok=True)
    for text in ptxs:
        (path / "ptx" / f"{hashlib.sha256(text.encode()).hexdigest()}.ptx").write_text(text)
    probs = {json.dumps(e["problem"], sort_keys=True) for e in list(entries) + list(baselines)}
    index = {"format": "kaas.catalog.v1",
             "device_classes": [{"name": "H100-SXM", "model": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0", "sm_count": 132}],
             "problems": [json.loads(p) for p in sorted(probs)], "artifacts": [], "entries": list(entries), "baselines": list(baselines)}
    text = json.dumps(index).encode()
    if gz:
        (path / "index.json.gz").write_bytes(gzip.compress(text))
    else:
        (path / "index.json").write_bytes(text)
    return path


WIN = {"cublas_max": 1.2, "cublaslt_autotune_max": 1.1, "cublaslt_heuristic_max": 1.3}
LOSE = {"cublas_max": 1.2, "cublaslt_autotune_max": 0.9, "cublaslt_heuristic_max": 1.3}
