"""GPU checks of kaas_client.torch (not collected by unittest discovery: it needs a CUDA
device, torch and cuda-python). Run from the repo root:

    python clients/python/tests/gpu_torch.py [--bundle kernels] [--device-class H100-SXM] [--sample 24]

Each check prints one row (PASS/FAIL/SKIP and what it measured); the rows also go to
$OUT/gpu_torch.json (OUT defaults to ./out). Exit status 1 if any check fails.

  kernels     for a sample of served problems (every layout, cluster, workspace and
              tensor-map kind in the catalog, plus the Llama shapes), kt.matmul / kt.linear
              in strict mode (so the kernel, never torch, runs) against torch.matmul in fp32:
              max abs error within kaas's tolerance, and no worse than 2x torch's own fp16
              error + 1 ulp; calls with fresh tensors each time (tensor maps re-encoded)
  repoint     the same problem on alternating buffers: each result right
  graph       torch.cuda.graph capture of kt.linear, replayed on new inputs
  compile     torch.compile(fullgraph=True) of a function of kt.linear + kt.matmul: no graph
              break, kaas::mm in the graph, results right (inductor)
  patch       a patched model (two served shapes, one not) equals the unpatched one within
              tolerance; unpatch restores it
  autograd    linear with a weight that requires grad: forward by the op, gradients torch's
  fallbacks   misaligned, non-fp16 and CPU inputs run torch (warned) and raise in strict mode
  lock        resolve a lock for the sample, load it offline, a tampered cache is refused
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import kaas_client.torch as kt  # noqa: E402
from kaas_client.errors import KaasError  # noqa: E402
from kaas_client.kernel import import_driver  # noqa: E402
from kaas_client.errors import FallbackError, IntegrityError  # noqa: E402
from kaas_client.kernel import tolerance  # noqa: E402
from kaas_client.locking import Lock, resolve  # noqa: E402

ROWS: list = []


def check(name):
    def wrap(fn):
        def run(*a, **kw):
            t0 = time.perf_counter()
            try:
                detail = fn(*a, **kw) or ""
                status = "SKIP" if str(detail).startswith("SKIP") else "PASS"
            except Exception as e:  # every check reports; none stops the others
                status, detail = "FAIL", f"{type(e).__name__}: {e}"
                traceback.print_exc()
            finally:
                kt.set_strict(False)
            ROWS.append({"check": name, "status": status, "detail": str(detail), "seconds": round(time.perf_counter() - t0, 2)})
            print(f"{status:4}  {name:10}  {detail}", flush=True)
        return run
    return wrap


def operands(layout, m, n, k, gen):
    a = (torch.rand((m, k), generator=gen, device="cuda") * 2 - 1).half()
    b = (torch.rand((k, n) if layout == "nn" else (n, k), generator=gen, device="cuda") * 2 - 1).half()
    return a, b


def reference(a, b, layout):
    """A·B in fp32 without TF32: the reference every kaas kernel is verified against."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a.float() @ (b.float() if layout == "nn" else b.float().t())
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def kaas_call(a, b, layout):
    return kt.matmul(a, b) if layout == "nn" else kt.linear(a, b)


def errors(a, b, layout, out):
    ref = reference(a, b, layout)
    err = float((out.float() - ref).abs().max())
    torch_out = torch.matmul(a, b) if layout == "nn" else F.linear(a, b)
    torch_err = float((torch_out.float() - ref).abs().max())
    return err, torch_err


def sample_problems(n_sample, seed=0):
    """Served problems covering each kind of manifest, plus the Llama 3.1 8B / 3.2 1B shapes."""
    keys = kt.problems()
    kinds: dict = {}
    for key in keys:
        kernel = kt._S.kernels[key]
        m = kernel.manifest
        kind = (key[0], m.workspace_bytes > 0, max(l.cluster_blocks for l in m.launches),
                tuple(sorted({type(p).__name__ + getattr(p, "operand", getattr(p, "buffer", "")) for l in m.launches for p in l.params})))
        kinds.setdefault(kind, []).append(key)
    rnd = random.Random(seed)
    chosen = {rnd.choice(v) for v in kinds.values()}
    wanted = {("tn", 64, 4096, 4096), ("tn", 64, 1024, 4096), ("tn", 64, 2048, 2048), ("tn", 512, 2048, 8192)}
    chosen |= wanted & set(keys)
    rest = [k for k in keys if k not in chosen]
    chosen |= set(rnd.sample(rest, max(0, min(len(rest), n_sample - len(chosen)))))
    return sorted(chosen, key=lambda k: (k[1] * k[2] * k[3], k))


@check("kernels")
def check_kernels(problems):
    gen = torch.Generator(device="cuda").manual_seed(0)
    kt.set_strict(True)
    worst, worst_vs_torch, failures = 0.0, 0.0, []
    for layout, m, n, k in problems:
        for _ in range(2):  # fresh tensors each time: new pointers, tensor maps re-encoded
            a, b = operands(layout, m, n, k, gen)
            out = kaas_call(a, b, layout)
            torch.cuda.synchronize()
            err, torch_err = errors(a, b, layout, out)
            bound = tolerance("f32", k)  # the bound the service verified the kernel to
            worst = max(worst, err / bound)
            worst_vs_torch = max(worst_vs_torch, err / max(torch_err, 1e-9))
            if not (math.isfinite(err) and err <= bound):
                failures.append(f"{layout} {m}x{n}x{k}: err {err:.4g} > {bound:.4g} (torch fp16 {torch_err:.4g})")
    if failures:
        raise AssertionError(f"{len(failures)} of {len(problems)}: " + "; ".join(failures[:5]))
    return (f"{len(problems)} problems x2, worst err/tolerance {worst:.3f}, worst err/torch-fp16-err "
            f"{worst_vs_torch:.2f}, prepared {kt.status()['prepared']}")


@check("repoint")
def check_repoint(key):
    layout, m, n, k = key
    gen = torch.Generator(device="cuda").manual_seed(1)
    pairs = [operands(layout, m, n, k, gen) for _ in range(3)]
    kt.set_strict(True)
    outs = [kaas_call(a, b, layout) for a, b in pairs * 2]  # alternate buffers, back and forth
    torch.cuda.synchronize()
    for (a, b), out in zip(pairs * 2, outs):
        err, torch_err = errors(a, b, layout, out)
        assert err <= tolerance("f32", k), f"err {err} (torch {torch_err})"
    return f"{layout} {m}x{n}x{k}, 6 calls on 3 buffer sets"


@check("graph")
def check_graph(key):
    layout, m, n, k = key
    assert layout == "tn"
    gen = torch.Generator(device="cuda").manual_seed(2)
    x, w = operands(layout, m, n, k, gen)
    kt.set_strict(True)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            kt.linear(x, w)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = kt.linear(x, w)
    results = []
    for _ in range(3):
        x.copy_((torch.rand(x.shape, generator=gen, device="cuda") * 2 - 1).half())
        g.replay()
        torch.cuda.synchronize()
        results.append(errors(x, w, layout, y)[0])
    assert max(results) <= tolerance("f32", k), results
    return f"tn {m}x{n}x{k}: 3 replays on new inputs, max err {max(results):.4g}"


@check("compile")
def check_compile(key):
    layout, m, n, k = key
    gen = torch.Generator(device="cuda").manual_seed(3)
    x, w = operands("tn", m, n, k, gen)
    seen = {"graphs": 0, "kaas_nodes": 0}

    def backend(gm, example_inputs):
        seen["graphs"] += 1
        seen["kaas_nodes"] += sum(1 for node in gm.graph.nodes if "kaas" in str(node.target))
        return gm.forward

    def f(x, w):
        return kt.linear(x, w).relu() * 2 + kt.matmul(x, w.t())

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend=backend)(x, w)
    assert seen["graphs"] == 1, seen
    assert seen["kaas_nodes"] == 2, f"kaas::mm not in the graph: {seen}"
    want = (reference(x, w, "tn").relu() * 2 + reference(x, w, "tn"))
    err = float((got.float() - want).abs().max())
    assert err <= 4 * tolerance("f32", k), err
    torch._dynamo.reset()
    got2 = torch.compile(f, fullgraph=True)(x, w)  # inductor
    err2 = float((got2.float() - want).abs().max())
    assert err2 <= 4 * tolerance("f32", k), err2
    explain = torch._dynamo.explain(f)(x, w)
    assert explain.graph_break_count == 0, explain.break_reasons
    return f"tn {m}x{n}x{k}: 1 graph, 0 breaks, 2 kaas::mm nodes; err eager-backend {err:.4g}, inductor {err2:.4g}"


@check("patch")
def check_patch(served, unserved):
    (_, m, n1, k1), (_, _, n2, k2) = served[0], unserved
    model = torch.nn.Sequential(torch.nn.Linear(k1, n1, bias=True), torch.nn.Linear(k2, n2, bias=False)).half().cuda()
    x1 = (torch.rand(m, k1, device="cuda") * 2 - 1).half()
    x2 = (torch.rand(m, k2, device="cuda") * 2 - 1).half()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the unserved layer's one-time no_kernel warning
        want0, want1 = model[0](x1), model[1](x2)
        kt.patch(model)
        assert kt.patched(model) == ["0"], kt.patched(model)  # no kernel has layer 1's shape
        got0 = model[0](x1)
        err = float((got0.float() - want0.float()).abs().max())
        assert err <= 2 * tolerance("f32", k1), err
        kt.unpatch(model)
        kt.patch(model, every_layer=True)  # layer 1 through the dispatch, falling back to torch
        assert kt.patched(model) == ["0", "1"], kt.patched(model)
        assert torch.equal(model[1](x2), want1), "the layer with no kernel must run torch unchanged"
        kt.unpatch(model)
        assert kt.patched(model) == [] and torch.equal(model[0](x1), want0)
    return f"bias layer tn {m}x{n1}x{k1} err {err:.4g} vs F.linear; layer without a kernel left alone / bit-identical; unpatched"


@check("autograd")
def check_autograd(key):
    _, m, n, k = key
    x = ((torch.rand(m, k, device="cuda") * 2 - 1) / 8).half().requires_grad_()
    w = ((torch.rand(n, k, device="cuda") * 2 - 1) / 8).half().requires_grad_()
    kt.linear(x, w).float().sum().backward()
    gx, gw = x.grad.clone(), w.grad.clone()
    x.grad = w.grad = None
    F.linear(x, w).float().sum().backward()
    assert torch.allclose(gx, x.grad) and torch.allclose(gw, w.grad)
    return f"tn {m}x{n}x{k}: gradients equal torch's"


@check("fallbacks")
def check_fallbacks(key):
    _, m, n, k = key
    kt._S.warned.clear()  # so that this check sees its own warnings
    x = (torch.rand(m * k + 1, device="cuda") * 2 - 1).half()[1:].view(m, k)  # 2 bytes off: misaligned
    w = (torch.rand(n, k, device="cuda") * 2 - 1).half()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = kt.linear(x, w)
        kt.linear(x.float(), w.float())
    assert torch.equal(out, F.linear(x, w))
    reasons = " / ".join(str(c.message) for c in caught if issubclass(c.category, kt.KaasFallbackWarning))
    faults = []
    kt.set_strict(True)
    for args, want in (((x, w), "alignment"), ((x.float(), w.float()), "dtype"), ((x.cpu(), w.cpu()), "device")):
        try:
            kt.linear(*args)
            faults.append(f"{want}: no error")
        except FallbackError as e:
            if e.reason != want:
                faults.append(f"{want}: got {e.reason}")
    assert not faults, faults
    return f"warned: {reasons[:160]}"


@check("lock")
def check_lock(bundle, problems, device_class):
    tmp = Path(tempfile.mkdtemp())
    from kaas_client.manifest import Problem
    ps = [Problem("sm_90", "f32", l, m, n, k) for l, m, n, k in problems] + [Problem("sm_90", "f32", "tn", 1, 4096, 4096)]
    lk = resolve(ps, bundle, device_class, cache=tmp / "cache")
    lk.write(tmp / "kaas.lock")
    kt.reset()
    count = kt.use(lock=tmp / "kaas.lock", cache=tmp / "cache", device_class=device_class)
    assert count == len(problems), (count, len(problems))
    layout, m, n, k = problems[0]
    gen = torch.Generator(device="cuda").manual_seed(4)
    a, b = operands(layout, m, n, k, gen)
    kt.set_strict(True)
    out = kaas_call(a, b, layout)
    err = errors(a, b, layout, out)[0]
    assert err <= tolerance("f32", k), err
    kt.set_strict(False)
    victim = tmp / "cache" / f"{lk.kernels[0].sha256}.ptx"
    victim.write_text(victim.read_text() + "\n// tampered\n")
    try:
        Lock.read(tmp / "kaas.lock").load(tmp / "cache")
        raise AssertionError("a tampered artifact loaded")
    except IntegrityError:
        pass
    shutil.rmtree(tmp)
    return f"{count} kernels locked and run offline, {len(lk.fallback)} fallback; tampered artifact refused"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default="kernels")
    ap.add_argument("--device-class", help="use the catalog of this class (default: this GPU's own)")
    ap.add_argument("--sample", type=int, default=24, help="how many served problems the kernels check runs")
    args = ap.parse_args()
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 0
    try:
        import_driver()
    except KaasError as e:
        print(f"{e}\n(e.g. pip install --no-deps cuda_bindings-13.0.3-cp312-*.whl cuda_pathfinder-1.9.1-py3-none-any.whl)")
        return 2
    name = torch.cuda.get_device_name()
    t0 = time.perf_counter()
    n = kt.use(bundle=args.bundle, device_class=args.device_class)
    dc = kt.status()["device_class"]
    print(f"{name} as {dc}: {n} served kernels from {args.bundle} ({time.perf_counter() - t0:.1f} s)", flush=True)
    if n == 0:
        print("no kernels for this device class: pass --device-class H100-SXM to test the H100 catalog here")
        return 1
    problems = sample_problems(args.sample)
    tn = [p for p in problems if p[0] == "tn"]
    small_tn = min(tn, key=lambda p: p[1] * p[2] * p[3])
    check_kernels(problems)
    check_repoint(tn[len(tn) // 2])
    check_graph(small_tn)
    check_compile(small_tn)
    served_keys = set(kt.problems())
    shapes = {(key[2], key[3]) for key in served_keys}
    unserved = next(("tn", small_tn[1], n2, k2) for n2, k2 in ((4096, 14336), (14336, 4096), (3584, 3584), (1000, 1000))
                    if (n2, k2) not in shapes)
    check_patch([small_tn], unserved)
    check_autograd(small_tn)
    check_fallbacks(small_tn)
    check_lock(args.bundle, problems[:6], dc)
    print(f"\n{'check':10}  status  seconds")
    for r in ROWS:
        print(f"{r['check']:10}  {r['status']:6}  {r['seconds']:7.2f}")
    result = {"device": name, "device_class": dc, "bundle": args.bundle, "kernels": n, "torch": torch.__version__,
              "sample": [list(p) for p in problems], "checks": ROWS}
    (out / "gpu_torch.json").write_text(json.dumps(result, indent=1))
    failed = [r["check"] for r in ROWS if r["status"] == "FAIL"]
    print(f"{len(ROWS) - len(failed)} passed, {len(failed)} failed" + (f": {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
