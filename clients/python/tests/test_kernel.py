"""Kernel files and bundles, operand checks, and the driver calls a launch makes (against a
fake cuda-python driver module: no GPU, torch or cuda-python needed)."""

import copy
import ctypes
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import kaas_client
from kaas_client import kernel as kmod
from kaas_client.errors import CudaError, IntegrityError, KaasError, LaunchError, ManifestError
from kaas_client.kernel import Driver, Kernel, Loaded, check_operands, sha256_hex, tolerance
from kaas_client.manifest import Manifest, Problem

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parent.parent.parent / "kernels"  # the repo's shipped catalog bundle

PTX = """.version 8.0
.target sm_90
.address_size 64
.visible .entry hgemm_main(
\t.param .align 64 .b8 hgemm_main_param_0[128],
\t.param .u64 hgemm_main_param_1,
\t.param .u32 hgemm_main_param_2
)
{ ret; }
.visible .entry hgemm_reduce(.param .u64 p0, .param .u64 p1, .param .u32 p2)
{ ret; }
"""

MANIFEST = {
    "abi": "kaas.hgemm.v1",
    "problem": {"arch": "sm_90", "acc": "f32", "layout": "tn", "m": 256, "n": 128, "k": 512},
    "workspace_bytes": 65536,
    "launches": [
        {"entry": "hgemm_main", "grid": [4, 2, 1], "block": [384, 1, 1], "cluster": [2, 1, 1],
         "shared_mem_bytes": 100_000,
         "params": [{"tensor_map": {"operand": "B", "box": [64, 128], "swizzle": "128B"}}, {"ptr": "workspace"}, {"i32": "K"}]},
        {"entry": "hgemm_reduce", "grid": [8, 1, 1], "block": [128, 1, 1],
         "params": [{"ptr": "workspace"}, {"ptr": "C"}, {"i32": 3}]},
    ],
}


class Names:
    """Stands in for a cuda-python enum type: every member is its own name."""

    def __getattr__(self, name):
        return name


class FakeCu:
    """Just enough of `cuda.bindings.driver` to drive Loaded, recording every call."""

    class CUresult:
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1
        CUDA_ERROR_INVALID_PTX = 218

    CUdevice_attribute = CUfunction_attribute = CUjit_option = CUlaunchAttributeID = Names()

    def __init__(self, cc=(9, 0), param_sizes=None, max_threads=1024, static_smem=0):
        self.calls = []
        self.cc = cc
        self.param_sizes = param_sizes or {"hgemm_main": [128, 8, 4], "hgemm_reduce": [8, 8, 4]}
        self.max_threads, self.static_smem = max_threads, static_smem
        self.launched = []

    def _rec(self, *call):
        self.calls.append(call)

    def cuInit(self, flags): self._rec("cuInit"); return (0,)  # noqa: E704
    def cuDeviceGet(self, i): return (0, f"dev{i}")  # noqa: E704
    def cuDeviceGetName(self, n, dev): return (0, b"Fake GPU 80GB\0\0\0")  # noqa: E704
    def cuDevicePrimaryCtxRetain(self, dev): return (0, "ctx")  # noqa: E704
    def cuCtxSetCurrent(self, ctx): self._rec("cuCtxSetCurrent", ctx); return (0,)  # noqa: E704
    def cuGetErrorName(self, err): return (0, b"CUDA_ERROR_INVALID_PTX" if err == 218 else b"CUDA_ERROR_X")  # noqa: E704
    def cuGetErrorString(self, err): return (0, b"a PTX JIT compilation failed")  # noqa: E704
    def cuModuleGetFunction(self, mod, name): return (0, name.decode())  # noqa: E704
    def CUstream(self, handle): return ("stream", handle)  # noqa: E704

    def cuDeviceGetAttribute(self, attr, dev):
        return (0, {"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": self.cc[0],
                    "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": self.cc[1],
                    "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 232448}[attr])

    def cuModuleLoadDataEx(self, image, n, options, values):
        self._rec("cuModuleLoadDataEx", options)
        assert image.endswith(b"\0")
        if b"BROKEN" in image:
            values[0][:24] = b"ptxas fatal: line 3 bad\0"
            return (218, None)
        return (0, "module")

    def cuFuncGetAttribute(self, attr, fn):
        return (0, {"CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK": self.max_threads,
                    "CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES": self.static_smem}[attr])

    def cuFuncSetAttribute(self, fn, attr, value):
        self._rec("cuFuncSetAttribute", fn, attr, value)
        return (0,)

    def cuFuncGetParamInfo(self, fn, i):
        sizes = self.param_sizes[fn]
        return (0, 8 * i, sizes[i]) if i < len(sizes) else (1, 0, 0)

    def _read_params(self, fn, addr):
        sizes = self.param_sizes[fn]
        ptrs = (ctypes.c_void_p * len(sizes)).from_address(addr)
        return [ctypes.string_at(ptrs[i], s) for i, s in enumerate(sizes)]

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.launched.append(("cuLaunchKernel", fn, (gx, gy, gz), (bx, by, bz), smem, stream, self._read_params(fn, params)))
        return (0,)

    def CUlaunchConfig(self):
        return SimpleNamespace()

    def CUlaunchAttribute(self):
        return SimpleNamespace(value=SimpleNamespace(clusterDim=SimpleNamespace()))

    def cuLaunchKernelEx(self, cfg, fn, params, extra):
        (attr,) = cfg.attrs
        cluster = (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z)
        self.launched.append(("cuLaunchKernelEx", fn, (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                              (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), cfg.sharedMemBytes, cfg.hStream,
                              self._read_params(fn, params), attr.id, cluster, cfg.numAttrs))
        return (0,)


class Files(unittest.TestCase):
    def test_save_and_from_dir_round_trip(self):
        k = Kernel(Manifest.from_dict(MANIFEST), PTX)
        with tempfile.TemporaryDirectory() as d:
            k.save(Path(d) / "out")
            self.assertEqual(sorted(os.listdir(Path(d) / "out")), ["kernel.ptx", "manifest.json"])
            again = Kernel.from_dir(Path(d) / "out")
        self.assertEqual((again.manifest, again.ptx, again.sha256), (k.manifest, PTX, sha256_hex(PTX)))

    def test_sha256_mismatch_and_missing_entries_are_refused(self):
        m = Manifest.from_dict(MANIFEST)
        self.assertRaises(IntegrityError, Kernel, m, PTX, sha256="0" * 64)
        Kernel(m, PTX, sha256=sha256_hex(PTX))
        with self.assertRaises(ManifestError) as cm:
            Kernel(m, PTX.replace("hgemm_reduce(", "other("))
        self.assertIn("hgemm_reduce", str(cm.exception))

    @unittest.skipUnless((BUNDLE / "index.json").exists(), "no kernels/ bundle in this checkout")
    def test_the_shipped_bundle_reads_and_its_sha256s_hold(self):
        ks = Kernel.bundle_entries(BUNDLE)
        self.assertEqual(len(ks), len(json.loads((BUNDLE / "index.json").read_text())["entries"]))
        k = Kernel.from_bundle(BUNDLE, m=1024, n=1024, k=1024, layout="tn")
        self.assertEqual(k.problem.path, "sm_90/f32/tn/1024x1024x1024")
        self.assertEqual(k.sha256, k.view["artifact"])
        self.assertRaises(KaasError, Kernel.from_bundle, BUNDLE, m=77, n=77, k=77)
        self.assertEqual(Kernel.bundle_entries(BUNDLE, device="no-such-class"), [])

    @unittest.skipUnless((BUNDLE / "index.json").exists(), "no kernels/ bundle in this checkout")
    def test_a_corrupted_bundle_artifact_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            index = json.loads((BUNDLE / "index.json").read_text())
            index["entries"] = index["entries"][:1]
            sha = index["entries"][0]["artifact"]
            (Path(d) / "ptx").mkdir()
            (Path(d) / "index.json").write_text(json.dumps(index))
            (Path(d) / "ptx" / f"{sha}.ptx").write_text((BUNDLE / "ptx" / f"{sha}.ptx").read_text() + "// changed\n")
            self.assertRaises(IntegrityError, Kernel.bundle_entries, d)


class FakeDevice:
    def __init__(self, type_, index):
        self.type, self.index = type_, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"


class FakeTensor:
    def __init__(self, shape, dtype="torch.float16", contiguous=True, device=("cuda", 0), ptr=0x7F00_0000_0000):
        self.shape, self.dtype, self._contig, self._ptr = shape, dtype, contiguous, ptr
        self.device = FakeDevice(*device)

    def is_contiguous(self):
        return self._contig

    def data_ptr(self):
        return self._ptr


class Operands(unittest.TestCase):
    tn = Problem("sm_90", "f32", "tn", 256, 128, 512)
    nn = Problem("sm_90", "f32", "nn", 256, 128, 512)

    def test_good_operands_pass_for_each_layout(self):
        check_operands(self.tn, FakeTensor((256, 512)), FakeTensor((128, 512)), FakeTensor((256, 128)), 0)
        check_operands(self.nn, FakeTensor((256, 512)), FakeTensor((512, 128)), FakeTensor((256, 128)), 0)

    def test_each_fault_is_named(self):
        a, b, c = FakeTensor((256, 512)), FakeTensor((128, 512)), FakeTensor((256, 128))
        cases = [
            ((FakeTensor((256, 512), dtype="torch.float32"), b, c), "A must be a torch.float16"),
            ((a, FakeTensor((512, 128)), c), "B must be 128×512 (layout tn)"),
            ((a, b, FakeTensor((128, 256))), "C must be 256×128"),
            ((a, FakeTensor((128, 512), contiguous=False), c), "B must be contiguous"),
            ((a, b, FakeTensor((256, 128), device=("cpu", None))), "not a CUDA device"),
            ((a, b, FakeTensor((256, 128), device=("cuda", 1))), "loaded on cuda:0"),
            ((FakeTensor((256, 512), ptr=0x7F00_0000_0002), b, c), "16-byte aligned"),
        ]
        for ops, needle in cases:
            with self.subTest(needle=needle):
                with self.assertRaises(LaunchError) as cm:
                    check_operands(self.tn, *ops, 0)
                self.assertIn(needle, str(cm.exception))

    def test_tolerance_scales_with_k(self):
        self.assertAlmostEqual(tolerance("f32", 1024), 0.0625)
        self.assertAlmostEqual(tolerance("f32", 4096), 0.125)
        self.assertAlmostEqual(tolerance("f16", 1024), 1.0)
        self.assertLess(tolerance("f32", 64), tolerance("f32", 65536))


class Launching(unittest.TestCase):
    def load(self, cu, manifest=MANIFEST, ptx=PTX):
        return Loaded(Manifest.from_dict(manifest), ptx, 0, Driver(cu))

    def test_load_checks_and_sets_attributes_then_launches_in_order(self):
        cu = FakeCu()
        loaded = self.load(cu)
        self.assertEqual(loaded.device_name, "Fake GPU 80GB")
        self.assertEqual(loaded.cc, (9, 0))
        sets = [c[1:] for c in cu.calls if c[0] == "cuFuncSetAttribute"]
        # > 48 KiB dynamic shared memory: opted in; the 0-byte reduce launch is left alone.
        self.assertEqual(sets, [("hgemm_main", "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 100_000)])

        encoded = []

        def fake_encode(driver, req):
            encoded.append(req)
            return bytes(range(128))

        pointers = {"A": 0x1000, "B": 0x2000, "C": 0x3000, "workspace": 0x4000}
        with mock.patch.object(kmod, "encode_tensor_map", fake_encode):
            loaded.launch_all(loaded_problem(), pointers, 1234)
        main, reduce = cu.launched
        self.assertEqual(main[0], "cuLaunchKernelEx")
        self.assertEqual(main[1:6], ("hgemm_main", (4, 2, 1), (384, 1, 1), 100_000, ("stream", 1234)))
        self.assertEqual(main[6], [bytes(range(128)), struct.pack("<Q", 0x4000), struct.pack("<i", 512)])
        self.assertEqual(main[7:], ("CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION", (2, 1, 1), 1))
        self.assertEqual(reduce[:6], ("cuLaunchKernel", "hgemm_reduce", (8, 1, 1), (128, 1, 1), 0, ("stream", 1234)))
        self.assertEqual(reduce[6], [struct.pack("<Q", 0x4000), struct.pack("<Q", 0x3000), struct.pack("<i", 3)])
        (req,) = encoded
        self.assertEqual((req.address, req.dims, req.row_stride_bytes, req.box, req.swizzle), (0x2000, (512, 128), 1024, (64, 128), "128B"))

    def test_static_and_dynamic_shared_memory_together_above_48_kib_opt_in(self):
        # The split-K mma kernels: exactly 48 KiB dynamic plus a little static (their
        # arrival counters) -- cuLaunchKernel refuses them without the opt-in.
        manifest = json.loads(json.dumps(MANIFEST))
        manifest["launches"][0]["shared_mem_bytes"] = 48 * 1024
        cu = FakeCu()
        cu.static_smem = 16
        self.load(cu, manifest)
        sets = [c[1:] for c in cu.calls if c[0] == "cuFuncSetAttribute" and c[2] == "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"]
        self.assertEqual(sets, [("hgemm_main", "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", 48 * 1024)])
        # Without static shared memory, 48 KiB fits the default and nothing is set.
        cu = FakeCu()
        cu.static_smem = 0
        self.load(cu, manifest)
        self.assertFalse([c for c in cu.calls if c[0] == "cuFuncSetAttribute" and c[2] == "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"])

    def test_large_clusters_are_allowed_non_portable(self):
        m = copy.deepcopy(MANIFEST)
        m["launches"][0].update(cluster=[16, 1, 1], grid=[16, 1, 1])
        cu = FakeCu()
        self.load(cu, m)
        self.assertIn(("cuFuncSetAttribute", "hgemm_main", "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", 1), cu.calls)

    def test_device_mismatches_are_refused_before_launching(self):
        cases = [
            (FakeCu(cc=(8, 0)), MANIFEST, "compute capability 8.0"),
            (FakeCu(param_sizes={"hgemm_main": [8, 8, 4], "hgemm_reduce": [8, 8, 4]}), MANIFEST, "[8, 8, 4] bytes, the manifest's are [128, 8, 4]"),
            (FakeCu(param_sizes={"hgemm_main": [128, 8], "hgemm_reduce": [8, 8, 4]}), MANIFEST, "the entry's parameters are [128, 8]"),
            (FakeCu(max_threads=256), MANIFEST, "at most 256"),
            (FakeCu(static_smem=200_000), MANIFEST, "exceed the device's 232448"),
        ]
        m80 = copy.deepcopy(MANIFEST)
        m80["problem"]["arch"] = "sm_80"
        cases.append((FakeCu(cc=(8, 6)), m80, "needs compute capability 9.0"))
        for cu, manifest, needle in cases:
            with self.subTest(needle=needle):
                with self.assertRaises(LaunchError) as cm:
                    self.load(cu, manifest)
                self.assertIn(needle, str(cm.exception))

    def test_a_jit_failure_carries_the_log(self):
        with self.assertRaises(CudaError) as cm:
            self.load(FakeCu(), ptx=PTX + "// BROKEN\n")
        self.assertEqual(cm.exception.name, "CUDA_ERROR_INVALID_PTX")
        self.assertIn("ptxas fatal: line 3 bad", str(cm.exception))


def loaded_problem():
    return Manifest.from_dict(MANIFEST).problem


class CommandLine(unittest.TestCase):
    @unittest.skipUnless((BUNDLE / "index.json").exists(), "no kernels/ bundle in this checkout")
    def test_check_reports_each_kernel_that_cannot_load_and_fails(self):
        import contextlib
        import io

        from kaas_client.__main__ import main

        def no_gpu(self, device=0, **kw):
            raise KaasError("no GPU here")

        out, err = io.StringIO(), io.StringIO()
        with mock.patch.object(Kernel, "load", no_gpu), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["check", str(BUNDLE), "--problem", "sm_90/f32/nn/1024x1024x1024"])
        self.assertEqual(rc, 1)
        self.assertIn("sm_90/f32/nn/1024x1024x1024: no GPU here", err.getvalue())
        self.assertIn("ERROR", out.getvalue())
        with contextlib.redirect_stderr(io.StringIO()):
            self.assertEqual(main(["check", str(BUNDLE), "--problem", "sm_90/f32/nn/77x77x77"]), 2)


class Imports(unittest.TestCase):
    def test_the_package_imports_without_torch_or_cuda_python(self):
        code = (
            "import sys; sys.modules['torch'] = None; sys.modules['cuda'] = None\n"
            "import kaas_client, kaas_client.__main__\n"
            "assert 'torch' not in [m for m in sys.modules if sys.modules[m] is not None]\n"
            "try:\n    kaas_client.kernel.import_driver()\nexcept kaas_client.KaasError as e:\n    print('ok', e)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], cwd=HERE.parent, capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("ok loading a kernel needs NVIDIA's CUDA Python bindings: pip install 'kaas-client[cuda]'", out.stdout)
        self.assertTrue(kaas_client.__version__)


if __name__ == "__main__":
    unittest.main()
