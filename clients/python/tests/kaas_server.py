"""A real `kaas serve` for the client's service tests (not a test module): started on a
free loopback port with SQLite in a temporary folder, no GPU worker, and a small catalog
written here, so that it is ready in seconds.

The binary: `$KAAS_BIN` (tests/python_client.rs sets it to the one `cargo test` built),
else the repository's target/debug or target/release build, else `kaas` on PATH. None
found: the tests that need it skip, saying so.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[3]

# The toy decoder layer of the service tests (hidden 256, a fused qkv projection, a fused
# gate/up projection), and how the catalog below answers its 1-token problems.
HIDDEN, QKV, MLP = 256, 768, 512
SERVED = (1, QKV, HIDDEN)  # H100-SXM: a kernel that beats every baseline (H200: its stand-in)
LOSES = (1, HIDDEN, HIDDEN)  # H100-SXM: the entry loses to a measured baseline: baseline_faster


def kaas_binary() -> Optional[str]:
    env = os.environ.get("KAAS_BIN")
    if env:
        return env if os.access(env, os.X_OK) else None
    for p in (REPO / "target" / "debug" / "kaas", REPO / "target" / "release" / "kaas"):
        if p.is_file() and os.access(p, os.X_OK):
            return str(p)
    return shutil.which("kaas")


def ptx(tag: str) -> str:
    """PTX the service's checks accept (a parsable module with one entry)."""
    return (f"// client test {tag}\n.version 8.8\n.target sm_90\n.address_size 64\n\n.visible .entry hgemm_{tag}(\n"
            "\t.param .u64 .ptr .global .align 1 a,\n\t.param .u64 .ptr .global .align 1 b,\n"
            "\t.param .u64 .ptr .global .align 1 c,\n\t.param .u32 m,\n\t.param .u32 n,\n\t.param .u32 k\n)\n{\n\tret;\n}\n")


def _problem(m: int, n: int, k: int) -> dict:
    return {"arch": "sm_90", "acc": "f32", "layout": "tn", "m": m, "n": n, "k": k}


def write_catalog(root: Path) -> Path:
    """A one-bundle catalog: H100-SXM and H200 known; SERVED has a kernel that beats its
    baselines on H100-SXM, LOSES an entry that a baseline beats."""
    (root / "ptx").mkdir(parents=True, exist_ok=True)
    devices = [{"name": name, "model": model, "compute_capability": "9.0", "sm_count": 132}
               for name, model in (("H100-SXM", "NVIDIA H100 80GB HBM3"), ("H200", "NVIDIA H200"))]
    artifacts, entries, baselines = [], [], []
    for (m, n, k), tag, speedup, us in ((SERVED, "served", 1.2, 5.0), (LOSES, "loses", 0.8, 6.0)):
        text = ptx(tag)
        sha = hashlib.sha256(text.encode()).hexdigest()
        (root / "ptx" / f"{sha}.ptx").write_text(text)
        artifacts.append({"sha256": sha, "size_bytes": len(text.encode()), "ptx_version": "8.8", "target": "sm_90"})
        p = _problem(m, n, k)
        manifest = {"abi": "kaas.hgemm.v1", "problem": p, "workspace_bytes": 0, "launches": [
            {"entry": f"hgemm_{tag}", "grid": [max(1, n // 128), 1, 1], "block": [256, 1, 1], "cluster": [1, 1, 1],
             "shared_mem_bytes": 0, "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}]}]}
        entries.append({"device_class": "H100-SXM", "problem": p, "artifact": sha, "submitter": "kaas-tuner",
                        "name": f"test-{tag}", "description": "client test", "manifest": manifest,
                        "run": {"verdict": "pass", "message": "verified and benchmarked", "measured_at": "2026-11-20T12:00:00Z",
                                "timings": {"graph": {"median_us": us}},
                                "speedups": {"graph": {lib: speedup for lib in ("cublas_max", "cublaslt_heuristic_max", "cublaslt_autotune_max")}},
                                "device": {"model": "NVIDIA H100 80GB HBM3"}}})
        for lib in ("cublas", "cublaslt_autotune"):
            baselines.append({"device_class": "H100-SXM", "problem": p, "library": lib, "layout": "tn", "mode": "graph",
                              "median_us": us * speedup, "timing": {"median_us": us * speedup}, "config": {"algo": 1},
                              "measured_at": "2026-11-19T12:00:00Z"})
    index = {"format": "kaas.catalog.v1", "device_classes": devices, "problems": [e["problem"] for e in entries],
             "artifacts": artifacts, "entries": entries, "baselines": baselines}
    (root / "index.json").write_text(json.dumps(index, indent=1))
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class KaasServer:
    """`kaas serve --workers 0` on the catalog above; `url`, `token` (a submitter's)."""

    def __init__(self, *extra: str):
        exe = kaas_binary()
        if exe is None:
            raise FileNotFoundError("no kaas binary")
        self.exe = exe
        self.dir = Path(tempfile.mkdtemp(prefix="kaas-client-test-"))
        self.db = f"sqlite://{self.dir / 'kaas.db'}?mode=rwc"
        catalog = write_catalog(self.dir / "catalog")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k != "KAAS_CONFIG" and not k.startswith("KAAS_TUNE")}
        env["KAAS_LOG"] = "warn"
        self.log = open(self.dir / "serve.log", "wb")
        self.proc = subprocess.Popen(
            [exe, "serve", "--database-url", self.db, "--bind", f"127.0.0.1:{self.port}", "--workers", "0",
             "--http-threads", "1", "--catalog", str(catalog), *extra],
            stdout=subprocess.DEVNULL, stderr=self.log, env=env, cwd=self.dir)
        try:
            self._wait_ready(60.0)
            self.token = subprocess.run([exe, "token", "create", "--name", "client-test", "--database-url", self.db],
                                        check=True, capture_output=True, text=True, env=env, cwd=self.dir, timeout=60).stdout.strip()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, within: float) -> None:
        deadline = time.monotonic() + within
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kaas serve exited ({self.proc.returncode}); its log:\n{self.read_log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/health/ready", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"kaas serve not ready within {within:.0f} s; its log:\n{self.read_log()}")
            time.sleep(0.1)

    def read_log(self) -> str:
        try:
            return (self.dir / "serve.log").read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
