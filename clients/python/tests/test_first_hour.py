"""A user's first hour with the Python client, without a GPU: device classes spelt as
people spell them, the catalog tree read as the service imports it, a problem given as
its path, the answers the service gives (a tune that ended `baseline_faster`), and the
install hints of the optional parts."""

import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from fixtures import BUNDLE, WIN, baseline, entry, problem, ptx, write_bundle  # noqa: E402

from kaas_client import Kernel  # noqa: E402
from kaas_client.__main__ import main as cli  # noqa: E402
from kaas_client.catalog import Catalog  # noqa: E402
from kaas_client.errors import NoKernelError, UnknownDeviceError  # noqa: E402
from kaas_client.locking import resolve  # noqa: E402
from kaas_client.manifest import Problem  # noqa: E402

P = problem("nn", 1024, 1024, 1024)
PROB = Problem.from_dict(P)


def tree(root: Path, tunes=()) -> Path:
    """`kernels/`-shaped: a top-level demo kernel for P, replaced by `h100/`'s entry."""
    demo, served = ptx("demo"), ptx("served")
    write_bundle(root, [entry(demo, P, speedups=WIN, median_us=20.0, entry_name="demo")], [], [demo])
    write_bundle(root / "h100", [entry(served, P, speedups=WIN, median_us=10.0, entry_name="served")], [baseline(P, "cublas", 12.0)], [served])
    if tunes:
        import json
        index = json.loads((root / "h100" / "index.json").read_text())
        index["tunes"] = list(tunes)
        (root / "h100" / "index.json").write_text(json.dumps(index))
    return root


class FirstHour(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())

    def test_device_classes_are_spelt_as_the_service_takes_them(self):
        cat = Catalog.from_tree(tree(self.tmp / "kernels"))
        for spelling in ("H100-SXM", "h100", "H100 SXM", "NVIDIA H100 80GB HBM3"):
            self.assertEqual(cat.lookup(PROB, spelling).device_class, "H100-SXM", spelling)
        with self.assertRaises(UnknownDeviceError) as cm:
            cat.lookup(PROB, "Z9000")
        self.assertEqual(cm.exception.code, "unknown_device")
        self.assertEqual(cm.exception.known, ["H100-SXM"])
        self.assertIn("known device classes: H100-SXM", str(cm.exception))

    def test_from_bundle_reads_the_tree_and_gives_the_entry_the_service_holds(self):
        root = tree(self.tmp / "kernels")
        k = Kernel.from_bundle(root, m=1024, n=1024, k=1024, layout="nn", device="h100")
        self.assertEqual(k.ptx, ptx("served"), "the top-level demo kernel is replaced by h100/'s entry")

    def test_lookup_takes_a_problem_path(self):
        cat = Catalog.from_tree(tree(self.tmp / "kernels"))
        self.assertEqual(cat.lookup("sm_90/f32/nn/1024x1024x1024").problem, PROB)
        with self.assertRaises(Exception) as cm:
            cat.lookup(1024)
        self.assertIn("not int", str(cm.exception))

    def test_a_tune_that_ended_baseline_faster_answers_so_offline_too(self):
        q = problem("tn", 16, 4096, 4096)
        tune = {"device_class": "H100-SXM", "problem": q, "state": "baseline_faster", "budget_ms": 1000}
        root = tree(self.tmp / "kernels", tunes=[tune])
        index = (root / "h100" / "index.json")
        import json
        d = json.loads(index.read_text())
        d["baselines"].append(baseline(q, "cublaslt_autotune", 30.0, layout="nn"))
        index.write_text(json.dumps(d))
        qp = Problem.from_dict(q)
        with self.assertRaises(NoKernelError) as cm:
            Catalog.from_tree(root).lookup(qp, "H100-SXM")
        self.assertEqual(cm.exception.code, "baseline_faster")
        self.assertEqual(cm.exception.use_instead["library"], "cublaslt_autotune")
        lock = resolve([qp, PROB], str(root), "h100", cache=self.tmp / "cache")
        self.assertEqual(lock.device_class, "H100-SXM")
        self.assertEqual([f["code"] for f in lock.fallback], ["baseline_faster"])
        self.assertEqual(len(lock.kernels), 1)

    def test_check_reads_every_bundle_of_the_tree(self):
        from kaas_client.__main__ import _kernels
        root = tree(self.tmp / "kernels")
        q = problem("tn", 64, 64, 64)
        extra = ptx("extra")
        write_bundle(root / "h200", [entry(extra, q, device="H200", speedups=WIN, entry_name="extra")], [], [extra])
        got = sorted((k.problem.path, k.sha256 == entry(extra, q)["artifact"]) for k in _kernels(str(root), None, None))
        self.assertEqual(got, [("sm_90/f32/nn/1024x1024x1024", False), ("sm_90/f32/tn/64x64x64", True)])
        self.assertEqual([k.problem.path for k in _kernels(str(root), None, "h200")], ["sm_90/f32/tn/64x64x64"])

    @unittest.skipIf(sys.version_info < (3, 11), "tomllib is Python 3.11's")
    def test_signature_checks_have_an_extra(self):
        import tomllib
        meta = tomllib.loads((HERE.parent / "pyproject.toml").read_text())["project"]["optional-dependencies"]
        self.assertTrue(any(d.startswith("cryptography") for d in meta["signing"]), meta)

    def _python(self, code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", code], cwd=HERE.parent, capture_output=True, text=True)

    def test_the_torch_module_without_torch_says_how_to_install_it(self):
        r = self._python("import sys; sys.modules['torch'] = None\n"
                         "try:\n import kaas_client.torch\nexcept ModuleNotFoundError as e:\n print(e)")
        self.assertIn("pip install 'kaas-client[torch]'", r.stdout, r.stderr)
        self.assertIn("./clients/python[torch]", r.stdout)

    def test_loading_without_cuda_bindings_names_the_extra(self):
        r = self._python("import sys; sys.modules['cuda'] = None; sys.modules['cuda.bindings'] = None\n"
                         "from kaas_client.kernel import import_driver\n"
                         "try:\n import_driver()\nexcept Exception as e:\n print(e)")
        self.assertIn("pip install 'kaas-client[cuda]'", r.stdout, r.stderr)
        self.assertNotIn("pip install cuda-python", r.stdout)

    @unittest.skipUnless((BUNDLE / "index.json").exists(), "no shipped catalog")
    def test_pull_of_a_baseline_faster_problem_says_it_in_two_lines(self):
        import io
        from contextlib import redirect_stderr, redirect_stdout
        from unittest import mock
        from kaas_client import errors
        answer = errors.NoKernelError(404, {"code": "baseline_faster", "detail": "no kernel beats the baselines", "device_class": "H100-SXM",
                                            "use_instead": {"library": "cublaslt_heuristic", "layout": "nn", "mode": "graph", "median_us": 211.83,
                                                            "config": {"words": ["0"] * 40}}}, "http://x")
        out, err = io.StringIO(), io.StringIO()
        with mock.patch("kaas_client.__main__.pull", side_effect=answer), redirect_stdout(out), redirect_stderr(err):
            rc = cli(["pull", "http://x", "--shape", "4096x4096x4096", "-o", str(self.tmp / "k")])
        self.assertEqual(rc, 3)
        self.assertEqual(err.getvalue().splitlines(), ["kaas: baseline_faster: no kernel beats the baselines",
                                                       "use instead: cublaslt_heuristic (nn layout, graph mode), 211.83 µs on H100-SXM"])
        self.assertEqual(out.getvalue(), "", "the configuration only with --json")


if __name__ == "__main__":
    unittest.main()
