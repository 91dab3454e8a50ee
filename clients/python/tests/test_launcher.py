"""The prepared hot path (launcher.Prepared) against a fake libcuda: parameters packed once,
pointers rewritten and tensor maps re-encoded only when they change, clustered launches
through cuLaunchKernelEx, failures named. No GPU needed."""

import ctypes
import struct
import unittest

from kaas_client import launcher
from kaas_client.errors import CudaError, LaunchError
from kaas_client.manifest import Manifest

TMA = {
    "abi": "kaas.hgemm.v1",
    "problem": {"arch": "sm_90", "acc": "f32", "layout": "tn", "m": 128, "n": 256, "k": 512},
    "launches": [{
        "entry": "k_main", "grid": [2, 2, 1], "block": [384, 1, 1], "cluster": [2, 1, 1], "shared_mem_bytes": 100_000,
        "params": [{"tensor_map": {"operand": "A", "box": [64, 64], "swizzle": "128B"}},
                   {"tensor_map": {"operand": "B", "box": [64, 128], "swizzle": "128B", "l2_promotion": "256B"}},
                   {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}, {"i32": 7}],
    }],
}
PLAIN = {
    "abi": "kaas.hgemm.v1",
    "problem": {"arch": "sm_90", "acc": "f32", "layout": "nn", "m": 64, "n": 64, "k": 64},
    "workspace_bytes": 4096,
    "launches": [{"entry": "k_simple", "grid": [1, 1, 1], "block": [128, 1, 1],
                  "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}, {"ptr": "workspace"}, {"i32": "K"}]}],
}


class FakeLib:
    """The libcuda entry points Prepared calls; records launches with their parameter bytes."""

    def __init__(self, sizes, fail=0, current=0xC7):
        self.sizes, self.fail, self.current = sizes, fail, current
        self.launches, self.encodes, self.contexts = [], [], []

    def _params(self, params):
        return [ctypes.string_at(params[i], s) for i, s in enumerate(self.sizes)]

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.launches.append(("plain", fn, (gx, gy, gz), (bx, by, bz), smem, stream, self._params(params)))
        return self.fail

    def cuLaunchKernelEx(self, cfg_ref, fn, params, extra):
        cfg = cfg_ref._obj
        attr = cfg.attrs[0]
        self.launches.append(("ex", fn, (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
                              cfg.sharedMemBytes, cfg.hStream, self._params(params), attr.id, tuple(attr.value.clusterDim), cfg.numAttrs))
        return self.fail

    def cuTensorMapEncodeTiled(self, out, dtype, rank, pointer, dims, stride, box, elem, interleave, swizzle, l2, oob):
        self.encodes.append((pointer, tuple(dims[:2]), stride[0], tuple(box[:2]), swizzle, l2, dtype))
        ctypes.memmove(out, struct.pack("<QQ", 0x7E7E, pointer) + bytes(112), 128)
        return 0

    def cuCtxSetCurrent(self, ctx):
        self.contexts.append(ctx)
        self.current = ctx
        return 0

    def cuCtxGetCurrent(self, ref):
        ref._obj.value = self.current
        return 0

    def cuGetErrorName(self, rc, ref):
        ref._obj.value = b"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"
        return 0


def prepared(manifest, sizes, workspace=0, fail=0):
    lib = FakeLib(sizes, fail)
    return launcher.Prepared(Manifest.from_dict(manifest), [0xF00], 0xC7, workspace, lib), lib


class Hot(unittest.TestCase):
    def test_struct_layouts_match_cuda_h(self):
        self.assertEqual(ctypes.sizeof(launcher.LaunchAttribute), 72)
        self.assertEqual(ctypes.sizeof(launcher.LaunchConfig), 56)
        self.assertEqual(launcher.LaunchConfig.hStream.offset, 32)
        self.assertEqual(launcher.LaunchConfig.numAttrs.offset, 48)

    def test_a_clustered_tma_kernel_launches_through_cuLaunchKernelEx(self):
        p, lib = prepared(TMA, [128, 128, 8, 4, 4, 4, 4])
        p.run(0x1000, 0x2000, 0x3000, stream=0xABC)
        (kind, fn, grid, block, smem, stream, params, attr_id, cluster, nattrs), = lib.launches
        self.assertEqual((kind, fn, grid, block, smem, stream), ("ex", 0xF00, (2, 2, 1), (384, 1, 1), 100_000, 0xABC))
        self.assertEqual((attr_id, cluster, nattrs), (launcher.CLUSTER_DIMENSION, (2, 1, 1), 1))
        self.assertEqual(struct.unpack("<QQ", params[0][:16]), (0x7E7E, 0x1000))
        self.assertEqual(struct.unpack("<QQ", params[1][:16]), (0x7E7E, 0x2000))
        self.assertEqual(params[2], struct.pack("<Q", 0x3000))
        self.assertEqual([struct.unpack("<i", x)[0] for x in params[3:]], [128, 256, 512, 7])
        # the geometry the service's launcher uses: A [K, M], B tn [K, N], 128B swizzle, L2 promotion
        self.assertEqual(lib.encodes[0], (0x1000, (512, 128), 1024, (64, 64), 3, 2, 6))
        self.assertEqual(lib.encodes[1], (0x2000, (512, 256), 1024, (64, 128), 3, 3, 6))
        self.assertEqual(lib.contexts, [])  # the kernel's context is current already: left alone

    def test_another_current_context_is_switched_for_the_launch_and_restored(self):
        p, lib = prepared(PLAIN, [8, 8, 8, 8, 4], workspace=0x9000)
        lib.current = 0xD1  # torch's current device is another GPU
        p.run(0x1000, 0x2000, 0x3000, 0)
        self.assertEqual((lib.contexts, lib.current, len(lib.launches)), ([0xC7, 0xD1], 0xD1, 1))
        lib.current = None  # a fresh thread: none current; ours is made current and kept
        p.run(0x1000, 0x2000, 0x3000, 0)
        self.assertEqual((lib.contexts[2:], lib.current), ([0xC7], 0xC7))

    def test_tensor_maps_are_re_encoded_only_when_their_pointer_changes(self):
        p, lib = prepared(TMA, [128, 128, 8, 4, 4, 4, 4])
        p.run(0x1000, 0x2000, 0x3000, 1)
        p.run(0x1000, 0x2000, 0x3000, 1)
        p.run(0x1000, 0x2000, 0x4000, 1)  # only C moved: a pointer param, no encode
        self.assertEqual(p.encodes, 2)
        p.run(0x5000, 0x2000, 0x4000, 1)  # A moved: its map alone
        self.assertEqual(p.encodes, 3)
        self.assertEqual(lib.encodes[-1][0], 0x5000)
        self.assertEqual(lib.launches[2][6][2], struct.pack("<Q", 0x4000))
        self.assertEqual(struct.unpack("<QQ", lib.launches[3][6][0][:16]), (0x7E7E, 0x5000))
        self.assertEqual(len(lib.launches), 4)

    def test_plain_launch_with_a_workspace_written_once(self):
        p, lib = prepared(PLAIN, [8, 8, 8, 8, 4], workspace=0x9000)
        p.run(0x1000, 0x2000, 0x3000, 0)
        p.run(0x1100, 0x2000, 0x3000, 0)
        kinds = [l[0] for l in lib.launches]
        self.assertEqual(kinds, ["plain", "plain"])
        params = lib.launches[1][6]
        self.assertEqual([struct.unpack("<Q", x)[0] for x in params[:4]], [0x1100, 0x2000, 0x3000, 0x9000])
        self.assertEqual(struct.unpack("<i", params[4])[0], 64)
        self.assertEqual(lib.encodes, [])

    def test_a_kernel_that_needs_a_workspace_refuses_to_prepare_without_one(self):
        with self.assertRaisesRegex(LaunchError, "4096-byte workspace"):
            prepared(PLAIN, [8, 8, 8, 8, 4])

    def test_a_misaligned_tensor_map_operand_is_refused_and_not_trusted_after(self):
        p, lib = prepared(TMA, [128, 128, 8, 4, 4, 4, 4])
        with self.assertRaisesRegex(LaunchError, "A's data is not 16-byte aligned"):
            p.run(0x1008, 0x2000, 0x3000, 1)
        self.assertEqual(lib.launches, [])
        p.run(0x1000, 0x2000, 0x3000, 1)  # a good call afterwards encodes everything again
        self.assertEqual(lib.encodes[-1][0], 0x2000)
        self.assertEqual(struct.unpack("<QQ", lib.launches[0][6][0][:16]), (0x7E7E, 0x1000))

    def test_a_failed_launch_names_the_call_and_the_error(self):
        p, _ = prepared(PLAIN, [8, 8, 8, 8, 4], workspace=0x9000, fail=701)
        with self.assertRaises(CudaError) as cm:
            p.run(0x1000, 0x2000, 0x3000, 0)
        self.assertIn("cuLaunchKernel `k_simple`", str(cm.exception))
        self.assertIn("CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", str(cm.exception))

    def test_handles_come_from_ints_and_cuda_python_objects(self):
        class H:
            def __int__(self):
                return 0x1234
        self.assertEqual(launcher.handle(0x77), 0x77)
        self.assertEqual(launcher.handle(H()), 0x1234)


if __name__ == "__main__":
    unittest.main()
