"""The prepared hot path (launcher.Prepared) against a fake libcuda reached through C
function pointers: parameters packed once (the same bytes as the manifest's own packing),
pointers rewritten and tensor maps re-encoded only when they change, 64-bit handles intact
across the C ABI, clustered launches through cuLaunchKernelEx, failures named. No GPU
needed."""

import ctypes
import struct
import unittest

from kaas_client import launcher
from kaas_client.errors import CudaError, LaunchError
from kaas_client.manifest import Manifest, pack_params

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


ERROR_NAME = b"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"  # lives as long as the module: the fake hands out its address

vp, u32, i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int
PROTOTYPES = {  # cuda.h's signatures, for the callbacks that stand in for the driver
    "cuLaunchKernel": ctypes.CFUNCTYPE(i32, vp, u32, u32, u32, u32, u32, u32, u32, vp, vp, vp),
    "cuLaunchKernelEx": ctypes.CFUNCTYPE(i32, vp, vp, vp, vp),
    "cuTensorMapEncodeTiled": ctypes.CFUNCTYPE(i32, vp, i32, u32, vp, vp, vp, vp, vp, i32, i32, i32, i32),
    "cuCtxSetCurrent": ctypes.CFUNCTYPE(i32, vp),
    "cuCtxGetCurrent": ctypes.CFUNCTYPE(i32, vp),
    "cuGetErrorName": ctypes.CFUNCTYPE(i32, i32, vp),
}


class FakeLib:
    """The libcuda entry points Prepared calls; records launches with their parameter bytes.

    Handed out as a CDLL hands them out (`lib[name]`: an untyped ctypes function pointer),
    each pointing at a C callback with the driver's own signature, so every argument
    crosses the C ABI as it does with libcuda: the methods below see what C sees."""

    def __init__(self, sizes, fail=0, current=0xC7):
        self.sizes, self.fail, self.current = sizes, fail, current
        self.launches, self.encodes, self.contexts = [], [], []
        self._callbacks = {name: proto(getattr(self, name)) for name, proto in PROTOTYPES.items()}

    def __getitem__(self, name):
        return ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.cast(self._callbacks[name], vp).value)

    def _params(self, params):
        array = (vp * len(self.sizes)).from_address(params)
        return [ctypes.string_at(array[i], s) for i, s in enumerate(self.sizes)]

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.launches.append(("plain", fn, (gx, gy, gz), (bx, by, bz), smem, stream or 0, self._params(params)))
        return self.fail

    def cuLaunchKernelEx(self, cfg_address, fn, params, extra):
        cfg = launcher.LaunchConfig.from_address(cfg_address)
        attr = cfg.attrs[0]
        self.launches.append(("ex", fn, (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ), (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ),
                              cfg.sharedMemBytes, cfg.hStream or 0, self._params(params), attr.id, tuple(attr.value.clusterDim), cfg.numAttrs))
        return self.fail

    def cuTensorMapEncodeTiled(self, out, dtype, rank, pointer, dims, stride, box, elem, interleave, swizzle, l2, oob):
        u64s, u32s = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        dims, stride, box = ctypes.cast(dims, u64s), ctypes.cast(stride, u64s), ctypes.cast(box, u32s)
        self.encodes.append((pointer, tuple(dims[:2]), stride[0], tuple(box[:2]), swizzle, l2, dtype))
        ctypes.memmove(out, struct.pack("<QQ", 0x7E7E, pointer) + bytes(112), 128)
        return 0

    def cuCtxSetCurrent(self, ctx):
        self.contexts.append(ctx)
        self.current = ctx
        return 0

    def cuCtxGetCurrent(self, out):
        vp.from_address(out).value = self.current
        return 0

    def cuGetErrorName(self, rc, out):
        vp.from_address(out).value = ctypes.cast(ctypes.c_char_p(ERROR_NAME), vp).value
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

    def test_the_params_buffer_holds_the_manifests_packed_params(self):
        fake_map = lambda req: struct.pack("<QQ", 0x7E7E, req.address) + bytes(112)  # noqa: E731  # as FakeLib encodes
        for manifest, sizes, workspace in ((TMA, [128, 128, 8, 4, 4, 4, 4], 0), (PLAIN, [8, 8, 8, 8, 4], 0x9000)):
            p, lib = prepared(manifest, sizes, workspace=workspace)
            pointers = {"A": 0x7F00_0000_1000, "B": 0x7F00_0000_2000, "C": 0x7F00_0000_3000, "workspace": 0x9000}
            p.run(pointers["A"], pointers["B"], pointers["C"], 0)
            m = Manifest.from_dict(manifest)
            want = [a.data for a in pack_params(m.launches[0].params, m.problem, pointers, fake_map)]
            self.assertEqual(lib.launches[0][6], want)
            launch = p.launches[0]
            self.assertEqual([ctypes.string_at(launch.params[i], len(w)) for i, w in enumerate(want)], want)
            self.assertTrue(all(launch.params[i] % (128 if len(w) == 128 else len(w)) == 0 for i, w in enumerate(want)))

    def test_a_changed_pointer_rewrites_its_own_slot_and_nothing_else(self):
        p, lib = prepared(TMA, [128, 128, 8, 4, 4, 4, 4])
        launch = p.launches[0]
        args, array = launch.args, ctypes.addressof(launch.params)
        size = len(launch._storage) - (launch.base - ctypes.addressof(launch._storage))
        p.run(0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000, 1)
        before = ctypes.string_at(launch.base, size)
        p.run(0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_4000, 1)  # C alone
        after = ctypes.string_at(launch.base, size)
        changed = [i for i in range(size) if before[i] != after[i]]
        c_at = launch.params[2] - launch.base
        self.assertTrue(changed and all(c_at <= i < c_at + 8 for i in changed))
        self.assertEqual(after[c_at:c_at + 8], struct.pack("<Q", 0x7F00_0000_4000))
        p.run(0x7F00_0000_5000, 0x7F00_0000_2000, 0x7F00_0000_4000, 1)  # A alone: its tensor map
        again = ctypes.string_at(launch.base, size)
        a_at = launch.params[0] - launch.base
        self.assertTrue(all(a_at <= i < a_at + 128 for i in range(size) if after[i] != again[i]))
        self.assertEqual(struct.unpack("<QQ", again[a_at:a_at + 16]), (0x7E7E, 0x7F00_0000_5000))
        self.assertEqual(p.encodes, 3)  # A and B once, then A
        self.assertIs(launch.args, args)  # the call's arguments and the void** array are built once
        self.assertEqual(ctypes.addressof(launch.params), array)

    def test_64_bit_handles_pointers_and_streams_cross_the_c_abi_intact(self):
        lib = FakeLib([8, 8, 8, 8, 4], current=0x7F11_2233_4450)
        p = launcher.Prepared(Manifest.from_dict(PLAIN), [0x7F55_6677_8800], 0x7F11_2233_4450, 0x7F99_0000_0000, lib)
        p.run(0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000, 0x7F00_DEAD_BE00)
        kind, fn, grid, block, smem, stream, params = lib.launches[0]
        self.assertEqual((fn, stream), (0x7F55_6677_8800, 0x7F00_DEAD_BE00))
        self.assertEqual([struct.unpack("<Q", x)[0] for x in params[:4]],
                         [0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000, 0x7F99_0000_0000])
        self.assertEqual(lib.contexts, [])  # 0x7F11_2233_4450 is current: compared in full
        lib.current = 0x7F11_2233_4460
        p.run(0x7F00_0000_1000, 0x7F00_0000_2000, 0x7F00_0000_3000, 0x7F00_DEAD_BE00)
        self.assertEqual(lib.contexts, [0x7F11_2233_4450, 0x7F11_2233_4460])

    def test_the_stream_follows_every_call(self):
        for manifest, sizes in ((PLAIN, [8, 8, 8, 8, 4]), (TMA, [128, 128, 8, 4, 4, 4, 4])):
            p, lib = prepared(manifest, sizes, workspace=0x9000)
            for stream in (0x7F00_0000_0A00, 0x7F00_0000_0A00, 0, 0x7F00_0000_0B00, 0x7F00_0000_0A00):
                p.run(0x1000, 0x2000, 0x3000, stream)
            self.assertEqual([l[5] for l in lib.launches], [0x7F00_0000_0A00, 0x7F00_0000_0A00, 0, 0x7F00_0000_0B00, 0x7F00_0000_0A00])

    def test_handles_come_from_ints_and_cuda_python_objects(self):
        class H:
            def __int__(self):
                return 0x1234
        self.assertEqual(launcher.handle(0x77), 0x77)
        self.assertEqual(launcher.handle(H()), 0x1234)


if __name__ == "__main__":
    unittest.main()
