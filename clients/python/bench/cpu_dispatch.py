"""What kaas_client.torch spends on the CPU per call, measured without a GPU: CPU tensors
stand in for CUDA ones (as tests/test_torch_cpu.py does) and the kernel is a real
`launcher.Prepared` whose driver calls go through ctypes into a stub libcuda (built here
with `cc`; every entry point returns at once). So the rows are the Python dispatch, the
ctypes calls and torch's allocation, with no driver work behind them; on a GPU machine
add the driver's own launch time (bench/overhead.py measures the real thing).

    python3 clients/python/bench/cpu_dispatch.py [PACKAGE_ROOT] [--calls 20000]

PACKAGE_ROOT: the folder holding the kaas_client package to time (default: this
checkout's clients/python), e.g. an extracted `git archive` of another commit, to compare.
Needs torch (the CPU wheel will do) and a C compiler.
"""

from __future__ import annotations

import argparse
import ctypes
import subprocess
import sys
import tempfile
import timeit
import types
import warnings
from pathlib import Path

STUB = r"""
#include <stdint.h>
#include <string.h>
static void *current = (void *)0xC7;
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned smem, void *stream, void **params, void **extra) { return 0; }
int cuLaunchKernelEx(void *config, void *f, void **params, void **extra) { return 0; }
int cuCtxGetCurrent(void **out) { *out = current; return 0; }
int cuCtxSetCurrent(void *c) { current = c; return 0; }
int cuTensorMapEncodeTiled(void *out, int dt, uint32_t rank, void *p, uint64_t *dims, uint64_t *strides, uint32_t *box,
                           uint32_t *elem, int il, int sw, int l2, int oob) { memset(out, 0, 128); return 0; }
int cuGetErrorName(int rc, const char **name) { *name = "CUDA_ERROR_STUB"; return 0; }
"""

PLAIN = {"abi": "kaas.hgemm.v1", "problem": {"arch": "sm_90", "acc": "f32", "layout": "tn", "m": 64, "n": 64, "k": 64},
         "launches": [{"entry": "k", "grid": [2, 2, 1], "block": [128, 1, 1], "shared_mem_bytes": 10240,
                       "params": [{"ptr": "A"}, {"ptr": "B"}, {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}]}]}
TMA = {"abi": "kaas.hgemm.v1", "problem": {"arch": "sm_90", "acc": "f32", "layout": "tn", "m": 128, "n": 256, "k": 512},
       "launches": [{"entry": "k", "grid": [2, 2, 1], "block": [384, 1, 1], "cluster": [2, 1, 1], "shared_mem_bytes": 100000,
                     "params": [{"tensor_map": {"operand": "A", "box": [64, 64], "swizzle": "128B"}},
                                {"tensor_map": {"operand": "B", "box": [64, 128], "swizzle": "128B"}},
                                {"ptr": "C"}, {"i32": "M"}, {"i32": "N"}, {"i32": "K"}]}]}


def use_stub(folder: Path, launcher) -> None:
    """Builds the stub and makes it what `launcher.libcuda()` loads (through the loader
    itself, so that a package which types its entry points there gets them typed)."""
    src, lib = folder / "stub.c", folder / "libcuda_stub.so"
    src.write_text(STUB)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    real = ctypes.CDLL
    ctypes.CDLL = lambda name, *a, **k: real(str(lib), *a, **k)  # type: ignore[misc]
    try:
        launcher._LIB = None
        launcher.libcuda()
    finally:
        ctypes.CDLL = real  # type: ignore[misc]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    sys.path.insert(0, args.root)

    import torch
    import torch.nn.functional as F

    import kaas_client.torch as kt
    from kaas_client import dispatch, launcher
    from kaas_client.manifest import Manifest

    rows: dict = {}

    def t(label, fn):
        rows[label] = min(timeit.repeat(fn, number=args.calls, repeat=args.repeat)) / args.calls * 1e6
        print(f"  {label:46} {rows[label]:7.2f} µs", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        use_stub(Path(tmp), launcher)
        print(f"kaas_client from {Path(kt.__file__).parent}; torch {torch.__version__}; µs per call, best of {args.repeat}")
        f16 = torch.float16
        p64 = 0x7F00_0000_0000
        for name, manifest in (("plain launch", PLAIN), ("cluster + tensor maps", TMA)):
            p = launcher.Prepared(Manifest.from_dict(manifest), [0x7F12_3456_7000], 0xC7, 0)
            flip = [p64 + 0x1000, p64 + 0x9000]
            n = iter(range(1 << 62))
            t(f"Prepared.run, {name}", lambda: p.run(p64 + 0x1000, p64 + 0x2000, p64 + 0x3000, 0x7F00_DEAD_BE00))
            t(f"Prepared.run, {name}, A moves", lambda: p.run(flip[next(n) & 1], p64 + 0x2000, p64 + 0x3000, 0x7F00_DEAD_BE00))

        key = ("tn", 64, 64, 64)
        kt.reset()
        dispatch.ACCELERATOR = "cpu"  # CPU tensors take the kernel path
        kt._stream = lambda index: 0
        kt._S.classes[None] = kt._S.device_class = "STUB"  # CPU tensors have device index None
        slot = kt._Slot(None)
        slot.prepared = launcher.Prepared(Manifest.from_dict(PLAIN), [0x7F12_3456_7000], 0xC7, 0)
        kt._S.kernels[key] = None
        kt._S.slots[(None, key)] = slot
        x, w, bias = torch.randn(64, 64, dtype=f16), torch.randn(64, 64, dtype=f16), torch.randn(64, dtype=f16)
        x3, wt, xs = x.view(2, 32, 64), w.t(), [x, x.clone()]
        n = iter(range(1 << 62))
        kt.set_strict(True)  # the kaas rows must take the kernel path
        t("kt.linear(x, w)", lambda: kt.linear(x, w))
        t("kt.linear(x (2, 32, 64), w)", lambda: kt.linear(x3, w))
        t("kt.linear(x, w), x alternating", lambda: kt.linear(xs[next(n) & 1], w))
        t("kt.matmul(x, w.t())", lambda: kt.matmul(x, wt))
        t("kt.linear(x, w, bias)", lambda: kt.linear(x, w, bias))
        t("torch.empty((64, 64), dtype=, device=)", lambda: torch.empty((64, 64), dtype=f16, device=x.device))
        kt.set_strict(False)
        # Fallbacks, with the torch call they end in stubbed out: what kt adds to it.
        sx, sw = torch.randn(3, 64, dtype=f16), torch.randn(64, 64, dtype=f16)  # tn 3x64x64: no kernel
        kt.F = types.SimpleNamespace(linear=lambda x, w, b=None: x)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                t("kt.linear: no kernel, torch (stubbed) runs", lambda: kt.linear(sx, sw))
                fx, fw = sx.float(), sw.float()
                t("kt.linear: fp32, torch (stubbed) runs", lambda: kt.linear(fx, fw))
                dispatch.ACCELERATOR = "cuda"
                t("kt.linear: not CUDA, torch (stubbed) runs", lambda: kt.linear(sx, sw))
        finally:
            kt.F = F
        kt.reset()
    return 0


if __name__ == "__main__":
    sys.exit(main())
