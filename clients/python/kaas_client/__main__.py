"""Command line: `python -m kaas_client pull URL ... -o DIR`, `python -m kaas_client check DIR`,
and `python -m kaas_client lock ...` (the same as `kaas-lock ...`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Optional

from . import Kernel, KaasError, NoKernelError, pull
from .errors import run_cli
from .kernel import CheckResult
from .bundle import has_index
from .catalog import Catalog
from .manifest import Problem, parse_shape


def _kernels(path: str, problem: str | None, device_class: str | None) -> list[Kernel]:
    """A pulled directory (kernel.ptx + manifest.json), or a catalog tree (`kernels/`: its
    own bundle and every sub-bundle, merged as the service imports them)."""
    if (Path(path) / "kernel.ptx").is_file() and not has_index(path):
        kernels = [Kernel.from_dir(path)]
    else:
        cat = Catalog.from_tree(path)
        device = cat.device_class(device_class)
        found = sorted((e for (_, dc), e in cat.entries.items() if device is None or dc == device), key=lambda e: (e.problem.path, e.device_class))
        kernels = [Kernel.from_entry(e) for e in found]
    if problem:
        want = Problem.parse(problem)
        kernels = [k for k in kernels if k.problem == want]
    if not kernels:
        raise KaasError(f"{path}: no kernel" + (f" for {problem}" if problem else ""))
    return kernels


def _use_instead(u: dict) -> str:
    """A baseline to use, in a line: what, stored how, how fast (its full configuration is
    in `--json`)."""
    us = u.get("median_us")
    return f"{u.get('library')} ({u.get('layout')} layout, {u.get('mode')} mode){f', {us:.2f} µs' if isinstance(us, (int, float)) else ''}"


def cmd_pull(args) -> int:
    m, n, k = parse_shape(args.shape)
    try:
        kernel = pull(args.url, device=args.device, m=m, n=n, k=k, acc=args.acc, layout=args.layout, arch=args.arch)
    except NoKernelError as e:
        # The answer, not a failure: no kernel beats the libraries here (exit 3, so a
        # script can tell it from an error); what to call instead in a line, in full with
        # --json (cuBLASLt's algorithm words run to fifty lines).
        print(f"kaas: {e.code}: {e.detail or e}", file=sys.stderr)
        if e.use_instead is not None:
            print(f"use instead: {_use_instead(e.use_instead)} on {e.device_class}", file=sys.stderr)
            if args.json:
                print(json.dumps(e.use_instead, indent=2))
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
    p.add_argument("--json", action="store_true", help="with no kernel to use: print the baseline's full configuration (use_instead) as JSON")
    p.set_defaults(run=cmd_pull)
    c = sub.add_parser("check", help="run kernels on the GPU and compare with torch.matmul")
    c.add_argument("dir", help="a pulled directory, or a catalog tree (e.g. kernels/: every bundle in it, merged as the service imports them)")
    c.add_argument("--problem", help="only this problem, e.g. sm_90/f32/tn/1024x1024x1024")
    c.add_argument("--device-class", help="entries of this device class only (H100, h200, or the driver's name work too)")
    c.add_argument("--gpu", type=int, default=0, help="CUDA device ordinal")
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(run=cmd_check)
    return run_cli(ap.parse_args(argv), "kaas")


if __name__ == "__main__":
    sys.exit(main())
