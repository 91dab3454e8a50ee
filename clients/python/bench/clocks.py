"""One GEMM, torch's call against the served kaas kernel, in regimes that hold the GPU at
different clocks: does the order of the two depend on how hard the GPU is worked around
them?

    python clients/python/bench/clocks.py [--bundle kernels] [--device-class H200]
        [--problems 4096x18944x3584,...] [--pairs 100] [--gap 1.0]

Run from the repo root on a GPU machine. Each problem is tn (F.linear(x[M,K], W[N,K])),
and must have a kernel in the bundle for this GPU. The regimes:

- `back_to_back`: calls launched one after another with nothing between them (what the
  service's benchmark does);
- `copy_gap`: each call followed by a device-to-device copy that runs --gap times the
  call's own length (memory-bound work between GEMMs, as norms and element-wise ops are in
  a layer);
- `idle_gap`: each call followed by a one-thread spin of the same length (the GPU all but
  idle between GEMMs).

Every call is timed alone with CUDA events on the GPU, eager, with the queue kept full:
the CPU is never what the GPU waits for. torch and kaas calls alternate in pairs, the order
flipped every pair; a regime's speedup is the median of the pairs' ratios (torch / kaas).
While a regime runs, NVML samples the SM clock and the board's power every 20 ms; the
medians are printed beside the times. Output: a table on stdout and $OUT/clocks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kaas_client.torch as kt  # noqa: E402

REGIMES = ("back_to_back", "copy_gap", "idle_gap")


class Sampler:
    """SM clock (MHz) and board power (W), sampled by NVML on a thread while `with` runs;
    empty lists where NVML is not there."""

    def __init__(self, index: int):
        self.sm, self.watts, self._stop = [], [], threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            # NVML numbers GPUs without CUDA_VISIBLE_DEVICES: find torch's by its UUID.
            uuid = "GPU-" + str(torch.cuda.get_device_properties(index).uuid)
            try:
                self._h = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            except Exception:  # noqa: BLE001 - older bindings take bytes
                self._h = pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())
            self._nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML: times alone
            self._nvml = None

    def _run(self) -> None:
        n = self._nvml
        while not self._stop.wait(0.02):
            self.sm.append(n.nvmlDeviceGetClockInfo(self._h, n.NVML_CLOCK_SM))
            self.watts.append(n.nvmlDeviceGetPowerUsage(self._h) / 1000)

    def __enter__(self) -> "Sampler":
        if self._nvml:
            self._t = threading.Thread(target=self._run, daemon=True)
            self._t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._nvml:
            self._t.join()

    def summary(self) -> dict:
        med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
        return {"sm_mhz": med(self.sm), "watts": med(self.watts), "samples": len(self.sm)}


def spin_cycles(us: float) -> int:
    """Cycles of torch.cuda._sleep that last about `us` µs at the clock it runs at now."""
    n = 1_000_000
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(n)
    s.record()
    torch.cuda._sleep(n)
    e.record()
    e.synchronize()
    return max(1, int(n * us / (s.elapsed_time(e) * 1000)))


def run_regime(regime: str, calls: dict, gap_us: float, pairs: int, index: int) -> dict:
    """Per-call µs of each contender in `calls` ({name: fn}) under `regime`, alternating."""
    names = list(calls)
    src = dst = None
    cycles = 0
    if regime == "copy_gap":
        # Size the copy from a measured rate, so that it lasts about gap_us.
        probe = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
        out = torch.empty_like(probe)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        out.copy_(probe)
        s.record()
        out.copy_(probe)
        e.record()
        e.synchronize()
        per_byte_us = s.elapsed_time(e) * 1000 / probe.numel()
        del probe, out
        n = max(1 << 20, int(gap_us / per_byte_us))
        src = torch.empty(n, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
    elif regime == "idle_gap":
        cycles = spin_cycles(gap_us)

    def gap() -> None:
        if regime == "copy_gap":
            dst.copy_(src)
        elif regime == "idle_gap":
            torch.cuda._sleep(cycles)

    for _ in range(3):  # warm: each contender, then the regime settles
        for f in calls.values():
            f()
            gap()
    torch.cuda.synchronize()
    events = []
    with Sampler(index) as sampler:
        for i in range(pairs):
            order = names if i % 2 == 0 else names[::-1]
            for name in order:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                calls[name]()
                e.record()
                events.append((i, name, s, e))
                gap()
            if i % 8 == 7:
                events[-1][3].synchronize()  # keep the queue bounded, never empty
        torch.cuda.synchronize()
    us = {name: [0.0] * pairs for name in names}
    for i, name, s, e in events:
        us[name][i] = s.elapsed_time(e) * 1000
    ratios = [a / b for a, b in zip(us[names[0]], us[names[1]])]
    return {"regime": regime, **{f"{name}_us": statistics.median(v) for name, v in us.items()},
            "speedup": statistics.median(ratios), "pairs": pairs, "gap_us": gap_us if regime != "back_to_back" else 0,
            **sampler.summary()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default="kernels")
    ap.add_argument("--device-class")
    ap.add_argument("--problems", default="4096x18944x3584,4096x3584x3584,4096x29568x8192,8192x28672x8192,"
                    "4096x4096x8192,8192x16384x8192",
                    help="tn MxNxK, comma-separated (default: the H200 bundles' served kernels at 4,096 and 8,192 "
                    "tokens)")
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--gap", type=float, default=1.0, help="the gap's length, in units of the torch call's")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore", kt.KaasFallbackWarning)
    n = kt.use(bundle=args.bundle, device_class=args.device_class)
    index = torch.cuda.current_device()
    print(f"{torch.cuda.get_device_name()} as {kt.status()['device_class']}: {n} kernels; torch {torch.__version__}", flush=True)
    have = set(kt.problems())
    rows = []
    for text in args.problems.split(","):
        m, n_, k = (int(v) for v in text.split("x"))
        if ("tn", m, n_, k) not in have:
            print(f"  tn {text}: no kernel in the bundle for this GPU; skipped")
            continue
        torch.manual_seed(0)
        x = (torch.rand(m, k, device="cuda") * 2 - 1).half()
        w = ((torch.rand(n_, k, device="cuda") * 2 - 1) / k ** 0.5).half()
        kt.set_strict(True)  # a kaas call that would fall back raises instead
        kt.linear(x, w)
        kt.set_strict(False)
        calls = {"torch": lambda: F.linear(x, w), "kaas": lambda: kt.linear(x, w)}
        base = run_regime("back_to_back", calls, 0, 8, index)
        gap_us = args.gap * base["torch_us"]
        for regime in REGIMES:
            r = run_regime(regime, calls, gap_us, args.pairs, index)
            r.update(m=m, n=n_, k=k, tflops=2 * m * n_ * k / r["torch_us"] / 1e6)
            rows.append(r)
            clock = f"{r['sm_mhz']:5.0f} MHz {r['watts']:4.0f} W" if r["sm_mhz"] else "no NVML"
            print(f"  tn {text:>18} {regime:13} torch {r['torch_us']:8.1f} us  kaas {r['kaas_us']:8.1f} us  "
                  f"x{r['speedup']:.3f}  ({clock})", flush=True)
        del x, w
        torch.cuda.empty_cache()
    (out / "clocks.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                                 "rows": rows}, indent=1))
    print(f"\n| problem | regime | torch µs | kaas µs | torch / kaas | SM MHz | W |\n|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['m']}×{r['n']}×{r['k']} | {r['regime']} | {r['torch_us']:.1f} | {r['kaas_us']:.1f} | "
              f"{r['speedup']:.3f} | {r['sm_mhz'] or '-'} | {round(r['watts']) if r['watts'] else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
