"""Bundles read offline (index.json and index.json.gz), merged in the service's import
order, and answered with the service's rule (src/catalog/mod.rs `best_kernel`): on
synthetic bundles, and on the repo's shipped catalog."""

import gzip
import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures import BUNDLE, LOSE, WIN, baseline, entry, problem, ptx, write_bundle  # noqa: E402

from kaas_client import Kernel  # noqa: E402
from kaas_client.catalog import Catalog, beats_all, bundle_dirs, read_index  # noqa: E402
from kaas_client.errors import IntegrityError, KaasError, NoKernelError, UnknownDeviceError  # noqa: E402
from kaas_client.manifest import Problem  # noqa: E402

P = problem()
PROB = Problem.from_dict(P)


class Rule(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())

    def cat(self, entries, baselines, ptxs, **kw):
        return Catalog.from_tree(write_bundle(self.tmp / "b", entries, baselines, ptxs, **kw))

    def test_beats_all_is_the_services(self):
        self.assertIsNone(beats_all(None))
        self.assertIsNone(beats_all({}))
        self.assertTrue(beats_all({"a": 1.01, "b": 2}))
        self.assertFalse(beats_all({"a": 1.01, "b": 1.0}))
        self.assertFalse(beats_all({"a": 1.5, "b": None}))
        self.assertFalse(beats_all({"a": True}))

    def test_a_kernel_that_beats_every_baseline_is_served(self):
        t = ptx("k")
        c = self.cat([entry(t, P, speedups=WIN)], [baseline(P, "cublas", 12.0)], [t], gz=True)
        e = c.lookup(PROB, "H100-SXM")
        self.assertEqual(e.speedup, 1.1)
        self.assertEqual(e.worst_speedup, 1.1)
        k = Kernel.from_entry(e)
        self.assertEqual(k.problem, PROB)

    def test_a_kernel_must_win_paced_as_well_as_back_to_back(self):
        # The service's ranked_speedups: graph mode's figures capped by the `paced`
        # mode's, which the benchmark times for large problems.
        t = ptx("k")
        for paced, served in ((0.95, False), (1.03, True)):
            e = entry(t, P, speedups={"cublas_max": 1.1, "cublaslt_autotune_max": 1.1})
            e["run"]["speedups"]["paced"] = {"cublaslt_autotune_max": paced}
            c = self.cat([e], [baseline(P, "cublaslt_autotune", 9.0)], [t])
            if served:
                got = c.lookup(PROB, "H100-SXM")
                self.assertEqual(got.speedup, paced)
                self.assertEqual(got.worst_speedup, paced)
            else:
                with self.assertRaises(NoKernelError) as cm:
                    c.lookup(PROB, "H100-SXM")
                self.assertEqual(cm.exception.code, "baseline_faster")

    def test_a_kernel_a_baseline_beats_is_refused_naming_the_fastest_graph_baseline(self):
        t = ptx("k")
        bl = [baseline(P, "cublas", 12.0), baseline(P, "cublaslt_autotune", 9.0),
              baseline(P, "cublaslt_heuristic", 1.0, mode="offline")]  # offline rows never count
        c = self.cat([entry(t, P, speedups=LOSE)], bl, [t])
        with self.assertRaises(NoKernelError) as cm:
            c.lookup(PROB, "H100-SXM")
        self.assertEqual(cm.exception.code, "baseline_faster")
        self.assertEqual(cm.exception.use_instead["library"], "cublaslt_autotune")
        self.assertEqual(cm.exception.use_instead["median_us"], 9.0)
        self.assertEqual(cm.exception.device_class, "H100-SXM")
        self.assertEqual(c.served("H100-SXM"), [])

    def test_without_a_graph_baseline_or_a_benchmark_the_kernel_is_served(self):
        t = ptx("k")
        self.assertEqual(self.cat([entry(t, P, speedups=LOSE)], [baseline(P, "cublas", 1.0, mode="offline")], [t]).lookup(PROB).sha256,
                         entry(t, P)["artifact"])
        self.assertIsNone(Catalog.from_tree(write_bundle(self.tmp / "c", [entry(t, P)], [baseline(P, "cublas", 1.0)], [t])).lookup(PROB).speedup)

    def test_no_entry_is_kernel_not_found_with_the_fastest_baseline(self):
        c = self.cat([], [baseline(P, "cublas", 5.0), baseline(P, "cublaslt_heuristic", 4.0)], [])
        with self.assertRaises(NoKernelError) as cm:
            c.lookup(PROB, "H100-SXM")
        self.assertEqual(cm.exception.code, "kernel_not_found")
        self.assertEqual(cm.exception.use_instead["library"], "cublaslt_heuristic")
        # A class the bundles never measured is unknown, as the service answers it.
        with self.assertRaises(UnknownDeviceError) as cm:
            c.lookup(PROB, "H200")
        self.assertEqual(cm.exception.known, ["H100-SXM"])

    def test_a_later_bundle_replaces_an_entry_and_baselines_like_the_import(self):
        old, new = ptx("k_old"), ptx("k_new")
        write_bundle(self.tmp / "t", [entry(old, P, speedups=WIN, entry_name="k_old")], [], [old])
        write_bundle(self.tmp / "t" / "a-baselines", [], [baseline(P, "cublas", 1.0)], [], gz=True)
        write_bundle(self.tmp / "t" / "b-kernels", [entry(new, P, speedups=WIN, entry_name="k_new")],
                     [baseline(P, "cublas", 50.0)], [new], gz=True)
        self.assertEqual([d.name for d in bundle_dirs(self.tmp / "t")], ["t", "a-baselines", "b-kernels"])
        c = Catalog.from_tree(self.tmp / "t")
        e = c.lookup(PROB, "H100-SXM")
        self.assertEqual(Kernel.from_entry(e).manifest.entries(), ["k_new"])
        self.assertEqual(c.fastest_baseline(PROB, "H100-SXM")["median_us"], 50.0)

    def test_without_a_device_class_the_fastest_median_wins(self):
        a, b = ptx("k_a"), ptx("k_b")
        c = self.cat([entry(a, P, device="H100-SXM", speedups=WIN, median_us=9.0, entry_name="k_a"),
                      entry(b, P, device="H200", speedups=WIN, median_us=7.0, entry_name="k_b")], [], [a, b])
        self.assertEqual(c.lookup(PROB).device_class, "H200")
        self.assertEqual(c.lookup(PROB, "H100-SXM").device_class, "H100-SXM")

    def test_a_ptx_that_does_not_hash_to_its_name_is_refused(self):
        t = ptx("k")
        c = self.cat([entry(t, P, speedups=WIN)], [], [t])
        path = c.lookup(PROB).ptx_path
        path.write_text(t.replace("ret;", "ret; "))
        with self.assertRaises(IntegrityError):
            Kernel.from_entry(c.lookup(PROB))

    def test_unreadable_indexes_are_named(self):
        d = self.tmp / "bad"
        d.mkdir()
        (d / "index.json.gz").write_bytes(b"not gzip")
        with self.assertRaisesRegex(KaasError, "unreadable bundle index"):
            read_index(d)
        (d / "index.json.gz").write_bytes(gzip.compress(json.dumps({"format": "other"}).encode()))
        with self.assertRaisesRegex(KaasError, "index.json.gz: format is `other`"):
            read_index(d)
        with self.assertRaisesRegex(KaasError, "not a catalog bundle"):
            read_index(self.tmp)
        empty = self.tmp / "empty"
        empty.mkdir()
        with self.assertRaisesRegex(KaasError, "no catalog bundle"):
            bundle_dirs(empty)


class Shipped(unittest.TestCase):
    """The repo's kernels/: kernels/h100 ships index.json.gz."""

    @classmethod
    def setUpClass(cls):
        cls.catalog = Catalog.from_tree(BUNDLE)
        # Every H100 kernel the tree ships: the grid (h100) and the tuned workload presets
        # (h100-workloads), with their baselines.
        cls.h100 = {"entries": [], "baselines": []}
        for name in ("h100", "h100-workloads"):
            with gzip.open(BUNDLE / name / "index.json.gz", "rt") as f:
                index = json.load(f)
            cls.h100["entries"] += index["entries"]
            cls.h100["baselines"] += index["baselines"]

    def test_kernel_from_bundle_reads_the_gzipped_index(self):
        k = Kernel.from_bundle(BUNDLE / "h100", m=64, n=4096, k=4096, layout="tn", device="H100-SXM")
        self.assertEqual(k.problem, Problem("sm_90", "f32", "tn", 64, 4096, 4096))

    def test_offline_refuses_exactly_what_the_service_refuses(self):
        # The service's rule, written out independently over the raw index: refused when
        # some graph-mode speedup is below the 1% margin and a graph baseline was measured.
        graph_baselines = {(json.dumps(b["problem"], sort_keys=True), b["device_class"])
                           for i in (self.h100,) for b in i["baselines"] if b["mode"] == "graph"}
        refused, served = set(), set()
        for e in self.h100["entries"]:
            p = Problem.from_dict(e["problem"])
            g = (e["run"]["speedups"] or {}).get("graph") or {}
            has_baseline = (json.dumps(e["problem"], sort_keys=True), e["device_class"]) in graph_baselines
            (refused if g and any(not v >= 1.01 for v in g.values()) and has_baseline else served).add(p)
        self.assertTrue(refused and served)
        offline_refused = set()
        for p in refused | served:
            try:
                e = self.catalog.lookup(p, "H100-SXM")
                self.assertGreaterEqual(e.worst_speedup, 1.01)
            except NoKernelError as err:
                self.assertEqual(err.code, "baseline_faster")
                offline_refused.add(p)
        self.assertEqual(offline_refused, refused)
        self.assertEqual({e.problem for e in self.catalog.served("H100-SXM")}, served)

    def test_a_refusal_names_the_fastest_graph_baseline(self):
        p = Problem("sm_90", "f32", "tn", 4096, 4096, 4096)
        with self.assertRaises(NoKernelError) as cm:
            self.catalog.lookup(p, "H100-SXM")
        rows = [b for b in self.h100["baselines"] if b["mode"] == "graph" and Problem.from_dict(b["problem"]) == p]
        best = min(rows, key=lambda b: b["median_us"])
        self.assertEqual(cm.exception.code, "baseline_faster")
        self.assertEqual((cm.exception.use_instead["library"], cm.exception.use_instead["median_us"]), (best["library"], best["median_us"]))

    def test_the_h100_bundle_replaces_the_root_bundles_unbenchmarked_entry(self):
        p = Problem("sm_90", "f32", "tn", 1024, 1024, 1024)
        root = Catalog.from_bundles([BUNDLE])
        self.assertIsNone(root.lookup(p, "H100-SXM").speedup)  # no baselines there: served, unbenchmarked
        self.assertGreater(self.catalog.lookup(p, "H100-SXM").speedup, 1.0)
        self.assertNotEqual(root.lookup(p, "H100-SXM").sha256, self.catalog.lookup(p, "H100-SXM").sha256)


if __name__ == "__main__":
    unittest.main()
