"""Tuning, resolving and loading from a real `kaas serve` started here on CPU, with no
GPU worker (tests/kaas_server.py): the request answers what the catalog holds at once
and reports the rest "queued, no worker" until it times out, cleanly; every kernel is
checked against its signed record and cached; a stand-in kernel (H100-SXM for H200) is
locked for the class asked; a service that is down, a quota, an unknown device class and
a model without fp16 linears each give a clear error, or a warning and torch. Skipped,
saying so, without a kaas binary; the kaas_client.torch cases also without torch."""

import contextlib
import io
import os
import sys
import tempfile
import time
import unittest
import warnings
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kaas_server import HIDDEN, LOSES, MLP, QKV, SERVED, KaasServer, free_port, kaas_binary  # noqa: E402

from kaas_client import ApiError, KaasError, QuotaError, ServiceUnavailable, UnknownDeviceError, tune  # noqa: E402
from kaas_client.locking import Lock, main as lock_main, resolve  # noqa: E402
from kaas_client.manifest import Problem  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

needs_kaas = unittest.skipIf(kaas_binary() is None, "SKIP: no kaas binary (cargo build --bin kaas, or set KAAS_BIN)")
needs_torch = unittest.skipIf(torch is None, "SKIP: needs torch (pip install torch)")


def _importable(name: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(name) is not None


def tn(m, n, k) -> Problem:
    return Problem("sm_90", "f32", "tn", m, n, k)


# The toy layer's 1-token problems as the test catalog answers them on H100-SXM.
P_SERVED, P_LOSES = tn(*SERVED), tn(*LOSES)
P_NEW = [tn(1, 2 * MLP, HIDDEN), tn(1, HIDDEN, MLP)]  # in no catalog: queued for a tune


class Server(unittest.TestCase):
    server = None

    @classmethod
    def setUpClass(cls):
        if kaas_binary() is None:
            raise unittest.SkipTest("SKIP: no kaas binary (cargo build --bin kaas, or set KAAS_BIN)")
        cls.server = KaasServer()

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.stop()

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        # The client reads these when no argument names them; the tests name what they mean.
        env = mock.patch.dict(os.environ)
        env.start()
        self.addCleanup(env.stop)
        for name in ("KAAS_TOKEN", "KAAS_PUBLIC_KEY", "KAAS_CACHE"):
            os.environ.pop(name, None)


@needs_kaas
class Tuning(Server):
    def test_with_no_worker_it_reports_queued_no_worker_and_times_out_cleanly(self):
        seen = []
        t0 = time.monotonic()
        report = tune(self.server.url, [P_SERVED, P_LOSES, *P_NEW], device_class="H100-SXM", token=self.server.token,
                      timeout=1.5, poll=0.2, progress=seen.append)
        took = time.monotonic() - t0
        self.assertTrue(report.timed_out and report.no_worker and not report.done)
        self.assertLess(took, 10.0)  # the timeout, a poll and the HTTP calls; nothing hangs
        states = {o.problem: o.state for o in report.outcomes}
        self.assertEqual(states, {P_SERVED: "served", P_LOSES: "baseline_faster", P_NEW[0]: "queued", P_NEW[1]: "queued"})
        by = {o.problem: o for o in report.outcomes}
        self.assertAlmostEqual(by[P_SERVED].speedup, 1.2)
        self.assertEqual(by[P_LOSES].use_instead["library"], "cublas")
        self.assertIn("queued, no worker", by[P_NEW[0]].reason)
        self.assertIn("timed out", report.summary())
        self.assertIn("2 problem(s) queued, no worker (no GPU worker for H100-SXM", report.summary())
        self.assertIn("queued, no worker", report.table())
        self.assertGreaterEqual(len(seen), 2)  # followed, not asked once
        self.assertEqual(len(report.request_ids), 1)

    def test_with_no_worker_the_wait_ends_after_the_no_worker_timeout(self):
        t0 = time.monotonic()
        report = tune(self.server.url, P_NEW, device_class="H100-SXM", token=self.server.token, timeout=600,
                      no_worker_timeout=1, poll=0.2, progress=False)
        self.assertLess(time.monotonic() - t0, 10.0)
        self.assertTrue(report.timed_out and report.no_worker)

    def test_a_settled_request_returns_at_once_and_a_log_gets_plain_progress_lines(self):
        err = io.StringIO()  # not a terminal: lines, as a log wants them, tqdm or not
        with contextlib.redirect_stderr(err):
            report = tune(self.server.url, [f"tn/1x{QKV}x{HIDDEN}", P_LOSES], device_class="H100-SXM",
                          token=self.server.token, timeout=30)
        self.assertTrue(report.done and not report.timed_out)
        self.assertLess(report.seconds, 5.0)
        self.assertEqual(err.getvalue(), "kaas tune on H100-SXM: 2/2 settled (1 baseline_faster, 1 served)\n")

    def test_a_terminal_gets_a_tqdm_bar_where_tqdm_is_installed_else_a_line_in_place(self):
        class Tty(io.StringIO):
            def isatty(self):
                return True

        for have_tqdm in (False, True):
            saved = sys.modules.get("tqdm")
            if not have_tqdm:
                sys.modules["tqdm"] = None  # `from tqdm import tqdm` raises ImportError
            elif saved is None and not _importable("tqdm"):
                continue
            err = Tty()
            try:
                with contextlib.redirect_stderr(err):
                    tune(self.server.url, [P_NEW[0]], device_class="H100-SXM", token=self.server.token, timeout=0.5, poll=0.2)
            finally:
                if not have_tqdm:
                    if saved is None:
                        del sys.modules["tqdm"]
                    else:
                        sys.modules["tqdm"] = saved
            text = err.getvalue()
            with self.subTest(tqdm=have_tqdm):
                self.assertIn("queued, no worker for H100-SXM", text)
                self.assertIn("\r", text)
                self.assertEqual("problem/s" in text, have_tqdm)

    def test_the_service_tuning_class_is_used_when_none_is_named(self):
        report = tune(self.server.url, [P_SERVED], token=self.server.token, timeout=5, progress=False)
        self.assertEqual(report.device_class, "H100-SXM")  # kaas serve's default tuning class
        self.assertEqual(report.outcomes[0].state, "served")

    def test_a_problem_outside_the_service_limits_is_refused_and_the_rest_asked(self):
        big = tn(65536, 65536, 65536)  # 2^49 FLOP, beyond the default tuning limit
        report = tune(self.server.url, [big, P_SERVED], device_class="H100-SXM", token=self.server.token, timeout=5, progress=False)
        by = {o.problem: o for o in report.outcomes}
        self.assertEqual(by[big].state, "refused")
        self.assertIn("tuning limit", by[big].reason)
        self.assertEqual(by[P_SERVED].state, "served")

    def test_an_unknown_device_class_names_the_known_ones(self):
        with self.assertRaises(UnknownDeviceError) as cm:
            tune(self.server.url, [P_SERVED], device_class="A100", token=self.server.token, progress=False)
        self.assertEqual(set(cm.exception.known), {"H100-SXM", "H200"})
        self.assertIn("A100", str(cm.exception))

    def test_a_missing_or_wrong_token_is_a_clear_error(self):
        with self.assertRaisesRegex(KaasError, "tuning needs a token.*KAAS_TOKEN"):
            tune(self.server.url, [P_SERVED], device_class="H100-SXM", token="", progress=False)
        with self.assertRaises(ApiError) as cm:
            tune(self.server.url, [P_SERVED], device_class="H100-SXM", token="kaas_nope", progress=False)
        self.assertEqual(cm.exception.status, 401)

    def test_a_service_that_is_down_is_a_clear_error(self):
        down = f"http://127.0.0.1:{free_port()}"
        with self.assertRaisesRegex(ServiceUnavailable, "does not answer"):
            tune(down, [P_SERVED], device_class="H100-SXM", token="t", progress=False)
        with self.assertRaisesRegex(ServiceUnavailable, "does not answer"):
            resolve([P_SERVED], down, "H100-SXM", cache=self.tmp / "c")


@needs_kaas
class Resolving(Server):
    def test_each_kernel_is_checked_against_its_signed_record_cached_and_locked(self):
        cache = self.tmp / "cache"
        lk = resolve([P_SERVED, P_LOSES, *P_NEW], self.server.url, "H100-SXM", cache=cache)
        self.assertEqual([k.problem for k in lk.kernels], [P_SERVED])
        self.assertEqual({f["problem"]: f["code"] for f in lk.fallback},
                         {P_LOSES.path: "baseline_faster", P_NEW[0].path: "kernel_not_found", P_NEW[1].path: "kernel_not_found"})
        k = lk.kernels[0]
        self.assertEqual((k.record["artifact_sha256"], k.record["verdict"]), (k.sha256, "pass"))
        self.assertEqual(len(lk.signing_keys), 1)
        self.assertTrue((cache / f"{k.sha256}.ptx").is_file())
        lk.write(self.tmp / "kaas.lock")
        loaded = Lock.read(self.tmp / "kaas.lock").load(cache)
        self.assertEqual(list(loaded), [P_SERVED])
        # The cache is used: the artifact is not fetched again (the service is not asked for it).
        (cache / f"{k.sha256}.ptx").write_text("// not the artifact\n")
        with self.assertRaisesRegex(Exception, "sha256"):
            Lock.read(self.tmp / "kaas.lock").load(cache)
        again = resolve([P_SERVED], self.server.url, "H100-SXM", cache=cache)  # a wrong cached file is replaced
        self.assertEqual(again.kernels[0].sha256, k.sha256)
        self.assertEqual(len(Lock.read(self.tmp / "kaas.lock").load(cache)), 1)

    def test_a_stand_in_kernel_is_locked_for_the_class_asked(self):
        lk = resolve([P_SERVED, P_LOSES], self.server.url, "H200", cache=self.tmp / "c")
        self.assertEqual(lk.device_class, "H200")
        self.assertEqual([(k.problem, k.measured_on) for k in lk.kernels], [(P_SERVED, "H100-SXM")])
        self.assertEqual(lk.kernels[0].record["device_class"], "H100-SXM")  # the record says where it was measured
        self.assertEqual(len(lk.fallback), 1)

    def test_a_device_spelling_becomes_the_service_class_name(self):
        lk = resolve([P_SERVED], self.server.url, "NVIDIA H100 80GB HBM3", cache=self.tmp / "c")
        self.assertEqual(lk.device_class, "H100-SXM")

    def test_an_unknown_device_class_is_an_error(self):
        with self.assertRaises(UnknownDeviceError):
            resolve([P_SERVED], self.server.url, "A100", cache=self.tmp / "c")

    def test_the_command_line_tunes_then_writes_the_lock_and_times_out_cleanly(self):
        out, err = io.StringIO(), io.StringIO()
        lock_path, cache = self.tmp / "cli.lock", self.tmp / "cli-cache"
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = lock_main(["resolve", "--source", self.server.url, "--tune", "--token", self.server.token,
                                "--device-class", "H100-SXM", "--problem", f"tn/1x{QKV}x{HIDDEN}", "--problem",
                                f"tn:2x{QKV}x{HIDDEN}", "--timeout", "1", "--no-progress", "--cache", str(cache),
                                "-o", str(lock_path)])
        self.assertEqual(status, 3, err.getvalue())  # timed out: the lock holds what is served now
        self.assertIn("queued, no worker", err.getvalue())
        self.assertIn("1 kernels for H100-SXM, 1 problems fall back", out.getvalue())
        self.assertEqual(len(Lock.read(lock_path).kernels), 1)
        with contextlib.redirect_stdout(out):
            self.assertEqual(lock_main(["verify", str(lock_path), "--cache", str(cache)]), 0)
        self.assertIn("1 signed records verified", out.getvalue())
        with contextlib.redirect_stderr(err):
            self.assertEqual(lock_main(["resolve", "--source", "kernels-folder-not-a-url", "--tune", "--problem", "tn/1x8x8"]), 2)
        self.assertIn("--tune asks a service", err.getvalue())


@needs_kaas
class Quota(unittest.TestCase):
    """A service that allows no open tune per submitter: any request that would queue
    one is refused (429), and nothing is queued."""

    @classmethod
    def setUpClass(cls):
        cls.server = KaasServer("--max-open-tunes", "0")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_a_request_over_the_quota_is_a_quota_error(self):
        with self.assertRaises(QuotaError) as cm:
            tune(self.server.url, [P_NEW[0]], device_class="H100-SXM", token=self.server.token, progress=False)
        self.assertEqual(cm.exception.status, 429)
        self.assertEqual(cm.exception.code, "quota_exceeded")
        self.assertIn("limit is 0", cm.exception.detail)
        # What the catalog answers needs no tune, so it is no quota's business.
        self.assertEqual(tune(self.server.url, [P_SERVED], device_class="H100-SXM", token=self.server.token,
                              progress=False).outcomes[0].state, "served")


def toy_layer(dtype):
    """The toy decoder layer's linears (fused qkv and gate/up), on CPU."""
    from torch import nn
    return nn.ModuleDict({"qkv_proj": nn.Linear(HIDDEN, QKV, bias=False), "o_proj": nn.Linear(HIDDEN, HIDDEN, bias=False),
                          "gate_up_proj": nn.Linear(HIDDEN, 2 * MLP, bias=False), "down_proj": nn.Linear(MLP, HIDDEN, bias=False)}).to(dtype)


@needs_kaas
@needs_torch
class UseFromAService(Server):
    """kt.use(service=...) on CPU: torch.cuda's device queries stand in for an H100."""

    def setUp(self):
        super().setUp()
        import kaas_client.torch as kt
        self.kt = kt
        kt.reset()
        kt.set_strict(False)
        self.saved = torch.cuda.get_device_capability, torch.cuda.get_device_name
        torch.cuda.get_device_capability, torch.cuda.get_device_name = (lambda i=None: (9, 0)), (lambda i=None: "NVIDIA H100 80GB HBM3")
        self.model = toy_layer(torch.float16)
        self.x = torch.rand(1, HIDDEN).half()

    def tearDown(self):
        torch.cuda.get_device_capability, torch.cuda.get_device_name = self.saved
        self.kt.reset()
        self.kt.set_strict(False)

    def use(self, **kw):
        kw.setdefault("device", 0)
        kw.setdefault("cache", self.tmp / "cache")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            n = self.kt.use(**kw)
        return n, [str(x.message) for x in w if issubclass(x.category, self.kt.KaasServiceWarning)]

    def runs_torch(self):
        want = self.model["qkv_proj"](self.x)
        self.kt.patch(self.model)  # CPU layers are not eligible: the model is left as it is
        self.assertEqual(self.kt.patched(self.model), [])
        self.assertTrue(torch.equal(self.model["qkv_proj"](self.x), want))

    def test_a_models_kernels_load_from_the_service_and_save_as_a_lock(self):
        n, warned = self.use(service=self.server.url, model=self.model, tokens=[1], save_lock=self.tmp / "kaas.lock")
        self.assertEqual((n, warned), (1, []))
        self.assertEqual(self.kt.problems(), [("tn",) + SERVED])
        self.assertEqual(self.kt.status()["device_class"], "H100-SXM")
        self.kt.reset()
        self.assertEqual(self.use(lock=self.tmp / "kaas.lock")[0], 1)  # offline, from the lock and the cache
        self.runs_torch()

    def test_tune_first_reports_queued_no_worker_and_loads_what_is_served(self):
        n, warned = self.use(service=self.server.url, model=self.model, tokens=[1], tune=True, token=self.server.token,
                             timeout=1, progress=False)
        self.assertEqual((n, warned), (1, []))
        report = self.kt.tune_report()
        self.assertTrue(report.timed_out and report.no_worker)
        self.assertEqual(report.counts(), {"served": 1, "baseline_faster": 1, "queued": 2})

    def test_a_service_that_is_down_warns_and_leaves_torch(self):
        n, warned = self.use(service=f"http://127.0.0.1:{free_port()}", model=self.model, tokens=[1])
        self.assertEqual(n, 0)
        self.assertEqual(len(warned), 1)
        self.assertIn("does not answer", warned[0])
        self.runs_torch()
        with self.assertRaises(ServiceUnavailable):
            self.use(service=f"http://127.0.0.1:{free_port()}", model=self.model, tokens=[1], strict=True)

    def test_a_gpu_of_a_class_the_service_does_not_know_warns_and_leaves_torch(self):
        n, warned = self.use(service=self.server.url, model=self.model, tokens=[1], device_class="A100")
        self.assertEqual(n, 0)
        self.assertIn("does not know this GPU's device class A100", warned[0])
        self.assertIn("H100-SXM, H200", warned[0])
        self.runs_torch()

    def test_a_model_without_fp16_linears_warns_and_leaves_torch(self):
        self.model = toy_layer(torch.float32)
        self.x = self.x.float()
        n, warned = self.use(service=self.server.url, model=self.model, tokens=[1])
        self.assertEqual(n, 0)
        self.assertIn("no float16 nn.Linear", warned[0])
        self.runs_torch()

    def test_a_quota_refusal_warns_and_loads_what_is_served(self):
        quota = KaasServer("--max-open-tunes", "0")
        try:
            n, warned = self.use(service=quota.url, model=self.model, tokens=[1], tune=True, token=quota.token, progress=False)
        finally:
            quota.stop()
        self.assertEqual(n, 1)
        self.assertEqual(len(warned), 1)
        self.assertIn("refused the tuning request for a quota", warned[0])
        self.assertIsNone(self.kt.tune_report())

    def test_service_only_arguments_need_a_service(self):
        with self.assertRaisesRegex(KaasError, "go with service="):
            self.kt.use(bundle="kernels", model=self.model, tokens=[1], device=0)


if __name__ == "__main__":
    unittest.main()
