"""Eager per-call cost of kaas_client.torch against torch's own calls, and nothing else
(no layer benchmarks): a run takes seconds.

    PYTHONPATH=clients/python python3 clients/python/bench/overhead.py OUT.json
        [--bundle kernels | --lock kaas.lock] [--device-class H100-SXM]
        [--problem tn/64x64x64] [--calls 2000] [--rounds 7]

Needs a CUDA GPU, torch and cuda-python (cuda.bindings); kaas_client comes from this
repository. The kernel is found as bench/e2e.py finds it: `kt.use` on the bundle (default:
the repository's kernels/) for this GPU's device class (or --device-class), then the
smallest served `tn` problem -- tn 64x64x64 in the shipped catalog -- unless --problem
names one. On a GPU whose class has no catalog (H200), pass --device-class H100-SXM.

The operands are fixed (M×K activations, an N×K weight), so every call is the same
kind, prepared and recorded: the loop measures what the CPU spends issuing one call, since
the GPU runs a GEMM this small in less time than that and the loop never waits on it. Each row is a
loop of --calls calls ended by a synchronize; the rows take turns for --rounds rounds
and the best round is reported (the median too). Before timing, the kaas calls run once
in strict mode, so a row that says kt.* launched the kernel, never a fallback.

Output: a table on stdout and OUT.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kaas_client.torch as kt  # noqa: E402
from kaas_client.errors import KaasError  # noqa: E402
from kaas_client.kernel import import_driver  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
TARGET_US = 2.0  # what kt.linear may cost over F.linear on the same call (issue 37's target)


def time_calls(calls: dict, n_calls: int, rounds: int) -> dict:
    """µs per call of each zero-argument callable: {name: {"best": .., "median": ..}}."""
    for fn in calls.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    seen: dict = {name: [] for name in calls}
    for _ in range(rounds):
        for name, fn in calls.items():
            t0 = time.perf_counter()
            for _ in range(n_calls):
                fn()
            torch.cuda.synchronize()
            seen[name].append((time.perf_counter() - t0) / n_calls * 1e6)
    return {name: {"best": min(v), "median": statistics.median(v)} for name, v in seen.items()}


def pick_problem(problem: str | None) -> tuple:
    """The (layout, M, N, K) to time: the one named, else the smallest served `tn` problem."""
    served = [p for p in kt.problems() if p[0] == "tn"]
    if problem:
        layout, shape = problem.split("/")
        m, n, k = (int(v) for v in shape.split("x"))
        key = (layout, m, n, k)
        if layout != "tn" or key not in served:
            raise SystemExit(f"{problem}: no served tn kernel for it here (served tn problems: {len(served)})")
        return key
    if not served:
        raise SystemExit("no served tn problem: nothing to time")
    return min(served, key=lambda p: p[1] * p[2] * p[3])


def _calls(key: tuple, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor, w_none: torch.Tensor) -> dict:
    """The timed rows: torch's call and kaas's, side by side, and their parts."""
    _, m, n, k = key
    dev, wt = x.device, w.t()
    slot = kt._slot(dev.index, key)  # prepared by the strict calls before
    c = torch.empty(m, n, dtype=torch.float16, device=dev)
    stream = torch.cuda.current_stream(dev).cuda_stream
    run, xp, wp, cp = slot.prepared.run, x.data_ptr(), w.data_ptr(), c.data_ptr()
    return {
        "F.linear": lambda: F.linear(x, w),
        "kt.linear": lambda: kt.linear(x, w),
        "torch.matmul": lambda: torch.matmul(x, wt),
        "kt.matmul": lambda: kt.matmul(x, wt),
        "F.linear (bias)": lambda: F.linear(x, w, bias),
        "kt.linear (bias)": lambda: kt.linear(x, w, bias),
        "Prepared.run (no checks, no alloc)": lambda: run(xp, wp, cp, stream),
        "torch.empty (the output alone)": lambda: torch.empty(m, n, dtype=torch.float16, device=dev),
        f"F.linear tn {m}x1000x{k}": lambda: F.linear(x, w_none),
        f"kt.linear tn {m}x1000x{k} (no kernel: torch)": lambda: kt.linear(x, w_none),
    }


def eager_costs(problem: str | None = None, n_calls: int = 2000, rounds: int = 5, device: torch.device | None = None) -> dict:
    """The eager rows for the problem (see the module's doc) on `device` (default: the
    current CUDA device); `kt.use` must have run."""
    key = pick_problem(problem)
    _, m, n, k = key
    dev = device if device is not None else torch.device("cuda", torch.cuda.current_device())
    x = (torch.rand(m, k, device=dev) * 2 - 1).half()
    w = ((torch.rand(n, k, device=dev) * 2 - 1) / k ** 0.5).half()
    bias = (torch.rand(n, device=dev) * 2 - 1).half()
    wt = w.t()
    w_none = (torch.rand(1000, k, device=dev) * 2 - 1).half()  # (1000, K): a shape no kernel has
    if ("tn", m, 1000, k) in kt.problems():
        raise SystemExit(f"tn {m}x1000x{k} has a kernel here: the no-kernel rows need another N")

    strict = kt.status()["strict"]
    try:
        kt.set_strict(True)  # the kaas rows must launch the kernel: any fallback raises here
        diff = float((kt.linear(x, w).float() - F.linear(x, w).float()).abs().max())
        kt.linear(x, w, bias)
        kt.matmul(x, wt)
        kt.set_strict(False)  # the no-kernel row falls back by design
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", kt.KaasFallbackWarning)
            times = time_calls(_calls(key, x, w, bias, w_none), n_calls, rounds)
    finally:
        kt.set_strict(strict)
    us = {name: t["best"] for name, t in times.items()}
    over = {
        "kt.linear - F.linear": us["kt.linear"] - us["F.linear"],
        "kt.matmul - torch.matmul": us["kt.matmul"] - us["torch.matmul"],
        "kt.linear (bias) - F.linear (bias)": us["kt.linear (bias)"] - us["F.linear (bias)"],
        "no kernel: kt.linear - F.linear": us[f"kt.linear tn {m}x1000x{k} (no kernel: torch)"] - us[f"F.linear tn {m}x1000x{k}"],
    }
    return {"problem": f"tn {m}x{n}x{k}", "calls_per_loop": n_calls, "rounds": rounds, "us_per_call": us,
            "median_us_per_call": {name: t["median"] for name, t in times.items()}, "overhead_us": over,
            "target_us": TARGET_US, "target_met": over["kt.linear - F.linear"] <= TARGET_US,
            "max_abs_diff_vs_torch": diff}


def print_costs(out: dict) -> None:
    print(f"\nEager per-call cost on {out['problem']} (µs; best of {out['rounds']} rounds of {out['calls_per_loop']} calls, median beside):")
    for name, v in out["us_per_call"].items():
        print(f"  {name:44} {v:7.2f}  {out['median_us_per_call'][name]:7.2f}")
    print("Over torch's own call:")
    for name, v in out["overhead_us"].items():
        print(f"  {name:44} {v:+7.2f}")
    print(f"kt.linear within {out['target_us']:.0f} µs of F.linear: {'yes' if out['target_met'] else 'NO'}")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", help="where to write the JSON")
    ap.add_argument("--bundle", default=str(REPO / "kernels"))
    ap.add_argument("--lock", help="use a lock file (and $KAAS_CACHE) instead of the bundle")
    ap.add_argument("--device-class", help="treat the GPU as this class (e.g. H100-SXM on an H200)")
    ap.add_argument("--problem", help="tn/MxNxK to time (default: the smallest served tn problem)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("overhead.py needs a CUDA GPU (torch.cuda.is_available() is False)")
        return 2
    try:
        import_driver()
    except KaasError as e:
        print(e)
        return 2
    t0 = time.perf_counter()
    if args.lock:
        n = kt.use(lock=args.lock, device_class=args.device_class)
    else:
        n = kt.use(bundle=args.bundle, device_class=args.device_class)
    name = torch.cuda.get_device_name()
    print(f"{name} as {kt.status()['device_class']}: {n} kernels from {args.lock or args.bundle} "
          f"({time.perf_counter() - t0:.1f} s); torch {torch.__version__}, Python {platform.python_version()}", flush=True)
    if n == 0:
        print("no kernels for this device class: pass --device-class H100-SXM to run the H100 catalog here")
        return 1
    out = eager_costs(args.problem, args.calls, args.rounds)
    print_costs(out)
    try:
        from importlib.metadata import version
        bindings = version("cuda-bindings")
    except Exception:  # only reported
        bindings = "unknown"
    result = {"device": name, "device_class": kt.status()["device_class"], "source": args.lock or args.bundle,
              "torch": torch.__version__, "cuda_bindings": bindings, "python": platform.python_version(),
              "cpu": cpu_name(), **out}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
