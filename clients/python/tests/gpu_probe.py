"""GPU-only probes of the launch paths the shipped kernels do not use (not collected by
unittest discovery; needs a CUDA device, torch and cuda-python):

  python tests/gpu_probe.py tma       encode tensor maps over real tensors (every operand,
                                      layout and swizzle), then launch a probe kernel that
                                      takes a tensor map by value, a pointer, an i32 and the
                                      workspace, with and without a 2-CTA cluster and with
                                      > 48 KiB dynamic shared memory; it writes back what it
                                      received, which must equal what was encoded.
  python tests/gpu_probe.py streams   launch a shipped kernel (read back through save/from_dir)
                                      on a torch.cuda.Stream and on a raw CUstream handle.
  python tests/gpu_probe.py wrapper   encode the same map with cuda-python's own
                                      cuTensorMapEncodeTiled and compare the bytes (a separate
                                      process: its CUtensorMap storage is not 64-byte aligned).
"""

import struct
import sys

import torch

from kaas_client import Kernel, Manifest
from kaas_client.kernel import Driver, encode_tensor_map
from kaas_client.manifest import Problem, TensorMap, tensor_map_request

OUT_WORDS = 21  # 16 map words, the i32, the workspace address, workspace[0], 2 cluster sizes


def probe_ptx() -> str:
    copy_map = "\n".join(
        f"\tld.param.u64 %rd5, [kaas_probe_param_0+{8 * i}];\n\tst.global.u64 [%rd1+{8 * i}], %rd5;" for i in range(16)
    )
    return f""".version 8.0
.target sm_90
.address_size 64

.visible .entry kaas_probe(
\t.param .align 64 .b8 kaas_probe_param_0[128],
\t.param .u64 kaas_probe_param_1,
\t.param .u32 kaas_probe_param_2,
\t.param .u64 kaas_probe_param_3
)
{{
\t.reg .pred %p<2>;
\t.reg .b32 %r<4>;
\t.reg .b64 %rd<12>;

\tld.param.u64 %rd1, [kaas_probe_param_1];
\tcvta.to.global.u64 %rd1, %rd1;
\tmov.u32 %r1, %ctaid.x;
\tmov.u32 %r2, %cluster_nctarank;
\tmul.wide.u32 %rd2, %r1, 8;
\tadd.s64 %rd3, %rd1, %rd2;
\tcvt.u64.u32 %rd4, %r2;
\tst.global.u64 [%rd3+152], %rd4;
\tsetp.ne.u32 %p1, %r1, 0;
\t@%p1 bra DONE;
{copy_map}
\tld.param.u32 %r3, [kaas_probe_param_2];
\tcvt.u64.u32 %rd6, %r3;
\tst.global.u64 [%rd1+128], %rd6;
\tld.param.u64 %rd7, [kaas_probe_param_3];
\tst.global.u64 [%rd1+136], %rd7;
\tcvta.to.global.u64 %rd8, %rd7;
\tld.global.u64 %rd9, [%rd8];
\tst.global.u64 [%rd1+144], %rd9;
DONE:
\tret;
}}
"""


def probe_manifest(cluster: int, smem: int) -> Manifest:
    return Manifest.from_dict({
        "abi": "kaas.hgemm.v1",
        "problem": {"arch": "sm_90", "acc": "f32", "layout": "tn", "m": 128, "n": 128, "k": 64},
        "workspace_bytes": 256,
        "launches": [{
            "entry": "kaas_probe", "grid": [2, 1, 1], "block": [32, 1, 1], "cluster": [cluster, 1, 1],
            "shared_mem_bytes": smem,
            "params": [{"tensor_map": {"operand": "A", "box": [64, 128], "swizzle": "128B"}},
                       {"ptr": "C"}, {"i32": 7}, {"ptr": "workspace"}],
        }],
    })


def tma() -> int:
    failures = 0
    driver = Driver()
    dev = torch.device("cuda", 0)
    # 1. Encode maps over real tensors: every operand, both layouts, every swizzle.
    for layout in ("nn", "tn"):
        p = Problem("sm_90", "f32", layout, 1024, 2048, 512)
        tensors = {o: torch.zeros(p.operand_shape(o), dtype=torch.float16, device=dev) for o in "ABC"}
        for operand in "ABC":
            for swizzle, inner in (("none", 64), ("32B", 16), ("64B", 32), ("128B", 64)):
                req = tensor_map_request(p, TensorMap(operand, (inner, 128), swizzle), tensors[operand].data_ptr())
                try:
                    blob = encode_tensor_map(driver, req)
                    ok = len(blob) == 128 and any(blob)
                    print(f"encode {layout} {operand} dims={list(req.dims)} stride={req.row_stride_bytes} box={list(req.box)} swizzle={swizzle}: "
                          f"CUDA_SUCCESS, {len(blob)} bytes{'' if ok else ' (all zero!)'}")
                except Exception as e:  # report and go on
                    ok = False
                    print(f"encode {layout} {operand} swizzle={swizzle}: FAILED {e}")
                failures += not ok

    # 2. The probe kernel receives the map by value (plain launch and 2-CTA cluster).
    ptx = probe_ptx()
    for cluster, smem in ((1, 0), (2, 100_000)):
        k = Kernel(probe_manifest(cluster, smem), ptx).load(0)
        p = k.problem
        a = torch.randn(p.operand_shape("A"), device=dev).half()
        b = torch.randn(p.operand_shape("B"), device=dev).half()
        c = torch.zeros(p.operand_shape("C"), device=dev, dtype=torch.float16)
        k.launch(a, b, c)
        torch.cuda.synchronize()
        words = [int(x) for x in c.view(torch.int64).flatten()[:OUT_WORDS].tolist()]
        got_map = b"".join(struct.pack("<q", w) for w in words[:16])
        want_map = encode_tensor_map(k._loaded.driver, tensor_map_request(p, TensorMap("A", (64, 128), "128B"), a.data_ptr()))
        checks = {
            "map bytes received == encoded": got_map == want_map,
            "i32 == 7": words[16] == 7,
            "workspace ptr": words[17] == k._workspace.data_ptr(),
            "workspace zeroed": words[18] == 0,
            f"cluster size per CTA == {cluster}": words[19:21] == [cluster, cluster],
        }
        path = "cuLaunchKernelEx" if cluster > 1 else "cuLaunchKernel"
        print(f"probe kernel via {path}, cluster [{cluster},1,1], dynamic smem {smem}: "
              + ", ".join(f"{name}: {'ok' if v else 'MISMATCH'}" for name, v in checks.items()))
        failures += not all(checks.values())
    print(f"tma probe: {'PASS' if failures == 0 else f'FAIL ({failures})'}")
    return 1 if failures else 0


def streams(bundle: str = "../../kernels") -> int:
    import tempfile

    k = Kernel.from_bundle(bundle, m=1024, n=1024, k=1024, layout="tn")
    with tempfile.TemporaryDirectory() as d:
        k = Kernel.from_dir(k.save(d)).load(0)
    p, dev = k.problem, torch.device("cuda", 0)
    a = torch.rand(p.operand_shape("A"), device=dev).half() * 2 - 1
    b = torch.rand(p.operand_shape("B"), device=dev).half() * 2 - 1
    ref = torch.matmul(a.float(), b.float().t())
    failures = 0
    side = torch.cuda.Stream(device=dev)
    for label, stream in (("torch.cuda.Stream", side), ("raw CUstream handle", side.cuda_stream), ("current stream", None)):
        c = torch.full(p.operand_shape("C"), float("nan"), device=dev, dtype=torch.float16)
        if stream is not None:
            side.wait_stream(torch.cuda.current_stream(dev))  # a, b and c were written on the current stream
        k.launch(a, b, c, stream=stream)
        torch.cuda.synchronize(dev)
        err = float((c.float() - ref).abs().max())
        ok = err <= 0.0625
        failures += not ok
        print(f"{p} via from_dir, launched on {label}: max abs error {err:.6g} -> {'ok' if ok else 'FAIL'}")
    return 1 if failures else 0


def wrapper() -> int:
    """cuda-python's own cuTensorMapEncodeTiled, compared with ours."""
    driver = Driver()
    cu = driver.cu
    p = Problem("sm_90", "f32", "tn", 1024, 2048, 512)
    a = torch.zeros(p.operand_shape("A"), dtype=torch.float16, device="cuda")
    req = tensor_map_request(p, TensorMap("A", (64, 128), "128B"), a.data_ptr())
    ours = encode_tensor_map(driver, req)
    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, req.address,
        [cu.cuuint64_t(x) for x in req.dims], [cu.cuuint64_t(req.row_stride_bytes)],
        [cu.cuuint32_t(x) for x in req.box], [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B, cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    if err != cu.CUresult.CUDA_SUCCESS:
        print(f"cuda-python cuTensorMapEncodeTiled: {err!r} (its CUtensorMap storage is at {tmap.getPtr() % 64 if tmap else '?'} mod 64)")
        return 1
    theirs = b"".join(struct.pack("<Q", int(w)) for w in tmap.opaque)
    print(f"cuda-python cuTensorMapEncodeTiled: CUDA_SUCCESS (storage at {tmap.getPtr() % 64} mod 64); "
          f"bytes {'identical to' if theirs == ours else 'DIFFERENT from'} the client's encoding")
    return 0 if theirs == ours else 1


if __name__ == "__main__":
    sys.exit({"tma": tma, "streams": streams, "wrapper": wrapper}[sys.argv[1]]())
