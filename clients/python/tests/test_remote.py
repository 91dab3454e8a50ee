"""pull() and the command line against a local http.server serving canned answers."""

import contextlib
import hashlib
import io
import json
import tempfile
import threading
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from kaas_client import ApiError, IntegrityError, Kernel, NoKernelError, Problem, kernel_url, pull
from kaas_client.__main__ import main

PTX = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry hgemm(.param .u64 a, .param .u64 b, .param .u64 c)\n{ ret; }\n"
SHA = hashlib.sha256(PTX.encode()).hexdigest()
PROBLEM = {"arch": "sm_90", "acc": "f32", "layout": "tn", "m": 1024, "n": 1024, "k": 1024}
MANIFEST = {
    "abi": "kaas.hgemm.v1", "problem": PROBLEM, "workspace_bytes": 0,
    "launches": [{"entry": "hgemm", "grid": [8, 8, 1], "block": [256, 1, 1], "cluster": [1, 1, 1],
                  "shared_mem_bytes": 0, "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}]}],
}
VIEW = {
    "problem": PROBLEM, "device_class": "H100-SXM", "submitter": "kaas", "name": "simple",
    "manifest": MANIFEST,
    "artifact": {"sha256": SHA, "size_bytes": len(PTX), "ptx_version": "8.0", "target": "sm_90", "url": f"/v1/artifacts/{SHA}"},
    "run": {"id": 1, "device_class": "H100-SXM", "verdict": "pass", "message": "", "measured_at": "2026-01-01T00:00:00Z",
            "timings": None, "speedups": None, "device": None},
    "benchmarked": False, "beats": [], "baselines": [], "other_device_classes": [],
}
USE_INSTEAD = {"library": "cublaslt_autotune", "layout": "tn", "mode": "graph", "median_us": 12.5,
               "timing": {}, "config": {"algo": 3, "workspace": 0}}
BASELINE_FASTER = {
    "type": "urn:kaas:error:baseline_faster", "title": "A baseline is faster than every kernel", "status": 404,
    "detail": "no kernel in the catalog beats the baselines for sm_90/f32/tn/64x64x64 on H100-SXM: use cublaslt_autotune",
    "code": "baseline_faster", "device_class": "H100-SXM", "use_instead": USE_INSTEAD,
}
NOT_FOUND = {
    "type": "urn:kaas:error:kernel_not_found", "title": "No kernel for this problem", "status": 404,
    "detail": "no kernel for sm_90/f32/nn/64x64x64 yet and no baseline measured", "code": "kernel_not_found",
}
BAD_PATH = {"type": "urn:kaas:error:invalid_path", "title": "Invalid path", "status": 400, "detail": "nope", "code": "invalid_path"}


class Handler(BaseHTTPRequestHandler):
    routes: dict = {}
    seen: list = []

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        self.seen.append((self.path, self.headers.get("Accept")))
        status, ctype, body = self.routes.get(url.path, (404, "text/plain", b"no route"))
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Remote(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        cls.base = f"http://127.0.0.1:{cls.server.server_address[1]}"
        cls.thread = threading.Thread(target=cls.server.serve_forever, daemon=True)
        cls.thread.start()

    @classmethod
    def tearDownClass(cls):
        cls.server.shutdown()
        cls.server.server_close()
        cls.thread.join(timeout=5)

    def setUp(self):
        Handler.seen = []
        Handler.routes = {
            "/v1/kernels/sm_90/f32/tn/1024x1024x1024": (200, "application/json", VIEW),
            f"/v1/artifacts/{SHA}": (200, "text/plain; charset=utf-8", PTX.encode()),
            "/v1/kernels/sm_90/f32/tn/64x64x64": (404, "application/problem+json", BASELINE_FASTER),
            "/v1/kernels/sm_90/f32/nn/64x64x64": (404, "application/problem+json", NOT_FOUND),
            "/v1/kernels/sm_90/f16/nn/64x64x64": (400, "application/problem+json", BAD_PATH),
        }

    def test_kernel_urls(self):
        p = Problem("sm_90", "f32", "tn", 4096, 4096, 4096)
        self.assertEqual(kernel_url("http://h:8080/", p), "http://h:8080/v1/kernels/sm_90/f32/tn/4096x4096x4096")
        self.assertEqual(kernel_url("http://h", p, "H100-SXM", ptx=True), "http://h/v1/kernels/sm_90/f32/tn/4096x4096x4096/ptx?device=H100-SXM")
        self.assertEqual(kernel_url("http://h", p, "a b&c"), "http://h/v1/kernels/sm_90/f32/tn/4096x4096x4096?device=a+b%26c")

    def test_pull_fetches_the_view_then_the_artifact_and_checks_its_sha256(self):
        k = pull(self.base, device="H100-SXM", m=1024, n=1024, k=1024)
        self.assertIsInstance(k, Kernel)
        self.assertEqual((k.sha256, k.ptx, k.problem.path), (SHA, PTX, "sm_90/f32/tn/1024x1024x1024"))
        self.assertEqual(k.view["device_class"], "H100-SXM")
        self.assertEqual(Handler.seen, [
            ("/v1/kernels/sm_90/f32/tn/1024x1024x1024?device=H100-SXM", "application/json"),
            (f"/v1/artifacts/{SHA}", "text/plain"),
        ])

    def test_a_faster_baseline_is_an_exception_carrying_use_instead(self):
        with self.assertRaises(NoKernelError) as cm:
            pull(self.base, device="H100-SXM", m=64, n=64, k=64)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.device_class), (404, "baseline_faster", "H100-SXM"))
        self.assertEqual(e.use_instead, USE_INSTEAD)
        self.assertIn("cublaslt_autotune", str(e))

    def test_no_kernel_and_no_baseline(self):
        with self.assertRaises(NoKernelError) as cm:
            pull(self.base, device=None, m=64, n=64, k=64, layout="nn")
        self.assertEqual((cm.exception.code, cm.exception.use_instead), ("kernel_not_found", None))

    def test_other_errors_are_api_errors(self):
        with self.assertRaises(ApiError) as cm:
            pull(self.base, device=None, m=64, n=64, k=64, acc="f16", layout="nn")
        self.assertNotIsInstance(cm.exception, NoKernelError)
        self.assertEqual((cm.exception.status, cm.exception.code), (400, "invalid_path"))
        Handler.routes["/v1/kernels/sm_90/f32/tn/1024x1024x1024"] = (500, "text/plain", b"boom")
        with self.assertRaises(ApiError) as cm:
            pull(self.base, device=None, m=1024, n=1024, k=1024)
        self.assertEqual((cm.exception.status, cm.exception.detail), (500, "boom"))

    def test_a_tampered_artifact_or_a_foreign_manifest_is_refused(self):
        Handler.routes[f"/v1/artifacts/{SHA}"] = (200, "text/plain", (PTX + "// extra\n").encode())
        self.assertRaises(IntegrityError, pull, self.base, device=None, m=1024, n=1024, k=1024)
        view = json.loads(json.dumps(VIEW))
        view["manifest"]["problem"]["m"] = 2048
        Handler.routes["/v1/kernels/sm_90/f32/tn/1024x1024x1024"] = (200, "application/json", view)
        with self.assertRaises(IntegrityError) as cm:
            pull(self.base, device=None, m=1024, n=1024, k=1024)
        self.assertIn("2048x1024x1024", str(cm.exception))

    def test_cli_pull_writes_a_directory_that_from_dir_reads(self):
        with tempfile.TemporaryDirectory() as d:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = main(["pull", self.base, "--device", "H100-SXM", "--shape", "1024x1024x1024", "-o", f"{d}/k"])
            self.assertEqual(rc, 0)
            self.assertIn(SHA, out.getvalue())
            self.assertEqual(sorted(p.name for p in (Path(d) / "k").iterdir()), ["kernel.json", "kernel.ptx", "manifest.json"])
            k = Kernel.from_dir(Path(d) / "k")
            self.assertEqual((k.sha256, k.manifest.to_dict(), k.view), (SHA, MANIFEST, VIEW))
            # kernel.json names the artifact: a changed kernel.ptx is caught.
            (Path(d) / "k" / "kernel.ptx").write_text(PTX + "// changed\n")
            self.assertRaises(IntegrityError, Kernel.from_dir, Path(d) / "k")

    def test_cli_pull_reports_use_instead(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["pull", self.base, "--shape", "64x64x64", "-o", "/nonexistent/never-written"])
        self.assertEqual(rc, 3)
        self.assertIn("use instead: cublaslt_autotune (tn layout, graph mode)", err.getvalue())
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(main(["pull", self.base, "--shape", "64x0x64", "-o", "/nonexistent"]), 2)

    def test_an_unreachable_service_is_a_clear_error(self):
        from kaas_client import KaasError
        with self.assertRaises(KaasError):
            pull("http://127.0.0.1:9", device=None, m=64, n=64, k=64, timeout=5)


if __name__ == "__main__":
    unittest.main()
