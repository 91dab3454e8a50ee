"""Catalog bundles read offline, answered by the service's own rule.

A bundle is `index.json` (or `index.json.gz`: large baseline tables ship compressed) plus
`ptx/<sha256>.ptx`, format `kaas.catalog.v1` (src/catalog/bundle.rs). The service imports
`kernels/` and then every sub-folder holding an index, in name order; a later entry for the
same (problem, device class) replaces an earlier one, and the newest baseline per
(library, layout, mode) is the one that counts. `Catalog.from_tree` reads the same folders
in the same order so that an offline answer is the answer the service would give.

The rule (src/catalog/mod.rs `best_kernel`): among the entries for the problem (of one
device class, or of any, fastest graph-mode median first, unbenchmarked last), the first
one is served unless its graph-mode speedup table exists, is not empty, and has some
baseline it does not beat (a value below SERVE_MARGIN) *and* a graph-mode baseline was measured for
the problem on that device class: then the answer is `baseline_faster`, naming the fastest
graph-mode baseline to use instead. No entry at all is `kernel_not_found`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Union

from .bundle import has_index, read_index
from .devices import resolve_device_class
from .errors import IntegrityError, KaasError, NoKernelError
from .manifest import Problem

# The speedup key kaas ranks against (AUTOTUNE_MAX in src/catalog/mod.rs).
AUTOTUNE_MAX = "cublaslt_autotune_max"
# How much faster than a baseline a kernel must measure to beat it (SERVE_MARGIN in
# src/catalog/mod.rs): the benchmark's resolution.
SERVE_MARGIN = 1.01
# The regime named for figures timed before regimes were (LEGACY_REGIME in
# src/catalog/mod.rs): a rotation over three buffer sets.
LEGACY_REGIME = "rotation_3_sets"

PathLike = Union[str, Path]


def bundle_dirs(path: PathLike) -> list[Path]:
    """The folders the service imports for a tree: the folder itself if it has an index,
    then each direct sub-folder with one, in name order."""
    p = Path(path)
    if not p.is_dir():
        raise KaasError(f"{p}: no such catalog folder")
    dirs = [p] if has_index(p) else []
    dirs += sorted(d for d in p.iterdir() if d.is_dir() and has_index(d))
    if not dirs:
        raise KaasError(f"{p}: no catalog bundle here or directly under it")
    return dirs


def beats_all(speedups: Any) -> Optional[bool]:
    """The service's `beats_all`: True when every value of a graph-mode speedup table is a
    number of at least SERVE_MARGIN, False when one is not, None when there is no (or an
    empty) table."""
    if not isinstance(speedups, dict) or not speedups:
        return None
    return all(_number(v) is not None and _number(v) >= SERVE_MARGIN for v in speedups.values())  # type: ignore[operator]


def _number(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def graph_speedups(entry: dict) -> Optional[dict]:
    """An entry's speedup table as the service judges it (`ranked_speedups` in
    src/catalog/mod.rs), or None when it was not benchmarked: graph mode's, each baseline's
    value no higher than the `paced` mode's where the benchmark timed that (large
    problems: a kernel must win at the clocks a layer holds as well as back to back)."""
    s = (entry.get("run") or {}).get("speedups")
    g = s.get("graph") if isinstance(s, dict) else None
    if not isinstance(g, dict):
        return None
    paced = s.get("paced")
    if not isinstance(paced, dict):
        return g
    capped = dict(g)
    for name, x in g.items():
        p = _number(paced.get(name))
        if _number(x) is not None and p is not None:
            capped[name] = min(float(x), p)
    return capped


def graph_median_us(entry: dict) -> float:
    """An entry's graph-mode median (µs); infinity when unbenchmarked (sorts last)."""
    t = (entry.get("run") or {}).get("timings")
    g = t.get("graph") if isinstance(t, dict) else None
    v = _number(g.get("median_us")) if isinstance(g, dict) else None
    return v if v is not None else math.inf


@dataclass
class CatalogEntry:
    """One served (problem, device class) entry and the bundle folder its PTX is in."""

    problem: Problem
    device_class: str
    record: dict
    bundle: Path

    @property
    def sha256(self) -> str:
        return self.record["artifact"]

    @property
    def ptx_path(self) -> Path:
        return self.bundle / "ptx" / f"{self.sha256}.ptx"

    @property
    def speedups(self) -> Optional[dict]:
        return graph_speedups(self.record)

    @property
    def speedup(self) -> Optional[float]:
        """Graph-mode speedup over cuBLASLt-autotune-max, the figure kaas ranks by."""
        s = self.speedups
        return _number(s.get(AUTOTUNE_MAX)) if s else None

    @property
    def worst_speedup(self) -> Optional[float]:
        """The smallest graph-mode speedup over any baseline (at least SERVE_MARGIN for a served entry
        that was benchmarked)."""
        s = self.speedups
        vals = [v for v in (_number(x) for x in s.values()) if v is not None] if s else []
        return min(vals) if vals else None

    def read_ptx(self) -> str:
        """The entry's PTX as the bundle files it (`Kernel.from_entry` checks it against
        the sha256 it is filed under)."""
        try:
            return self.ptx_path.read_text(encoding="utf-8")
        except OSError as e:
            raise KaasError(f"{self.ptx_path}: {e.strerror or e}") from None


@dataclass
class Catalog:
    """Bundles merged as the service imports them; `lookup` answers as `GET /v1/kernels`."""

    entries: dict = field(default_factory=dict)  # (Problem, device class) -> CatalogEntry
    baselines: dict = field(default_factory=dict)  # (problem tuple, device class) -> {(library, layout, mode): record}
    tunes: dict = field(default_factory=dict)  # (problem tuple, device class) -> the tune's final state
    classes: set = field(default_factory=set)  # every device class the bundles name
    sources: list = field(default_factory=list)

    @classmethod
    def from_tree(cls, path: PathLike) -> "Catalog":
        """`kernels/` as the service imports it: the folder's own bundle, then each
        sub-folder bundle in name order (e.g. baselines-h100, baselines-h200, h100)."""
        return cls.from_bundles(bundle_dirs(path))

    @classmethod
    def from_bundles(cls, dirs: Iterable[PathLike]) -> "Catalog":
        cat = cls()
        for d in dirs:
            cat.add_bundle(d)
        return cat

    def add_bundle(self, path: PathLike) -> None:
        """Merges one bundle: its entries replace earlier ones of the same (problem,
        device class); its baselines replace earlier ones of the same key."""
        p = Path(path)
        index = read_index(p)
        for i, e in enumerate(index.get("entries") or []):
            try:
                problem = Problem.from_dict(e["problem"])
                sha = e["artifact"]
                dc = e["device_class"]
            except (KeyError, TypeError) as err:
                raise KaasError(f"{p}: entries[{i}] is malformed ({err})") from None
            if not isinstance(sha, str) or not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise IntegrityError(f"{p}: entries[{i}].artifact `{sha}` is not a sha256")
            if (e.get("run") or {}).get("verdict") != "pass":
                continue  # the service refuses such a bundle; never serve one offline
            self.entries[(problem, dc)] = CatalogEntry(problem, dc, e, p)
            self.classes.add(dc)
        for b in index.get("baselines") or []:
            try:  # 24,000 rows a bundle: keyed by a plain tuple, no Problem objects
                key = (_pkey(b["problem"]), b["device_class"])
                self.baselines.setdefault(key, {})[(b["library"], b["layout"], b["mode"])] = b
            except (KeyError, TypeError) as err:
                raise KaasError(f"{p}: a baseline is malformed ({err})") from None
            self.classes.add(key[1])
        # A finished tune is the class's answer as much as an entry is: one that ended
        # `baseline_faster` makes the service answer so where no entry exists.
        for t in index.get("tunes") or []:
            try:
                self.tunes[(_pkey(t["problem"]), t["device_class"])] = t["state"]
            except (KeyError, TypeError) as err:
                raise KaasError(f"{p}: a tune is malformed ({err})") from None
        for d in index.get("device_classes") or []:
            if isinstance(d, dict) and isinstance(d.get("name"), str):
                self.classes.add(d["name"])
        self.sources.append(p)

    def device_classes(self) -> list[str]:
        return sorted({dc for _, dc in self.entries})

    def fastest_baseline(self, problem: Problem, device_class: str) -> Optional[dict]:
        """The fastest graph-mode baseline measured for a problem on a device class."""
        rows = [b for b in self.baselines.get((_pkey(problem.to_dict()), device_class), {}).values() if b.get("mode") == "graph"]
        rows = [b for b in rows if _number(b.get("median_us")) is not None]
        return min(rows, key=lambda b: b["median_us"], default=None)

    def device_class(self, device: Optional[str]) -> Optional[str]:
        """The class these bundles name that `device` spells (`H100`, `h100`, `NVIDIA H100
        80GB HBM3` -> `H100-SXM`), as the service resolves `?device=`; UnknownDeviceError
        (`unknown_device`) for a class they never measured."""
        if device is None:
            return None
        return resolve_device_class(device, self.classes, self._where())

    def _where(self) -> str:
        return "bundle:" + ",".join(str(s) for s in self.sources)

    def candidates(self, problem: Union[Problem, str], device: Optional[str] = None) -> list:
        """The merged entries for a problem (of one device class, or of any), fastest
        graph-mode median first, unbenchmarked last: as filed, before the service's rule."""
        problem = _problem(problem)
        device = self.device_class(device)
        classes = [device] if device is not None else sorted({dc for _, dc in self.entries})
        out = [self.entries[(problem, dc)] for dc in classes if (problem, dc) in self.entries]
        out.sort(key=lambda e: (graph_median_us(e.record), e.device_class))
        return out

    def lookup(self, problem: Union[Problem, str], device: Optional[str] = None) -> CatalogEntry:
        """The entry the service would serve, or NoKernelError with the code the service
        would answer (`kernel_not_found` or `baseline_faster`) and its `use_instead`.
        `problem` is a Problem or its path (`sm_90/f32/tn/4096x4096x4096`); `device` any
        spelling the service takes."""
        problem = _problem(problem)
        device = self.device_class(device)
        where = self._where()
        candidates = self.candidates(problem, device)
        if not candidates:
            use = None
            pk = _pkey(problem.to_dict())
            devices = [device] if device is not None else sorted({dc for (p, dc) in self.baselines if p == pk})
            best: Optional[tuple] = None
            for d in devices:
                b = self.fastest_baseline(problem, d)
                if b is not None and (best is None or b["median_us"] < best[1]["median_us"]):
                    best = (d, b)
            if best is not None:
                use = _baseline_view(best[1])
            on = f" on {device}" if device else ""
            tuned = [d for (p, d), state in self.tunes.items() if p == pk and state == "baseline_faster" and (device is None or d == device)]
            if use is not None and tuned:
                raise NoKernelError(404, {"code": "baseline_faster",
                                          "detail": f"the tuned kernel does not beat the baselines for {problem}{on}: use {use['library']} ({use['layout']} layout)",
                                          "use_instead": use, "device_class": best[0]}, where)
            raise NoKernelError(404, {"code": "kernel_not_found", "detail": f"no catalog kernel for {problem}{on}",
                                      "use_instead": use, "device_class": best[0] if best else device}, where)
        entry = candidates[0]
        if beats_all(entry.speedups) is False:
            b = self.fastest_baseline(problem, entry.device_class)
            if b is not None:
                raise NoKernelError(404, {"code": "baseline_faster",
                                          "detail": f"{b['library']} ({b['layout']}) is faster than every kernel for {problem} on {entry.device_class}",
                                          "use_instead": _baseline_view(b), "device_class": entry.device_class}, where)
        return entry

    def served(self, device: Optional[str] = None) -> list[CatalogEntry]:
        """Every entry the rule serves (of one device class, if given)."""
        device = self.device_class(device)
        out = []
        for problem in sorted({p for p, dc in self.entries if device is None or dc == device}, key=lambda p: p.path):
            try:
                out.append(self.lookup(problem, device))
            except NoKernelError:
                pass
        return out


def _problem(p: Union[Problem, str]) -> Problem:
    """A Problem, or one read from its path (`sm_90/f32/tn/4096x4096x4096`)."""
    if isinstance(p, Problem):
        return p
    if isinstance(p, str):
        return Problem.parse(p)
    raise KaasError(f"a problem is a kaas_client.Problem or its path (e.g. sm_90/f32/tn/4096x4096x4096), not {type(p).__name__}")


def _pkey(d: dict) -> tuple:
    """(arch, acc, layout, m, n, k) of a problem object: the baselines' key."""
    return (d["arch"], d["acc"], d["layout"], d["m"], d["n"], d["k"])


def _baseline_view(b: dict) -> dict:
    """The service's BaselineView of a baseline record (what `use_instead` carries)."""
    return {k: b.get(k) for k in ("library", "layout", "mode", "median_us", "timing", "config")}
