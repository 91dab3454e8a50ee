"""A catalog tree with a bundle per GPU, as kernels/ ships kernels/h100 and (built on H200
workers) kernels/h200: each GPU gets the entries measured on its own device class, read
with the service's rule -- on an H200 the H200 bundle's kernels, never an H100 one. On a
small synthetic tree; the torch half skips without torch."""

import gzip
import json
import sys
import tempfile
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fixtures import LOSE, WIN, baseline, entry, problem, ptx, write_bundle  # noqa: E402

from kaas_client.catalog import Catalog  # noqa: E402
from kaas_client.errors import NoKernelError  # noqa: E402
from kaas_client.manifest import Problem  # noqa: E402

try:
    import torch
except ImportError:  # the standard-library CI run: the torch half skips
    torch = None

H100, H200 = "H100-SXM", "H200"
# Three problems: BOTH has a kernel on each class (the H200 one wins there), H100_ONLY one
# measured on the H100 alone, LOST an H100 kernel that an H200 worker measured losing.
BOTH, H100_ONLY, LOST = problem(m=8, n=4, k=16), problem(m=16, n=4, k=16), problem(m=32, n=4, k=16)


def tree(root: Path) -> Path:
    """kernels/ with an h100 bundle and an h200 bundle (its index naming the H200 class)."""
    k100, k200, k_lost = ptx("k_h100"), ptx("k_h200"), ptx("k_lost")
    write_bundle(root / "kernels" / "h100",
                 [entry(k100, p, device=H100, speedups=WIN, entry_name="k_h100") for p in (BOTH, H100_ONLY)]
                 + [entry(k_lost, LOST, device=H100, speedups=WIN, entry_name="k_lost")],
                 [baseline(p, "cublaslt_autotune", 11.0) for p in (BOTH, H100_ONLY, LOST)], [k100, k_lost], gz=True)
    h200 = write_bundle(root / "kernels" / "h200",
                        [entry(k200, BOTH, device=H200, speedups=WIN, entry_name="k_h200"),
                         entry(k_lost, LOST, device=H200, speedups=LOSE, entry_name="k_lost")],
                        [baseline(p, "cublaslt_autotune", 9.0, device=H200) for p in (BOTH, LOST)], [k200, k_lost], gz=True)
    index = json.loads(gzip.decompress((h200 / "index.json.gz").read_bytes()))
    index["device_classes"] = [{"name": H200, "model": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132}]
    (h200 / "index.json.gz").write_bytes(gzip.compress(json.dumps(index).encode()))
    return root / "kernels"


class PerDeviceClass(unittest.TestCase):
    def setUp(self):
        self.kernels = tree(Path(tempfile.mkdtemp()))
        self.catalog = Catalog.from_tree(self.kernels)

    def test_each_class_is_served_its_own_entries(self):
        served = {(e.problem, e.device_class, e.record["name"]) for e in self.catalog.served(H200)}
        self.assertEqual(served, {(Problem.from_dict(BOTH), H200, "k_h200-8")})
        served = {e.problem for e in self.catalog.served(H100)}
        self.assertEqual(served, {Problem.from_dict(p) for p in (BOTH, H100_ONLY, LOST)})

    def test_an_h200_answer_is_the_h200_measurement_and_no_h100_kernel_stands_in(self):
        with self.assertRaises(NoKernelError) as cm:
            self.catalog.lookup(Problem.from_dict(LOST), H200)
        self.assertEqual((cm.exception.code, cm.exception.device_class), ("baseline_faster", H200))
        self.assertEqual(cm.exception.use_instead["median_us"], 9.0)
        with self.assertRaises(NoKernelError) as cm:
            self.catalog.lookup(Problem.from_dict(H100_ONLY), H200)
        self.assertEqual(cm.exception.code, "kernel_not_found")


@unittest.skipIf(torch is None, "needs torch (pip install torch)")
class UseOnAnH200(unittest.TestCase):
    """kt.use(bundle=kernels/) with the GPU's name as the driver reports it."""

    def setUp(self):
        import kaas_client.torch as kt
        self.kt = kt
        kt.reset()
        kt.set_strict(False)
        self.kernels = tree(Path(tempfile.mkdtemp()))
        self.saved = torch.cuda.get_device_capability, torch.cuda.get_device_name

    def tearDown(self):
        torch.cuda.get_device_capability, torch.cuda.get_device_name = self.saved
        self.kt.reset()

    def use_as(self, gpu_name):
        torch.cuda.get_device_capability, torch.cuda.get_device_name = (lambda i=None: (9, 0)), (lambda i=None: gpu_name)
        self.kt.reset()
        return self.kt.use(bundle=self.kernels, device=0)

    def test_an_h200_loads_the_h200_bundles_kernels(self):
        self.assertEqual(self.use_as("NVIDIA H200"), 1)
        self.assertEqual(self.kt.problems(), [("tn", 8, 4, 16)])
        self.assertEqual(self.kt.status()["device_class"], H200)

    def test_an_h100_keeps_the_h100_bundles_kernels(self):
        self.assertEqual(self.use_as("NVIDIA H100 80GB HBM3"), 3)
        self.assertEqual(sorted(self.kt.problems()), [("tn", 8, 4, 16), ("tn", 16, 4, 16), ("tn", 32, 4, 16)])


if __name__ == "__main__":
    unittest.main()
