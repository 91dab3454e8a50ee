"""End to end: decoder layers of popular open models, plain torch against kaas-patched, under
CUDA graphs; per GEMM and per layer; plus the eager per-call launch overhead.

    python clients/python/bench/e2e.py [--bundle kernels | --lock kaas.lock] [--models llama-3.1-8b,...]
                                       [--decode 1,8,16,32,64] [--prefill 512,1024,2048,4096,8192]
                                       [--device-class H100-SXM] [--quick]

Run from the repo root on a GPU machine. Layers are built from published configs
(kaas_client.models: hidden size, intermediate size, heads, kv heads) with random fp16
weights -- nothing is downloaded. A layer is RMSNorm, q/k/v/o projections around causal
SDPA attention (grouped-query), RMSNorm, and a SwiGLU MLP (gate/up/down); `tokens` is the
number of rows M every linear layer sees (decode: a batch of that many one-token
sequences has the same GEMMs; attention here is over the tokens themselves).

Each timing captures `inner` calls in one CUDA graph, for plain torch and for kaas alike,
and replays the two graphs in alternation (CUDA events), per call: medians of each, and
the speedup as the median of the pairs' ratios, so that clock or temperature drift over a
long run does not fall on whichever side runs second. "patched" is the same layer after
`kaas_client.torch.patch`: linears whose exact problem has a kernel that beats the
baselines run it, the rest run torch. Output: a table on stdout and $OUT/e2e.json
(OUT defaults to ./out).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from typing import Optional
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import kaas_client.torch as kt  # noqa: E402
from kaas_client.errors import KaasError, NoKernelError  # noqa: E402
from kaas_client.kernel import import_driver  # noqa: E402
from kaas_client.models import MODELS, ModelConfig, model as model_config  # noqa: E402
from overhead import eager_costs, print_costs  # noqa: E402  # bench/, beside this script

DEFAULT_MODELS = "llama-3.1-8b,qwen2.5-7b,mistral-7b,llama-3.2-1b"


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class DecoderLayer(nn.Module):
    """A Llama/Qwen/Mistral-style decoder layer (no rotary embedding: it adds no GEMM)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        for name, k, n, bias in cfg.linears():
            setattr(self, name, nn.Linear(k, n, bias=bias))
        self.input_norm, self.post_norm = RMSNorm(cfg.hidden), RMSNorm(cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        c = self.cfg
        b, t, _ = x.shape
        h = self.input_norm(x)
        q = self.q_proj(h).view(b, t, c.heads, c.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, t, c.kv_heads, c.head_dim).transpose(1, 2)
        if c.kv_heads != c.heads:
            k = k.repeat_interleave(c.heads // c.kv_heads, dim=1)
            v = v.repeat_interleave(c.heads // c.kv_heads, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o_proj(a.transpose(1, 2).reshape(b, t, c.heads * c.head_dim))
        h = self.post_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


def capture(fn, inner: int) -> "torch.cuda.CUDAGraph":
    """`inner` calls of `fn` captured in one CUDA graph (after three warm-up calls)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(inner):
            fn()
    g.replay()
    torch.cuda.synchronize()
    return g


def paired_us(plain: "torch.cuda.CUDAGraph", patched: "torch.cuda.CUDAGraph", inner: int, reps: int) -> tuple:
    """(plain µs, patched µs, speedup) per call: the two graphs replayed in alternation,
    the order flipped every pair, so that a drift of the clock or the temperature over the
    run falls on both alike. The speedup is the median of the pairs' ratios."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def once(g) -> float:
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1000 / inner

    a, b = [], []
    for i in range(reps):
        if i % 2 == 0:
            a.append(once(plain))
            b.append(once(patched))
        else:
            b.append(once(patched))
            a.append(once(plain))
    return statistics.median(a), statistics.median(b), statistics.median(x / y for x, y in zip(a, b))


def inner_for(tokens: int, gemm: bool) -> int:
    return 20 if tokens <= 64 else (8 if gemm and tokens <= 1024 else 2)


def bench_gemms(cfg: ModelConfig, tokens: int, reps: int) -> list:
    rows = []
    have = set(kt.problems())
    for n, k in dict.fromkeys((n, k) for _, k, n, _ in cfg.linears()):
        x = (torch.rand(tokens, k, device="cuda") * 2 - 1).half()
        w = ((torch.rand(n, k, device="cuda") * 2 - 1) / k ** 0.5).half()
        inner = inner_for(tokens, True)
        plain, patched, speedup = paired_us(capture(lambda: F.linear(x, w), inner), capture(lambda: kt.linear(x, w), inner), inner, reps)
        key = ("tn", tokens, n, k)
        err = float((kt.linear(x, w).float() - F.linear(x, w).float()).abs().max())
        rows.append({"model": cfg.name, "tokens": tokens, "m": tokens, "n": n, "k": k, "kaas": key in have,
                     "torch_us": plain, "patched_us": patched, "speedup": speedup,
                     "max_abs_diff_vs_torch": err})
    return rows


def bench_layer(cfg: ModelConfig, layer: DecoderLayer, tokens: int, reps: int) -> dict:
    x = (torch.rand(1, tokens, cfg.hidden, device="cuda") * 2 - 1).half()
    inner = inner_for(tokens, False)
    with torch.no_grad():
        want = layer(x)
        plain_graph = capture(lambda: layer(x), inner)
        kt.patch(layer)
        try:
            got = layer(x)
            patched_graph = capture(lambda: layer(x), inner)
        finally:
            kt.unpatch(layer)
        # The graphs keep the kernels they captured: replayed in turn, patched and not.
        plain, patched, speedup = paired_us(plain_graph, patched_graph, inner, reps)
        del plain_graph, patched_graph
    have = set(kt.problems())
    kaas_linears = sum(1 for _, k, n, _ in cfg.linears() if ("tn", tokens, n, k) in have)
    return {"model": cfg.name, "tokens": tokens, "torch_us": plain, "patched_us": patched, "speedup": speedup,
            "kaas_linears": kaas_linears, "linears": len(cfg.linears()),
            "max_abs_diff_vs_torch": float((got.float() - want.float()).abs().max())}


def launch_overhead(n_calls: int) -> dict:
    """Eager per-call cost (µs) on the smallest served tn problem, row by row: F.linear,
    kt.linear, torch.matmul, kt.matmul (each also with a bias where it applies),
    Prepared.run alone, the output allocation alone, and a problem without a kernel --
    bench/overhead.py's rows, which that script measures on its own in seconds."""
    if not any(k[0] == "tn" for k in kt.problems()):
        return {}
    return eager_costs(None, n_calls)


def annotate(layers: list, gemms: list, bundle: str, device_class: str) -> None:
    """Adds each layer's two predictions: from its GEMMs' times in this run, and from
    the catalog's speedups."""
    from kaas_client.catalog import Catalog
    catalog = Catalog.from_tree(bundle)
    for r in layers:
        cfg = model_config(r["model"])
        r["predicted"] = predicted_speedup(cfg, r, gemms)
        r["predicted_catalog"] = catalog_predicted(cfg, r, gemms, catalog, device_class)


def print_tables(layers: list, gemms: list) -> None:
    print("\nPer layer (CUDA graphs, median us per forward; predicted: from its GEMMs' times alone in this run, "
          "L2-warm; catalog: from the catalog's speedups over cuBLAS):")
    print(f"{'model':15} {'phase':7} {'tokens':>6} {'torch_us':>10} {'patched_us':>10} {'speedup':>8} {'predicted':>9} {'catalog':>8} {'kaas':>5} {'max|diff|':>9}")
    for r in layers:
        pred = f"{r['predicted']:>9.3f}" if r.get("predicted") is not None else f"{'-':>9}"
        cat = f"{r['predicted_catalog']:>8.3f}" if r.get("predicted_catalog") is not None else f"{'-':>8}"
        print(f"{r['model']:15} {r['phase']:7} {r['tokens']:>6} {r['torch_us']:>10.1f} {r['patched_us']:>10.1f} "
              f"{r['speedup']:>8.3f} {pred} {cat} {r['kaas_linears']:>2}/{r['linears']:<2} {r['max_abs_diff_vs_torch']:>9.4f}")
    if gemms:
        print("\nPer GEMM (tn MxNxK = F.linear(x[M,K], W[N,K]); CUDA graphs, median us per call), kaas rows only:")
        print(f"{'model':15} {'M':>5} {'N':>6} {'K':>6} {'torch_us':>9} {'kaas_us':>9} {'speedup':>8}")
        for g in gemms:
            if g["kaas"]:
                print(f"{g['model']:15} {g['m']:>5} {g['n']:>6} {g['k']:>6} {g['torch_us']:>9.2f} {g['patched_us']:>9.2f} {g['speedup']:>8.3f}")
        others = [g["speedup"] for g in gemms if not g["kaas"]]
        if others:
            print(f"({len(others)} GEMMs without a kernel ran torch through the patched path: "
                  f"speedup min {min(others):.3f}, median {statistics.median(others):.3f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default="kernels")
    ap.add_argument("--lock", help="use a lock file (and $KAAS_CACHE) instead of the bundle")
    ap.add_argument("--device-class", help="treat the GPU as this class (e.g. H100-SXM on an H200)")
    ap.add_argument("--models", default=DEFAULT_MODELS, help=f"comma-separated, of {', '.join(MODELS)}")
    ap.add_argument("--decode", default="1,8,16,32,64")
    ap.add_argument("--prefill", default="512,1024,2048,4096,8192")
    ap.add_argument("--quick", action="store_true", help="fewer replays")
    ap.add_argument("--no-gemms", action="store_true", help="skip the per-GEMM table")
    ap.add_argument("--from-json", help="print the tables of a saved e2e.json again (no GPU), predictions recomputed from --bundle")
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        annotate(saved["layers"], saved["gemms"], args.bundle, saved["device_class"])
        print_tables(saved["layers"], saved["gemms"])
        return 0
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    try:
        import_driver()
    except KaasError as e:
        print(f"{e}\n(e.g. pip install --no-deps cuda_bindings-13.0.3-cp312-*.whl cuda_pathfinder-1.9.1-py3-none-any.whl)")
        return 2
    warnings.simplefilter("ignore", kt.KaasFallbackWarning)  # problems without a kernel are expected here
    t0 = time.perf_counter()
    n = kt.use(lock=args.lock, device_class=args.device_class) if args.lock else kt.use(bundle=args.bundle, device_class=args.device_class)
    name = torch.cuda.get_device_name()
    print(f"{name} as {kt.status()['device_class']}: {n} kernels from {args.lock or args.bundle} "
          f"({time.perf_counter() - t0:.1f} s); torch {torch.__version__}", flush=True)
    if n == 0:
        print("no kernels for this device class: pass --device-class H100-SXM to run the H100 catalog here")
        return 1
    tokens = [("decode", int(t)) for t in args.decode.split(",") if t] + [("prefill", int(t)) for t in args.prefill.split(",") if t]
    reps_small, reps_big = (7, 3) if args.quick else (25, 9)
    layers, gemms = [], []
    for model_name in args.models.split(","):
        cfg = model_config(model_name)
        torch.manual_seed(0)
        layer = DecoderLayer(cfg).half().cuda()
        with torch.no_grad():
            for p in layer.parameters():
                if p.dim() == 2:
                    p.uniform_(-1 / p.shape[1] ** 0.5, 1 / p.shape[1] ** 0.5)
        kt.prepare(where={(n_, k_) for _, k_, n_, _ in cfg.linears()})
        for phase, t in tokens:
            reps = reps_small if t <= 1024 else reps_big
            row = bench_layer(cfg, layer, t, reps)
            row["phase"] = phase
            layers.append(row)
            print(f"  {cfg.name:15} {phase:7} {t:5}  layer torch {row['torch_us']:9.1f} us  patched {row['patched_us']:9.1f} us  "
                  f"x{row['speedup']:.3f}  ({row['kaas_linears']}/{row['linears']} linears on kaas)", flush=True)
            if not args.no_gemms:
                for g in bench_gemms(cfg, t, reps):
                    g["phase"] = phase
                    gemms.append(g)
            torch.cuda.empty_cache()
        del layer
        torch.cuda.empty_cache()
    overhead = launch_overhead(2000)
    annotate(layers, gemms, args.bundle, kt.status()["device_class"])
    print_tables(layers, gemms)
    if overhead:
        print_costs(overhead)
    result = {"device": name, "device_class": kt.status()["device_class"], "source": args.lock or args.bundle,
              "kernels": n, "torch": torch.__version__, "layers": layers, "gemms": gemms, "launch_overhead": overhead}
    (out / "e2e.json").write_text(json.dumps(result, indent=1))
    print(f"\nwrote {out / 'e2e.json'}")
    return 0


def catalog_speedup(catalog, device_class: str, m: int, n: int, k: int) -> Optional[float]:
    """The catalog's graph-mode speedup for tn MxNxK over cuBLAS on the same layout (what
    `F.linear` runs), in the regime its run names (L2-cold wherever the run names one);
    None when nothing is served."""
    from kaas_client.manifest import Problem
    try:
        entry = catalog.lookup(Problem("sm_90", "f32", "tn", m, n, k), device_class)
    except NoKernelError:  # not served: no prediction from the catalog
        return None
    s = entry.speedups or {}
    v = s.get("cublas_tn", s.get("cublas_max"))
    return float(v) if isinstance(v, (int, float)) else None


def layer_prediction(cfg, layer: dict, gemms: list, saved_by) -> Optional[float]:
    """The layer's speedup if only its GEMMs changed: its torch time less, for every
    linear on kaas, `saved_by(gemm row)` µs (counted once per linear of that shape);
    None without GEMM timings."""
    timed = {(g["m"], g["n"], g["k"]): g for g in gemms if g["model"] == layer["model"] and g["tokens"] == layer["tokens"]}
    if not timed:
        return None
    saved = 0.0
    for _, k, n, _ in cfg.linears():
        g = timed.get((layer["tokens"], n, k))
        if g is not None and g["kaas"]:
            saved += saved_by(g)
    return layer["torch_us"] / (layer["torch_us"] - saved)


def catalog_predicted(cfg, layer: dict, gemms: list, catalog, device_class: str) -> Optional[float]:
    """Each linear on kaas saves what the catalog says: its torch time in this run times
    1 - 1/(the catalog's speedup over cuBLAS)."""
    def saved(g: dict) -> float:
        sp = catalog_speedup(catalog, device_class, g["m"], g["n"], g["k"])
        return g["torch_us"] * (1 - 1 / sp) if sp else 0.0
    return layer_prediction(cfg, layer, gemms, saved)


def predicted_speedup(cfg, layer: dict, gemms: list) -> Optional[float]:
    """Each linear on kaas saves what its GEMM saved measured alone in the same run
    (torch - kaas)."""
    return layer_prediction(cfg, layer, gemms, lambda g: g["torch_us"] - g["patched_us"])


if __name__ == "__main__":
    sys.exit(main())
