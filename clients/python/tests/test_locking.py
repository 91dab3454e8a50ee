"""Lock files: resolving problems (from a bundle or a server), writing and reading the
lock, filling the cache, and loading offline with every sha256 checked; the model
configs' problems; the kaas-lock command line."""

import contextlib
import gzip
import io
import json
import sys
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures import LOSE, WIN, baseline, entry, problem, ptx, write_bundle  # noqa: E402

import kaas_client  # noqa: E402
from kaas_client.errors import IntegrityError, LockError  # noqa: E402
from kaas_client.locking import Lock, download, main, parse_problem, resolve  # noqa: E402
from kaas_client.manifest import Problem  # noqa: E402
from kaas_client.models import MODELS, model  # noqa: E402

try:
    import cryptography  # noqa: F401
    HAVE_CRYPTOGRAPHY = True
except ImportError:
    HAVE_CRYPTOGRAPHY = False

WINS, LOSES, NONE = problem(m=64), problem(m=128), problem(m=256)
T_WIN, T_LOSE = ptx("k_win"), ptx("k_lose")


def make_bundle(root: Path) -> Path:
    return write_bundle(root / "kernels", [entry(T_WIN, WINS, speedups=WIN, entry_name="k_win"),
                                           entry(T_LOSE, LOSES, speedups=LOSE, entry_name="k_lose")],
                        [baseline(WINS, "cublas", 9.0), baseline(LOSES, "cublas", 3.0), baseline(NONE, "cublas", 2.0)],
                        [T_WIN, T_LOSE], gz=True)


class Locks(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        self.bundle = make_bundle(self.tmp)
        self.cache = self.tmp / "cache"
        self.problems = [Problem.from_dict(p) for p in (WINS, LOSES, NONE)]

    def locked(self) -> Lock:
        return kaas_client.lock(self.problems, source=str(self.bundle), device_class="H100-SXM",
                                path=self.tmp / "kaas.lock", cache=self.cache)

    def test_only_winning_kernels_are_locked_the_rest_fall_back_with_the_reason(self):
        lk = self.locked()
        self.assertEqual([k.problem for k in lk.kernels], [self.problems[0]])
        self.assertEqual(lk.kernels[0].speedup, 1.1)
        self.assertEqual([(f["problem"], f["code"]) for f in lk.fallback],
                         [(self.problems[1].path, "baseline_faster"), (self.problems[2].path, "kernel_not_found")])
        self.assertEqual(lk.fallback[1]["use_instead"]["library"], "cublas")
        self.assertTrue((self.cache / f"{lk.kernels[0].sha256}.ptx").is_file())

    def test_the_lock_names_the_regime_of_each_speedup(self):
        # Figures from before regimes were named say so; a named regime is kept as it is.
        self.assertEqual(self.locked().kernels[0].regime, "rotation_3_sets")
        idx_path = self.bundle / "index.json.gz"
        idx = json.load(gzip.open(idx_path))
        for e in idx["entries"]:
            e["run"]["regime"] = "l2_cold"
        with gzip.open(idx_path, "wt") as f:
            json.dump(idx, f)
        self.assertEqual(self.locked().kernels[0].regime, "l2_cold")
        self.assertEqual(Lock.read(self.tmp / "kaas.lock").kernels[0].regime, "l2_cold")

    def test_the_lock_round_trips_and_loads_from_the_cache_alone(self):
        self.locked()
        lk = Lock.read(self.tmp / "kaas.lock")
        self.assertEqual(lk.device_class, "H100-SXM")
        self.bundle.rename(self.tmp / "gone")  # no bundle, no server: the cache is enough
        kernels = lk.load(self.cache)
        self.assertEqual(list(kernels), [self.problems[0]])
        self.assertEqual(kernels[self.problems[0]].manifest.entries(), ["k_win"])

    def test_an_altered_cached_artifact_is_refused_by_name(self):
        lk = self.locked()
        path = self.cache / f"{lk.kernels[0].sha256}.ptx"
        path.write_text(T_WIN + "// changed\n")
        with self.assertRaises(IntegrityError) as cm:
            Lock.read(self.tmp / "kaas.lock").load(self.cache)
        self.assertIn(str(path), str(cm.exception))

    def test_a_missing_cache_says_how_to_fill_it_and_download_does(self):
        self.locked()
        lk = Lock.read(self.tmp / "kaas.lock")
        empty = self.tmp / "empty"
        with self.assertRaisesRegex(LockError, "not in the cache .*kaas-lock download"):
            lk.load(empty)
        paths = download(lk, str(self.bundle), empty)
        self.assertEqual(len(paths), 1)
        self.assertEqual(len(lk.load(empty)), 1)

    def test_a_lock_that_does_not_match_is_refused_with_the_fault(self):
        good = self.locked().to_dict()
        cases = {
            "format is `kaas.lock.v0`": dict(good, format="kaas.lock.v0"),
            "the manifest is for": dict(good, kernels=[dict(good["kernels"][0], problem="sm_90/f32/tn/1x128x256")]),
            "is not 64 lowercase hex": dict(good, kernels=[dict(good["kernels"][0], sha256="ABC")]),
            "locked twice": dict(good, kernels=good["kernels"] * 2),
            "missing or malformed field": dict(good, kernels=[{"problem": "sm_90/f32/tn/64x128x256"}]),
        }
        for fault, d in cases.items():
            path = self.tmp / "bad.lock"
            path.write_text(json.dumps(d))
            with self.assertRaisesRegex(LockError, fault):
                Lock.read(path)
        (self.tmp / "bad.lock").write_text("{")
        with self.assertRaisesRegex(LockError, "not JSON"):
            Lock.read(self.tmp / "bad.lock")
        with self.assertRaisesRegex(LockError, "cannot read"):
            Lock.read(self.tmp / "none.lock")

    def serve(self, routes: dict) -> str:
        """A local server answering `routes` (path prefix -> (status, body)); its URL."""

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                for prefix, (code, body) in routes.items():
                    if self.path.startswith(prefix):
                        break
                else:
                    code, body = 404, {"code": "kernel_not_found", "detail": "none"}
                ctype = "text/plain" if isinstance(body, str) else ("application/json" if code == 200 else "application/problem+json")
                raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        return f"http://127.0.0.1:{server.server_address[1]}"

    def kernel_answer(self, sign=None):
        """The server's answer for WINS, with a signed record when `sign` (bytes ->
        signature) is given; and the public key document."""
        e = entry(T_WIN, WINS, entry_name="k_win")
        view = {"device_class": "H100-SXM", "name": "k_win", "manifest": e["manifest"],
                "artifact": {"sha256": e["artifact"], "url": f"/v1/artifacts/{e['artifact']}"},
                "run": {"speedups": {"graph": WIN}}}
        if sign is not None:
            from kaas_client.signing import canonical_json
            record = {"format": "kaas.record.v1", "run_id": 1, "submission_id": None, "artifact_sha256": e["artifact"],
                      "manifest": e["manifest"], "problem": WINS, "device_class": "H100-SXM", "verdict": "pass",
                      "message": "", "checks": None, "timings": None, "speedups": {"graph": WIN}, "device": None,
                      "measured_at": "2026-11-22T00:00:00Z"}
            public, signature = sign(canonical_json(record))
            from kaas_client.signing import key_id
            view["record"] = record
            view["signature"] = {"alg": "ed25519", "key_id": key_id(public), "signature": signature}
            return view, {"keys": [{"key_id": key_id(public), "alg": "ed25519", "public_key": public, "current": True}]}
        return view, {"keys": []}

    def test_an_answer_from_a_server_without_a_signed_record_is_refused(self):
        view, _ = self.kernel_answer()
        fx = json.loads((Path(__file__).resolve().parent / "data" / "signed_record.json").read_text())
        keys = {"keys": [{"key_id": fx["key_id"], "alg": "ed25519", "public_key": fx["public_key"], "current": True}]}
        url = self.serve({"/v1/kernels/sm_90/f32/tn/64x128x256": (200, view), view["artifact"]["url"]: (200, T_WIN),
                          "/.well-known/kaas-signing-keys": (200, keys)})
        with self.assertRaisesRegex(IntegrityError, "carries no signed record"):
            resolve(self.problems[::2], url, "H100-SXM", cache=self.cache)

    @unittest.skipUnless(HAVE_CRYPTOGRAPHY, "SKIP: signing a test answer needs the `cryptography` package")
    def test_resolving_from_a_server_checks_each_signed_record_and_downloading_from_one(self):
        import base64
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
        key = Ed25519PrivateKey.generate()
        public = base64.b64encode(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)).decode()
        view, keys = self.kernel_answer(lambda msg: (public, base64.b64encode(key.sign(msg)).decode()))
        routes = {"/v1/kernels/sm_90/f32/tn/64x128x256": (200, view), view["artifact"]["url"]: (200, T_WIN),
                  "/.well-known/kaas-signing-keys": (200, keys)}
        url = self.serve(routes)
        lk = resolve(self.problems[::2], url, "H100-SXM", cache=self.cache)
        self.assertEqual([k.speedup for k in lk.kernels], [1.1])
        self.assertEqual([f["code"] for f in lk.fallback], ["kernel_not_found"])
        self.assertEqual(lk.signing_keys, [public])
        lk.write(self.tmp / "signed.lock")
        again = Lock.read(self.tmp / "signed.lock")
        fresh = self.tmp / "fresh"
        download(again, url, fresh)
        self.assertEqual(len(again.load(fresh)), 1)
        # A pinned key that did not sign it, at resolve or at load: refused.
        other = base64.b64encode(bytes(range(32))).decode()
        with self.assertRaisesRegex(IntegrityError, "signed by key"):
            resolve(self.problems[::2], url, "H100-SXM", cache=self.cache, public_key=other)
        with self.assertRaisesRegex(IntegrityError, "signed by key"):
            again.load(fresh, public_key=other)
        # A lock whose record was edited after signing: refused at load.
        d = json.loads((self.tmp / "signed.lock").read_text())
        d["kernels"][0]["record"]["speedups"]["graph"]["cublas_max"] = 9.0
        with self.assertRaisesRegex(IntegrityError, "does not match the record"):
            Lock.from_dict(d).load(fresh)
        # A record that vouches for another artifact than the one served: refused.
        routes["/v1/kernels/sm_90/f32/tn/64x128x256"] = (200, dict(view, artifact=dict(view["artifact"], sha256=entry(T_LOSE, WINS)["artifact"])))
        with self.assertRaisesRegex(IntegrityError, "the record names artifact"):
            resolve(self.problems[::2], url, "H100-SXM", cache=self.tmp / "c2")

    def test_the_command_line_resolves_downloads_and_verifies(self):
        out = io.StringIO()
        lock_path, cache = self.tmp / "cli.lock", self.tmp / "cli-cache"
        with contextlib.redirect_stdout(out):
            self.assertEqual(main(["resolve", "--source", str(self.bundle), "--device-class", "H100-SXM",
                                   "--problem", "tn/64x128x256", "--problem", "tn/128x128x256",
                                   "--cache", str(cache), "-o", str(lock_path)]), 0)
            self.assertEqual(main(["verify", str(lock_path), "--cache", str(cache)]), 0)
        self.assertIn("1 kernels for H100-SXM, 1 problems fall back", out.getvalue())
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(main(["verify", str(lock_path), "--cache", str(self.tmp / "nothing")]), 2)
            self.assertEqual(main(["resolve", "--source", str(self.bundle), "--model", "gpt-9", "--tokens", "1"]), 2)
        self.assertIn("kaas-lock download", err.getvalue())
        self.assertIn("unknown model `gpt-9`", err.getvalue())


class Models(unittest.TestCase):
    def test_llama_3_1_8b_layer_problems(self):
        got = [p.path for p in model("llama-3.1-8b").problems(64)]
        self.assertEqual(got, ["sm_90/f32/tn/64x4096x4096", "sm_90/f32/tn/64x1024x4096",
                               "sm_90/f32/tn/64x14336x4096", "sm_90/f32/tn/64x4096x14336"])

    def test_every_config_is_consistent(self):
        for name, c in MODELS.items():
            self.assertEqual(c.heads % c.kv_heads, 0, name)
            self.assertEqual(len(c.linears()), 7, name)
        self.assertTrue(MODELS["qwen2.5-7b"].linears()[0][3])  # q_proj has a bias

    def test_problem_text(self):
        self.assertEqual(parse_problem("tn/64x128x256"), Problem.from_dict(WINS))
        self.assertEqual(parse_problem("sm_90/f32/nn/1x2x3").layout, "nn")


if __name__ == "__main__":
    unittest.main()
