"""Manifest parsing and validation, problem paths, tensor-map geometry and param packing."""

import copy
import ctypes
import json
import struct
import unittest

from kaas_client.errors import LaunchError, ManifestError
from kaas_client.manifest import (
    I32,
    Manifest,
    Problem,
    Ptr,
    TensorMap,
    kernel_params,
    pack_params,
    parse_shape,
    tensor_map_geometry,
    tensor_map_request,
)

# The manifest example of docs/manifest.md and src/manifest.rs, plus a constant.
EXAMPLE = json.loads("""{ "abi": "kaas.hgemm.v1",
  "problem": {"arch": "sm_90a", "acc": "f32", "layout": "tn", "m": 4096, "n": 4096, "k": 4096},
  "workspace_bytes": 0,
  "launches": [
    { "entry": "hgemm_128x256x64",
      "grid": [128, 1, 1], "block": [384, 1, 1], "cluster": [2, 1, 1],
      "shared_mem_bytes": 197632,
      "params": [ {"tensor_map": {"operand": "A", "box": [64, 128], "swizzle": "128B"}},
                  {"tensor_map": {"operand": "B", "box": [64, 256], "swizzle": "128B"}},
                  {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}, {"i32": 7} ] } ] }""")


def with_(f):
    d = copy.deepcopy(EXAMPLE)
    f(d)
    return Manifest.from_dict(d)


class ManifestParsing(unittest.TestCase):
    def test_the_design_example_parses_and_round_trips(self):
        m = Manifest.from_dict(EXAMPLE)
        l = m.launches[0]
        self.assertEqual(m.problem, Problem("sm_90a", "f32", "tn", 4096, 4096, 4096))
        self.assertEqual(l.params[0], TensorMap("A", (64, 128), "128B"))
        self.assertEqual(l.params[2], Ptr("C"))
        self.assertEqual(l.params[3], I32("M"))
        self.assertEqual(l.params[6], I32(7))
        self.assertEqual(l.cluster, (2, 1, 1))
        self.assertEqual(l.param_sizes, [128, 128, 8, 4, 4, 4, 4])
        self.assertEqual(Manifest.from_dict(json.loads(json.dumps(m.to_dict()))), m)
        self.assertEqual(m.entries(), ["hgemm_128x256x64"])

    def test_defaults_follow_the_service(self):
        d = copy.deepcopy(EXAMPLE)
        del d["workspace_bytes"], d["launches"][0]["cluster"], d["launches"][0]["shared_mem_bytes"]
        m = Manifest.from_dict(d)
        self.assertEqual((m.workspace_bytes, m.launches[0].cluster, m.launches[0].shared_mem_bytes), (0, (1, 1, 1), 0))

    def test_faults_are_named(self):
        cases = [
            (lambda d: d.update(abi="v0"), "abi is `v0`"),
            (lambda d: d.update(launches=[]), "1 to 8 launches, this one has 0"),
            (lambda d: d.update(launches=d["launches"] * 9), "this one has 9"),
            (lambda d: d["problem"].update(m=0), "problem: M = `0`"),
            (lambda d: d["problem"].update(n=65537), "problem: N"),
            (lambda d: d["problem"].update(arch="sm_70"), "unknown arch `sm_70`"),
            (lambda d: d["problem"].update(acc="F32"), "unknown accumulator"),
            (lambda d: d["problem"].update(layout="nt"), "unknown layout"),
            (lambda d: d.update(workspace_bytes=(1 << 30) + 1), "workspace_bytes"),
            (lambda d: d["launches"][0].update(grid=[0, 1, 1]), "launch 0: grid"),
            (lambda d: d["launches"][0].update(grid=[2, 65536, 1]), "launch 0: grid"),
            (lambda d: d["launches"][0].update(block=[1025, 1, 1]), "launch 0: block"),
            (lambda d: d["launches"][0].update(block=[1, 1, 65]), "z at most 64"),
            (lambda d: d["launches"][0].update(cluster=[3, 1, 1]), "whole number of clusters"),
            (lambda d: d["launches"][0].update(cluster=[32, 1, 1], grid=[128, 1, 1]), "1 to 16 blocks"),
            (lambda d: d["launches"][0].update(shared_mem_bytes=300_000), "shared_mem_bytes = 300000"),
            (lambda d: d["launches"][0].update(entry="9bad"), "not a PTX identifier"),
            (lambda d: d["launches"][0]["params"].append({"ptr": "workspace"}), "workspace_bytes is 0"),
            (lambda d: d["launches"][0]["params"].__setitem__(0, {"tensor_map": {"operand": "A", "box": [128, 128], "swizzle": "128B"}}), "fit the 128B swizzle"),
            (lambda d: d["launches"][0]["params"].__setitem__(0, {"tensor_map": {"operand": "A", "box": [4, 128], "swizzle": "none"}}), "multiple of 16"),
            (lambda d: d["launches"][0]["params"].__setitem__(0, {"tensor_map": {"operand": "A", "box": [64, 257], "swizzle": "128B"}}), "1..=256"),
            (lambda d: d["launches"][0].update(params=[{"ptr": "A"}] * 33), "at most 32"),
        ]
        for f, needle in cases:
            with self.subTest(needle=needle):
                with self.assertRaises(ManifestError) as cm:
                    with_(f)
                self.assertIn(needle, str(cm.exception))

    def test_workspace_params_are_fine_with_a_workspace(self):
        def f(d):
            d["workspace_bytes"] = 4096
            d["launches"][0]["params"].append({"ptr": "workspace"})
        self.assertEqual(with_(f).launches[0].params[-1], Ptr("workspace"))

    def test_unknown_fields_and_kinds_are_refused(self):
        cases = [
            (lambda d: d.update(workspace=0), "unknown field `workspace`"),
            (lambda d: d["launches"][0].update(stream=1), "unknown field `stream`"),
            (lambda d: d["launches"][0]["params"].__setitem__(2, {"ptr": "D"}), "ptr `D`"),
            (lambda d: d["launches"][0]["params"].__setitem__(6, {"f32": 7}), "unknown param kind `f32`"),
            (lambda d: d["launches"][0]["params"].__setitem__(6, {"i32": True}), "i32 `True`"),
            (lambda d: d["launches"][0]["params"].__setitem__(6, {"i32": 2**31}), "32-bit"),
            (lambda d: d["launches"][0]["params"].__setitem__(6, {"i32": "Q"}), "i32 `'Q'`"),
            (lambda d: d["launches"][0]["params"].__setitem__(6, {"i32": 1, "ptr": "A"}), "exactly one"),
            (lambda d: d["launches"][0]["params"][0]["tensor_map"].update(swizzle="256B"), "swizzle `256B`"),
            (lambda d: d["launches"][0]["params"][0]["tensor_map"].update(operand="D"), "operand `D`"),
            (lambda d: d["launches"][0]["params"][0]["tensor_map"].update(extra=1), "unknown field `extra`"),
            (lambda d: d["launches"][0]["params"][0]["tensor_map"].update(box=[64]), "list of 2"),
            (lambda d: d["launches"][0].update(grid=[1, 1]), "list of 3"),
            (lambda d: d["launches"][0].update(grid=[1.5, 1, 1]), "unsigned 32-bit"),
            (lambda d: d["launches"][0].pop("entry"), "missing field `entry`"),
            (lambda d: d.pop("problem"), "missing field `problem`"),
        ]
        for f, needle in cases:
            with self.subTest(needle=needle):
                with self.assertRaises(ManifestError) as cm:
                    with_(f)
                self.assertIn(needle, str(cm.exception))
        self.assertRaises(ManifestError, Manifest.from_dict, [])


class Problems(unittest.TestCase):
    def test_path_formatting_and_parsing(self):
        p = Problem("sm_90", "f32", "tn", 4096, 128, 64)
        self.assertEqual(p.path, "sm_90/f32/tn/4096x128x64")
        self.assertEqual(str(p), p.path)
        self.assertEqual(Problem.parse("sm_90/f32/tn/4096x128x64"), p)
        self.assertEqual(Problem.parse("/sm_90/f32/tn/4096x128x64/"), p)
        self.assertEqual(parse_shape("65536x1x1"), (65536, 1, 1))

    def test_malformed_shapes_are_refused(self):
        for bad in ["0x1x1", "1x1", "99999999x1x1", "axbxc", "1x1x1x1", "", "1x-1x1", "1x+1x1", "1x 1x1", "65537x1x1", "x1x1", "1x١x1"]:
            with self.subTest(bad=bad):
                self.assertRaises(ManifestError, parse_shape, bad)
        with self.assertRaises(ManifestError) as cm:
            parse_shape("64x0x64")
        self.assertIn("N = `0`", str(cm.exception))
        self.assertRaises(ManifestError, Problem.parse, "sm_90/f32/4096x4096x4096")
        self.assertRaises(ManifestError, Problem, "sm_90", "f32", "tn", True, 1, 1)

    def test_operand_shapes_follow_the_layout(self):
        nn = Problem("sm_90", "f32", "nn", 128, 256, 64)
        tn = Problem("sm_90", "f32", "tn", 128, 256, 64)
        self.assertEqual([nn.operand_shape(o) for o in "ABC"], [(128, 64), (64, 256), (128, 256)])
        self.assertEqual([tn.operand_shape(o) for o in "ABC"], [(128, 64), (256, 64), (128, 256)])

    def test_arch_specific_targets_run_only_on_their_capability(self):
        p = lambda arch: Problem(arch, "f32", "nn", 1, 1, 1)  # noqa: E731
        self.assertTrue(p("sm_80").runs_on((9, 0)))
        self.assertTrue(p("sm_90").runs_on((9, 0)))
        self.assertTrue(p("sm_90").runs_on((10, 0)))
        self.assertTrue(p("sm_90a").runs_on((9, 0)))
        self.assertFalse(p("sm_90a").runs_on((10, 0)))
        self.assertFalse(p("sm_90").runs_on((8, 9)))
        self.assertFalse(p("sm_89").runs_on((8, 6)))


class TensorMaps(unittest.TestCase):
    def test_geometry_follows_the_layout_as_in_the_rust_launcher(self):
        nn = Problem("sm_90", "f32", "nn", 128, 256, 64)
        tn = Problem("sm_90", "f32", "tn", 128, 256, 64)
        self.assertEqual(tensor_map_geometry(nn, "A"), ((64, 128), 128))  # [K, M], K*2
        self.assertEqual(tensor_map_geometry(nn, "B"), ((256, 64), 512))  # [N, K], N*2
        self.assertEqual(tensor_map_geometry(tn, "B"), ((64, 256), 128))  # [K, N], K*2
        self.assertEqual(tensor_map_geometry(tn, "C"), ((256, 128), 512))  # [N, M], N*2
        self.assertEqual(tensor_map_geometry(nn, "C"), ((256, 128), 512))
        self.assertEqual(tensor_map_geometry(tn, "A"), ((64, 128), 128))

    def test_request_carries_every_encode_argument(self):
        p = Problem("sm_90", "f32", "tn", 4096, 2048, 1024)
        r = tensor_map_request(p, TensorMap("B", (64, 256), "128B"), 0x7F0000000000)
        self.assertEqual(r.address, 0x7F0000000000)
        self.assertEqual((r.dims, r.row_stride_bytes, r.box), ((1024, 2048), 2048, (64, 256)))
        self.assertEqual((r.rank, r.data_type, r.element_strides), (2, "FLOAT16", (1, 1)))
        self.assertEqual((r.interleave, r.swizzle, r.l2_promotion, r.oob_fill), ("NONE", "128B", "L2_128B", "NONE"))
        wide = tensor_map_request(p, TensorMap("B", (64, 256), "128B", "256B"), 0x7F0000000000)
        self.assertEqual(wide.l2_promotion, "L2_256B")

    def test_l2_promotion_is_optional_and_written_only_when_not_the_default(self):
        m = with_(lambda d: d["launches"][0]["params"][0]["tensor_map"].update(l2_promotion="256B"))
        self.assertEqual([p.l2_promotion for p in m.launches[0].params[:2]], ["256B", "128B"])
        d = m.to_dict()
        self.assertEqual(d["launches"][0]["params"][0]["tensor_map"]["l2_promotion"], "256B")
        self.assertNotIn("l2_promotion", d["launches"][0]["params"][1]["tensor_map"])
        self.assertEqual(Manifest.from_dict(json.loads(json.dumps(d))), m)
        with self.assertRaisesRegex(ManifestError, "l2_promotion `512B`"):
            with_(lambda d: d["launches"][0]["params"][0]["tensor_map"].update(l2_promotion="512B"))

    def test_rows_that_are_not_16_byte_multiples_or_unaligned_addresses_are_refused(self):
        p = Problem("sm_90", "f32", "nn", 64, 64, 4)  # A rows are 8 bytes apart
        with self.assertRaises(LaunchError) as cm:
            tensor_map_request(p, TensorMap("A", (8, 64), "none"), 0x1000)
        self.assertIn("8 bytes apart", str(cm.exception))
        tensor_map_request(p, TensorMap("B", (8, 4), "none"), 0x1000)  # B nn rows: 128 bytes
        self.assertRaises(LaunchError, tensor_map_request, p, TensorMap("B", (8, 4), "none"), 0x1008)


class ParamPacking(unittest.TestCase):
    problem = Problem("sm_90", "f32", "nn", 256, 512, 128)
    pointers = {"A": 0x7000_0000_0000, "B": 0x7000_0001_0000, "C": 0x7000_0002_0000, "workspace": 0x7000_0003_0000}

    def fake_encode(self, req):
        self.requests.append(req)
        return bytes([len(self.requests)]) * 128

    def setUp(self):
        self.requests = []

    def test_params_are_packed_in_order_with_their_sizes(self):
        params = (TensorMap("A", (64, 128), "128B"), Ptr("B"), Ptr("C"), Ptr("workspace"),
                  I32("M"), I32("N"), I32("K"), I32(-7), TensorMap("C", (64, 64), "none"))
        args = pack_params(params, self.problem, self.pointers, self.fake_encode)
        self.assertEqual([a.size for a in args], [128, 8, 8, 8, 4, 4, 4, 4, 128])
        self.assertEqual(args[0].data, b"\x01" * 128)
        self.assertEqual(args[8].data, b"\x02" * 128)
        self.assertEqual([struct.unpack("<Q", a.data)[0] for a in args[1:4]], [self.pointers[x] for x in ("B", "C", "workspace")])
        self.assertEqual([struct.unpack("<i", a.data)[0] for a in args[4:8]], [256, 512, 128, -7])
        self.assertEqual([(r.address, r.dims, r.row_stride_bytes) for r in self.requests],
                         [(self.pointers["A"], (128, 256), 256), (self.pointers["C"], (512, 256), 1024)])
        self.assertEqual(args[0].address % 128, 0)

        # The void** array the driver reads points at exactly these bytes, in order.
        ptrs = kernel_params(args)
        for i, a in enumerate(args):
            self.assertEqual(ctypes.string_at(ptrs[i], a.size), a.data)

    def test_missing_buffers_and_bad_encoders_are_refused(self):
        self.assertRaises(LaunchError, pack_params, (Ptr("workspace"),), self.problem, {"A": 1}, self.fake_encode)
        self.assertRaises(LaunchError, pack_params, (Ptr("A"),), self.problem, {"A": 0}, self.fake_encode)
        self.assertRaises(LaunchError, pack_params, (TensorMap("A", (64, 128), "128B"),), self.problem, self.pointers, lambda r: b"x" * 64)


if __name__ == "__main__":
    unittest.main()
