"""Talking to a kaas service over HTTP (stdlib urllib only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from .errors import ApiError, IntegrityError, KaasError, NoKernelError
from .kernel import Kernel
from .manifest import Manifest, Problem

USER_AGENT = "kaas-client-python/0.2"


def kernel_url(base_url: str, problem: Problem, device: Optional[str] = None, ptx: bool = False) -> str:
    """`{base}/v1/kernels/{arch}/{acc}/{layout}/{m}x{n}x{k}[/ptx][?device=...]`."""
    url = f"{base_url.rstrip('/')}/v1/kernels/{problem.path}" + ("/ptx" if ptx else "")
    if device is not None:
        url += "?" + urllib.parse.urlencode({"device": device})
    return url


def _get(url: str, accept: str, timeout: float) -> bytes:
    req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.read()
    except urllib.error.HTTPError as e:
        body = e.read()
        try:
            problem = json.loads(body)
            if not isinstance(problem, dict):
                raise ValueError
        except ValueError:
            problem = {"detail": body.decode("utf-8", "replace")[:500]}
        cls = NoKernelError if e.code == 404 and problem.get("code") in ("kernel_not_found", "baseline_faster") else ApiError
        raise cls(e.code, problem, url) from None
    except urllib.error.URLError as e:
        raise KaasError(f"{url}: {e.reason}") from None


def get_json(url: str, timeout: float = 30.0):
    return json.loads(_get(url, "application/json", timeout))


def pull(
    base_url: str,
    *,
    device: Optional[str],
    m: int,
    n: int,
    k: int,
    acc: str = "f32",
    layout: str = "tn",
    arch: str = "sm_90",
    timeout: float = 30.0,
) -> Kernel:
    """The catalog's best kernel for a problem on a device class (e.g. `H100-SXM`; None:
    any). Raises NoKernelError (with `use_instead`) when there is none or a cuBLAS
    baseline is faster; IntegrityError when the PTX is not the artifact named."""
    problem = Problem(arch, acc, layout, m, n, k)
    url = kernel_url(base_url, problem, device)
    view = get_json(url, timeout)
    manifest = Manifest.from_dict(view["manifest"])
    if manifest.problem != problem:
        raise IntegrityError(f"{url}: asked for {problem}, the manifest is for {manifest.problem}")
    artifact = view["artifact"]
    ptx_url = urllib.parse.urljoin(base_url if base_url.endswith("/") else base_url + "/", artifact["url"])
    ptx = _get(ptx_url, "text/plain", timeout).decode("utf-8")
    return Kernel(manifest, ptx, sha256=artifact["sha256"], view=view, source=ptx_url)
