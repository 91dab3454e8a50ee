"""Lock files: a model's GEMM problems resolved once to verified kernels, so that a
deployment runs the same PTX every time and needs no kaas service.

    kaas-lock resolve --source kernels --device-class H100-SXM --model llama-3.1-8b --tokens 1,64,512 -o kaas.lock
    kaas-lock download kaas.lock --source kernels        # fills the cache (or from http://host:8080)
    kaas-lock verify kaas.lock                           # every artifact present, every sha256 right

A lock (`kaas.lock.v1`, JSON) names the device class it was resolved for and, per problem,
the artifact's sha256, the launch manifest, and the graph-mode speedups measured against
the baselines; problems with no kernel (none, or a baseline is faster: the service's rule,
see `catalog.py`) are listed under `fallback` with the baseline to use instead. PTX lives in
a cache folder as `<sha256>.ptx` (`$KAAS_CACHE`, default `~/.cache/kaas/ptx`); loading a
lock reads only the lock and the cache, and checks every sha256.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from .catalog import AUTOTUNE_MAX, LEGACY_REGIME, Catalog, bundle_dirs, graph_speedups
from .errors import IntegrityError, LockError, ManifestError, NoKernelError, run_cli
from .kernel import Kernel, sha256_hex
from .manifest import Manifest, Problem, parse_problem
from .models import MODELS, model as model_config

FORMAT = "kaas.lock.v1"
PathLike = Union[str, Path]


def default_cache() -> Path:
    """`$KAAS_CACHE`, else `~/.cache/kaas/ptx`."""
    env = os.environ.get("KAAS_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "kaas" / "ptx"


def is_url(source: str) -> bool:
    return str(source).startswith(("http://", "https://"))


@dataclass(frozen=True)
class LockedKernel:
    problem: Problem
    sha256: str
    manifest: Manifest
    name: str = ""
    speedups: Optional[dict] = None  # graph mode, by baseline, as measured
    # The cache regime the speedups were measured in (`l2_cold`, what kaas ranks by;
    # `rotation_3_sets` for figures from before regimes were named).
    regime: Optional[str] = None
    # Where the kernel was measured, when the service served another class's entry as a
    # stand-in for the lock's (an H100-SXM kernel for an H200); None: the lock's own class.
    measured_on: Optional[str] = None
    # The service's signed run record and its signature (kernels resolved from a
    # service), checked again on every load.
    record: Optional[dict] = None
    signature: Optional[dict] = None

    @property
    def speedup(self) -> Optional[float]:
        """Graph-mode speedup over cuBLASLt-autotune-max, the figure kaas ranks by."""
        v = (self.speedups or {}).get(AUTOTUNE_MAX)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def to_dict(self) -> dict:
        d = {"problem": self.problem.path, "sha256": self.sha256, "name": self.name, "speedup": self.speedup,
             "speedups": self.speedups, "regime": self.regime, "manifest": self.manifest.to_dict()}
        if self.measured_on:
            d["measured_on"] = self.measured_on
        if self.record is not None:
            d["record"], d["signature"] = self.record, self.signature
        return d


@dataclass
class Lock:
    device_class: Optional[str]
    source: str
    kernels: list = field(default_factory=list)  # LockedKernel
    fallback: list = field(default_factory=list)  # {"problem", "code", "use_instead"}
    # The service's public keys (base64) the kernels' records were checked against when
    # resolved; a load checks them again (against a key pinned then, if one is).
    signing_keys: list = field(default_factory=list)

    def to_dict(self) -> dict:
        d = {"format": FORMAT, "device_class": self.device_class, "source": self.source,
             "kernels": [k.to_dict() for k in self.kernels], "fallback": self.fallback}
        if self.signing_keys:
            d["signing_keys"] = self.signing_keys
        return d

    def write(self, path: PathLike) -> Path:
        p = Path(path)
        _atomic_write(p, (json.dumps(self.to_dict(), indent=1) + "\n").encode())
        return p

    @classmethod
    def read(cls, path: PathLike) -> "Lock":
        """Reads and checks a lock file; LockError names the file and the first fault."""
        p = Path(path)
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise LockError(f"{p}: cannot read the lock file: {e.strerror or e}") from None
        except ValueError as e:
            raise LockError(f"{p}: not JSON: {e}") from None
        return cls.from_dict(d, str(p))

    @classmethod
    def from_dict(cls, d: Any, where: str = "lock") -> "Lock":
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise LockError(f"{where}: format is `{got}`; expected `{FORMAT}`")
        kernels, seen = [], set()
        for i, e in enumerate(d.get("kernels") or []):
            at = f"{where}: kernels[{i}]"
            try:
                problem = Problem.parse(e["problem"])
                manifest = Manifest.from_dict(e["manifest"])
                sha = e["sha256"]
            except (KeyError, TypeError) as err:
                raise LockError(f"{at}: missing or malformed field {err}") from None
            except ManifestError as err:
                raise LockError(f"{at}: {err}") from None
            if manifest.problem != problem:
                raise LockError(f"{at}: the manifest is for {manifest.problem}, the entry says {problem}")
            if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise LockError(f"{at}: sha256 `{sha}` is not 64 lowercase hex digits")
            if problem in seen:
                raise LockError(f"{at}: {problem} is locked twice")
            seen.add(problem)
            speedups, regime, measured_on = e.get("speedups"), e.get("regime"), e.get("measured_on")
            record, signature = e.get("record"), e.get("signature")
            if record is not None and (not isinstance(record, dict) or not isinstance(signature, dict)):
                raise LockError(f"{at}: `record` and `signature` must both be objects")
            kernels.append(LockedKernel(problem, sha, manifest, str(e.get("name", "")), speedups if isinstance(speedups, dict) else None,
                                        regime if isinstance(regime, str) else None, measured_on if isinstance(measured_on, str) else None,
                                        record, signature))
        dc = d.get("device_class")
        keys = d.get("signing_keys") or []
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise LockError(f"{where}: `signing_keys` must be a list of base64 keys")
        return cls(dc if isinstance(dc, str) else None, str(d.get("source", "")), kernels, list(d.get("fallback") or []), keys)

    def problems(self) -> list[Problem]:
        return [k.problem for k in self.kernels]

    def load(self, cache: Optional[PathLike] = None, public_key: Any = None) -> dict:
        """{Problem: Kernel} from the cache alone, each PTX checked against its sha256 and,
        for kernels resolved from a service, each signed record checked against the
        lock's keys (or `public_key`, pinned: a key, the key document, or a file holding
        either) and against the locked sha256 and manifest. A missing file is a LockError
        saying how to fill the cache; a PTX whose sha256 differs, or a record that does
        not verify, is an IntegrityError naming the file or problem."""
        c = Path(cache) if cache is not None else default_cache()
        signed = [k for k in self.kernels if k.record is not None]
        if signed:
            keys = read_public_keys(public_key) if public_key is not None else list(self.signing_keys)
            if not keys:
                raise LockError(f"{len(signed)} locked kernels carry signed records, but the lock names no signing key and none was given")
            for k in signed:
                check_signed(k.record, k.signature, keys, k.problem, k.sha256, k.manifest, f"lock: {k.problem}")
        out = {}
        missing = [k for k in self.kernels if not (c / f"{k.sha256}.ptx").is_file()]
        if missing:
            raise LockError(
                f"{len(missing)} of {len(self.kernels)} locked kernels are not in the cache {c} "
                f"(first: {missing[0].problem}, {missing[0].sha256}.ptx); fill it with "
                f"`kaas-lock download LOCK --source {self.source or 'BUNDLE_OR_URL'} --cache {c}`"
            )
        for k in self.kernels:
            path = c / f"{k.sha256}.ptx"
            ptx = path.read_text(encoding="utf-8")
            view = {"device_class": self.device_class, "speedups": k.speedups, "measured_on": k.measured_on or self.device_class}
            out[k.problem] = Kernel(k.manifest, ptx, sha256=k.sha256, view=view, source=str(path))
        return out


def read_public_keys(given: Any) -> list:
    """Public keys (base64) from a key (base64 or hex), the /.well-known/kaas-signing-keys
    document, a list of either, or the path of a file holding one (as `kaas verify
    --public-key` reads it)."""
    import base64

    from .signing import public_keys
    if isinstance(given, (str, Path)) and not str(given).strip().startswith("{") and Path(str(given)).is_file():
        given = Path(str(given)).read_text(encoding="utf-8")
    return [base64.b64encode(k).decode() for k in public_keys(given)]


def check_signed(record: Any, signature: Any, keys: list, problem: Problem, sha: str, manifest: Manifest, where: str) -> dict:
    """Checks a kernel's signed run record: the signature verifies with one of `keys`, and
    the record vouches for this artifact, manifest and problem with a passing verdict.
    Returns the record; raises IntegrityError naming `where` and the fault."""
    from .signing import verify_record

    try:
        rec = verify_record(record, keys, signature=signature)
    except IntegrityError as e:
        raise IntegrityError(f"{where}: {e}") from None
    faults = []
    if rec.get("artifact_sha256") != sha:
        faults.append(f"the record names artifact {rec.get('artifact_sha256')}, not {sha}")
    try:
        # Compared as read, not as text: a lock stores the manifest as this client writes it.
        if Manifest.from_dict(rec.get("manifest")) != manifest:
            faults.append("the record's manifest differs from the kernel's")
    except ManifestError as e:
        faults.append(f"the record's manifest: {e}")
    try:
        if Problem.from_dict(rec.get("problem")) != problem:
            faults.append(f"the record is for {Problem.from_dict(rec.get('problem'))}")
    except ManifestError as e:
        faults.append(f"the record's problem: {e}")
    if rec.get("verdict") != "pass":
        faults.append(f"the record's verdict is `{rec.get('verdict')}`")
    if faults:
        raise IntegrityError(f"{where}: " + "; ".join(faults))
    return rec


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _store_ptx(cache: Path, sha: str, ptx: str, source: str) -> Path:
    got = sha256_hex(ptx)
    if got != sha:
        raise IntegrityError(f"{source}: sha256 is {got}, the lock says {sha}")
    path = cache / f"{sha}.ptx"
    if not path.is_file() or sha256_hex(path.read_text(encoding="utf-8")) != sha:
        _atomic_write(path, ptx.encode("utf-8"))
    return path


def resolve(problems: Iterable[Problem], source: str, device_class: Optional[str], *,
            cache: Optional[PathLike] = None, catalog: Optional[Catalog] = None, timeout: float = 30.0,
            public_key: Any = None) -> Lock:
    """Resolves each problem to the kernel the service serves (from a bundle folder, read
    with the service's rule, or from a server at `source`, which decides), filling the
    cache with the PTX on the way; problems with no kernel go to `fallback`.

    From a server, every answer's signed run record is checked (against `public_key`,
    pinned, else `$KAAS_PUBLIC_KEY`, else the keys the server publishes at
    /.well-known/kaas-signing-keys) and kept in the lock; PTX already in the cache with
    the right sha256 is not downloaded again. A kernel the service offers as a stand-in
    for `device_class` (an H100-SXM kernel for an H200, by its rule) is locked for
    `device_class`, with `measured_on` naming where it was measured. A device class the
    service does not know raises UnknownDeviceError."""
    c = Path(cache) if cache is not None else default_cache()
    lock = Lock(device_class, str(source))
    problems = list(dict.fromkeys(problems))
    if not is_url(source) and catalog is None:
        catalog = Catalog.from_tree(source)
    if catalog is not None:
        # The bundles' own name for the class (`h100` -> `H100-SXM`), as the service's.
        lock.device_class = device_class = catalog.device_class(device_class)
    keys: list = []
    if catalog is None:
        keys = _service_keys(str(source), public_key, timeout)
        lock.signing_keys = keys
    canonical = False  # whether lock.device_class is the service's own name for the class
    for p in problems:
        measured_on = record = signature = None
        try:
            if catalog is not None:
                entry = catalog.lookup(p, device_class)
                kernel = Kernel.from_entry(entry)
                dc, speedups, name = entry.device_class, entry.speedups, entry.record.get("name", "")
                run = entry.record.get("run") or {}
            else:
                kernel, view = _fetch_signed(str(source), p, lock.device_class, keys, c, timeout)
                dc, speedups, name = str(view.get("device_class") or ""), graph_speedups(view), view.get("name", "")
                run = view.get("run") or {}
                record, signature = view.get("record"), view.get("signature")
                fb = view.get("fallback")
                if isinstance(fb, dict) and fb.get("requested_device"):
                    # A stand-in: the service serves this class's problem with another's kernel.
                    measured_on, dc = dc, str(fb["requested_device"])
                if lock.device_class is not None and not canonical:
                    lock.device_class, canonical = dc, True  # `H100`, `NVIDIA H200` -> the service's class name
        except NoKernelError as e:
            lock.fallback.append({"problem": p.path, "code": e.code, "use_instead": e.use_instead})
            continue
        if lock.device_class is None:
            lock.device_class = dc
        elif dc != lock.device_class:
            raise LockError(f"{p}: resolved on {dc}, the lock is for {lock.device_class}; name one --device-class")
        _store_ptx(c, kernel.sha256, kernel.ptx, kernel.source)
        regime = run.get("regime") if isinstance(run.get("regime"), str) else (LEGACY_REGIME if speedups else None)
        lock.kernels.append(LockedKernel(p, kernel.sha256, kernel.manifest, str(name), speedups, regime, measured_on, record, signature))
    return lock


def _service_keys(source: str, public_key: Any, timeout: float) -> list:
    """The keys a service's answers must verify with: pinned, or the ones it publishes."""
    pinned = public_key if public_key is not None else os.environ.get("KAAS_PUBLIC_KEY") or None
    if pinned is not None:
        return read_public_keys(pinned)
    from .remote import get_json
    return read_public_keys(get_json(f"{source.rstrip('/')}/.well-known/kaas-signing-keys", timeout))


def _fetch_signed(source: str, p: Problem, device_class: Optional[str], keys: list, cache: Path, timeout: float) -> tuple:
    """(Kernel, answer) for a problem from a server: the answer's manifest is for `p`, its
    signed record verifies and vouches for the artifact and manifest, and the PTX (from
    the cache when it is there with that sha256, else downloaded) has that sha256."""
    from .remote import _get, get_json, kernel_url

    url = kernel_url(source, p, device_class)
    view = get_json(url, timeout)
    try:
        manifest = Manifest.from_dict(view["manifest"])
        sha = view["artifact"]["sha256"]
    except (KeyError, TypeError) as e:
        raise IntegrityError(f"{url}: not a kernel answer (no {e})") from None
    except ManifestError as e:
        raise IntegrityError(f"{url}: {e}") from None
    if manifest.problem != p:
        raise IntegrityError(f"{url}: asked for {p}, the manifest is for {manifest.problem}")
    if not isinstance(view.get("record"), dict) or not isinstance(view.get("signature"), dict):
        raise IntegrityError(f"{url}: the answer carries no signed record")
    check_signed(view["record"], view["signature"], keys, p, sha, manifest, url)
    path = cache / f"{sha}.ptx"
    ptx = path.read_text(encoding="utf-8") if path.is_file() else None
    where = str(path)
    if ptx is None or sha256_hex(ptx) != sha:
        where = urllib.parse.urljoin(source.rstrip("/") + "/", str((view.get("artifact") or {}).get("url") or f"v1/artifacts/{sha}"))
        ptx = _get(where, "text/plain", timeout).decode("utf-8")
    return Kernel(manifest, ptx, sha256=sha, view=view, source=where), view


def download(lock: Lock, source: Optional[str] = None, cache: Optional[PathLike] = None, timeout: float = 30.0) -> list[Path]:
    """Fills the cache with every locked artifact not yet there (from a bundle folder's
    `ptx/`, or a server's `/v1/artifacts/<sha256>`), checking each sha256."""
    c = Path(cache) if cache is not None else default_cache()
    src = source or lock.source
    if not src:
        raise LockError("no source to download from: pass --source BUNDLE_DIR_OR_URL")
    dirs = [] if is_url(src) else bundle_dirs(src)
    out = []
    for k in lock.kernels:
        path = c / f"{k.sha256}.ptx"
        if path.is_file() and sha256_hex(path.read_text(encoding="utf-8")) == k.sha256:
            out.append(path)
            continue
        if is_url(src):
            from .remote import _get
            url = urllib.parse.urljoin(src.rstrip("/") + "/", f"v1/artifacts/{k.sha256}")
            ptx, where = _get(url, "text/plain", timeout).decode("utf-8"), url
        else:
            found = [d / "ptx" / f"{k.sha256}.ptx" for d in dirs if (d / "ptx" / f"{k.sha256}.ptx").is_file()]
            if not found:
                raise LockError(f"{k.problem}: artifact {k.sha256} is in no bundle under {src}")
            ptx, where = found[0].read_text(encoding="utf-8"), str(found[0])
        out.append(_store_ptx(c, k.sha256, ptx, where))
    return out


def trace_problems(model: Any, *example_inputs: Any, arch: str = "sm_90", acc: str = "f32") -> list[Problem]:
    """The `tn` problems of every fp16 `nn.Linear` a forward pass on the example inputs
    runs (forward pre-hooks record each call's rows); needs torch."""
    import torch

    seen: dict = {}

    def hook(module: Any, args: tuple) -> None:
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and x.dtype == torch.float16 and module.weight.dtype == torch.float16:
            k = module.in_features
            m = x.numel() // k if k else 0
            if m:
                seen.setdefault(Problem(arch, acc, "tn", m, module.out_features, k), None)

    handles = [mod.register_forward_pre_hook(hook) for mod in model.modules() if isinstance(mod, torch.nn.Linear)]
    try:
        with torch.no_grad():
            model(*example_inputs)
    finally:
        for h in handles:
            h.remove()
    return list(seen)


def lock(problems: Optional[Iterable[Union[Problem, str]]] = None, *, source: str, device_class: Optional[str],
         model: Any = None, example_inputs: tuple = (), path: Optional[PathLike] = None,
         cache: Optional[PathLike] = None) -> Lock:
    """Resolves a model's problems (given, as Problems or `tn/MxNxK` text, or traced from
    `model(*example_inputs)`) to kernels, fills the cache, and writes the lock to `path`
    if given. `source`: a bundle folder (e.g. the repo's `kernels`) or a server URL."""
    todo = [p if isinstance(p, Problem) else parse_problem(p) for p in (problems or [])]
    if model is not None:
        todo += trace_problems(model, *example_inputs)
    if not todo:
        raise LockError("nothing to lock: give problems, or a model and example inputs")
    result = resolve(todo, source, device_class, cache=cache)
    if path is not None:
        result.write(path)
    return result


# --------------------------------------------------------------------------------------
# kaas-lock


def _problems_from_args(args: argparse.Namespace) -> list[Problem]:
    out = [parse_problem(p.replace(":", "/", 1), args.arch) for p in args.problem or []]
    tokens = [int(t) for t in args.tokens.split(",") if t] if args.tokens else []
    if (args.model or args.hf_config) and not tokens:
        raise LockError("--model and --hf-config need --tokens, e.g. --tokens 1,64,512")
    for name in args.model or []:
        for t in tokens:
            out += model_config(name).problems(t, arch=args.arch)
    for path in args.hf_config or []:
        from .shapes import linear_problems
        out += linear_problems(hf_model(path), tokens, arch=args.arch, exclude=args.exclude or ())
    return list(dict.fromkeys(out))


def hf_model(config: str) -> Any:
    """A transformers model built from a config (a config.json, a folder holding one, or
    a name already in the local Hugging Face cache) on the meta device in float16: its
    layers and shapes, no weights, nothing downloaded. Needs torch and transformers."""
    try:
        import torch
        from transformers import AutoConfig, AutoModel, AutoModelForCausalLM
    except ImportError as e:
        raise LockError(f"--hf-config needs torch and transformers ({e})") from None
    path = Path(config)
    try:
        cfg = AutoConfig.from_pretrained(str(path.parent if path.is_file() else config), local_files_only=True)
    except (OSError, ValueError) as e:
        raise LockError(f"{config}: not a transformers config here ({e})") from None
    with torch.device("meta"):
        for auto in (AutoModelForCausalLM, AutoModel):
            try:
                return auto.from_config(cfg, dtype=torch.float16)
            except ValueError:  # not a causal LM: the base model
                continue
    raise LockError(f"{config}: transformers builds no model from this config")


def cmd_resolve(args: argparse.Namespace) -> int:
    problems = _problems_from_args(args)
    if not problems:
        raise LockError("nothing to resolve: give --problem, --model or --hf-config (with --tokens)")
    device_class, status = args.device_class, 0
    if args.tune:
        from .tuning import tune
        if not is_url(args.source):
            raise LockError("--tune asks a service: give --source http://host:port")
        report = tune(args.source, problems, device_class=device_class, token=args.token, timeout=args.timeout,
                      no_worker_timeout=args.no_worker_timeout, progress=not args.no_progress)
        print(report.table(), end="", file=sys.stderr)
        print(f"tuning: {report.summary()}", file=sys.stderr)
        device_class = report.device_class or device_class
        if report.timed_out:
            status = 3  # the lock is written with what is served now; a later resolve picks up the rest
    result = resolve(problems, args.source, device_class, cache=args.cache, public_key=args.public_key)
    result.write(args.output)
    print(f"{args.output}: {len(result.kernels)} kernels for {result.device_class}, "
          f"{len(result.fallback)} problems fall back to torch; PTX cached in {args.cache or default_cache()}")
    for k in result.kernels:
        where = f"  (measured on {k.measured_on})" if k.measured_on else ""
        print(f"  {k.problem}  {k.sha256[:12]}  {k.speedup and f'{k.speedup:.3f}x'}  {k.name}{where}")
    for f in result.fallback:
        print(f"  {f['problem']}  -> torch ({f['code']})")
    return status


def cmd_download(args: argparse.Namespace) -> int:
    lk = Lock.read(args.lock)
    paths = download(lk, args.source, args.cache)
    print(f"{len(paths)} artifacts in {args.cache or default_cache()}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    lk = Lock.read(args.lock)
    kernels = lk.load(args.cache, public_key=args.public_key)
    signed = sum(1 for k in lk.kernels if k.record is not None)
    print(f"{args.lock}: {len(kernels)} kernels for {lk.device_class}, every sha256 checked"
          + (f", {signed} signed records verified" if signed else ""))
    return 0


def main(argv: Optional[list] = None) -> int:
    ap = argparse.ArgumentParser(prog="kaas-lock", description="Lock a model's GEMM problems to verified kaas kernels, for offline use.")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("resolve", help="resolve problems to kernels, write a lock file and fill the cache")
    r.add_argument("--source", required=True, help="a catalog bundle folder (e.g. kernels) or a server URL")
    r.add_argument("--device-class", help="e.g. H100-SXM (default: the fastest of any)")
    r.add_argument("--problem", action="append", help="tn/MxNxK or arch/acc/layout/MxNxK; repeatable")
    r.add_argument("--model", action="append", help=f"one of {', '.join(MODELS)}; repeatable")
    r.add_argument("--hf-config", action="append", help="a transformers config.json (or its folder): the fp16 linears of "
                   "the model it builds on the meta device (needs torch and transformers; nothing is downloaded); repeatable")
    r.add_argument("--exclude", action="append", help="with --hf-config: leave out modules whose name matches this glob "
                   "(e.g. lm_head); repeatable")
    r.add_argument("--tokens", help="comma-separated token counts (M) for --model and --hf-config, e.g. 1,64,512")
    r.add_argument("--arch", default="sm_90")
    r.add_argument("--tune", action="store_true", help="first ask the service (--source URL) to tune the problems it "
                   "lacks for the device class, and follow the request (needs a token)")
    r.add_argument("--token", help="with --tune: the service token (default $KAAS_TOKEN)")
    r.add_argument("--timeout", type=float, default=3600.0, help="with --tune: seconds to wait for the tunes; past it "
                   "the lock holds what is served then and the exit status is 3 (default 3600)")
    r.add_argument("--no-worker-timeout", type=float, default=120.0, help="with --tune: stop waiting after this many "
                   "seconds when the service has seen no GPU worker of the class (default 120)")
    r.add_argument("--no-progress", action="store_true", help="with --tune: no progress bar")
    r.add_argument("--public-key", help="a URL source's signing key, pinned: base64, hex, the key document or a file "
                   "(default $KAAS_PUBLIC_KEY, else the keys the service publishes)")
    r.add_argument("--cache", help="PTX cache folder (default $KAAS_CACHE or ~/.cache/kaas/ptx)")
    r.add_argument("-o", "--output", default="kaas.lock")
    r.set_defaults(run=cmd_resolve)
    d = sub.add_parser("download", help="fill the cache with a lock's artifacts")
    d.add_argument("lock")
    d.add_argument("--source", help="bundle folder or server URL (default: the lock's own source)")
    d.add_argument("--cache")
    d.set_defaults(run=cmd_download)
    v = sub.add_parser("verify", help="check that every locked artifact is cached with its sha256")
    v.add_argument("lock")
    v.add_argument("--cache")
    v.add_argument("--public-key", help="check the signed records against this key instead of the lock's own")
    v.set_defaults(run=cmd_verify)
    return run_cli(ap.parse_args(argv), "kaas-lock", also=(ValueError,))  # ValueError: e.g. an unknown --model


if __name__ == "__main__":
    sys.exit(main())
