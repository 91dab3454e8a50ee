"""Command line: `python -m kaas_client pull URL ... -o DIR`, `python -m kaas_client check DIR`,
and `python -m kaas_client lock ...` (the same as `kaas-lock ...`)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional

from . import Kernel, KaasError, NoKernelError, pull
from .errors import run_cli
from .kernel import CheckResult
from .bundle import has_index
from .manifest import Problem, parse_shape


def _kernels(path: str, problem: str | None, device_class: str | None) -> list[Kernel]:
    """A pulled directory (kernel.ptx + manifest.json) or a catalog bundle (index.json)."""
    if has_index(path):
        kernels = Kernel.bundle_entries(path, device=device_class)
    else:
        kernels = [Kernel.from_dir(path)]
    if problem:
        want = Problem.parse(problem)
        kernels = [k for k in kernels if k.problem == want]
    if not kernels:
        raise KaasError(f"{path}: no kernel" + (f" for {problem}" if problem else ""))
    return kernels


def cmd_pull(args) -> int:
    m, n, k = parse_shape(args.shape)
    try:
        kernel = pull(args.url, device=args.device, m=m, n=n, k=k, acc=args.acc, layout=args.layout, arch=args.arch)
    except NoKernelError as e:
        print(f"kaas: {e.detail or e}", file=sys.stderr)
        if e.use_instead is not None:
            print("use_instead: " + json.dumps(e.use_instead, indent=2), file=sys.stderr)
        return 3
    out = kernel.save(args.output)
    print(f"{kernel.problem}: {', '.join(kernel.manifest.entries())} (sha256 {kernel.sha256}) -> {out}/kernel.ptx, {out}/manifest.json")
    return 0


def cmd_check(args) -> int:
    rows: list[tuple[str, Optional[CheckResult]]] = []
    for kernel in _kernels(args.dir, args.problem, args.device_class):
        try:
            kernel.load(args.gpu)
            rows.append((kernel.problem.path, kernel.check(seed=args.seed, verbose=False)))
        except KaasError as e:  # report it and go on with the others
            print(f"kaas: {kernel.problem}: {e}", file=sys.stderr)
            rows.append((kernel.problem.path, None))
    width = max(len(p) for p, _ in rows)
    print(f"{'problem':<{width}}  {'max_abs_err':>11}  {'tolerance':>9}  {'exact_miss':>10}  {'torch_fp16':>10}  result  device")
    for p, r in rows:
        if r is None:
            print(f"{p:<{width}}  {'-':>11}  {'-':>9}  {'-':>10}  {'-':>10}  ERROR")
            continue
        print(f"{p:<{width}}  {r.max_abs_err:>11.6g}  {r.tolerance:>9.4g}  {r.exact_mismatches:>10}  "
              f"{r.cublas_max_abs_err:>10.6g}  {'PASS' if r.passed else 'FAIL':<6}  {r.device}")
    return 0 if all(r is not None and r.passed for _, r in rows) else 1


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["lock"]:  # `python -m kaas_client lock ...` is `kaas-lock ...`
        from .locking import main as lock_main
        return lock_main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m kaas_client", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pull", help="download the best kernel for a problem into a directory")
    p.add_argument("url", help="service base URL, e.g. http://localhost:8080")
    p.add_argument("--device", help="device class, e.g. H100-SXM (default: any)")
    p.add_argument("--shape", required=True, help="MxNxK, e.g. 4096x4096x4096")
    p.add_argument("--acc", default="f32", choices=["f16", "f32"])
    p.add_argument("--layout", default="tn", choices=["nn", "tn"])
    p.add_argument("--arch", default="sm_90")
    p.add_argument("-o", "--output", required=True, help="directory for kernel.ptx and manifest.json")
    p.set_defaults(run=cmd_pull)
    c = sub.add_parser("check", help="run kernels on the GPU and compare with torch.matmul")
    c.add_argument("dir", help="a pulled directory, or a catalog bundle with index.json (e.g. kernels/)")
    c.add_argument("--problem", help="only this problem, e.g. sm_90/f32/tn/1024x1024x1024")
    c.add_argument("--device-class", help="bundle entries of this device class only")
    c.add_argument("--gpu", type=int, default=0, help="CUDA device ordinal")
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(run=cmd_check)
    return run_cli(ap.parse_args(argv), "kaas")


if __name__ == "__main__":
    sys.exit(main())
