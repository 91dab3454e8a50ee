"""Talking to a kaas service over HTTP (stdlib urllib only)."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Optional

from .errors import ApiError, IntegrityError, NoKernelError, QuotaError, ServiceUnavailable, UnknownDeviceError
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
    return request(url, accept=accept, timeout=timeout)[1]


def request(url: str, *, accept: str = "application/json", timeout: float = 30.0, body: Optional[dict] = None,
            token: Optional[str] = None) -> tuple:
    """(status, body bytes) of a GET, or of a POST of `body` as JSON; `token` is sent as a
    bearer token. An error answer raises ApiError from its problem+json (NoKernelError,
    UnknownDeviceError, QuotaError where the code says so); no answer at all raises
    ServiceUnavailable."""
    headers = {"Accept": accept, "User-Agent": USER_AGENT}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as e:
        raise _api_error(e, url) from None
    except urllib.error.URLError as e:
        raise ServiceUnavailable(f"{url}: the kaas service does not answer ({e.reason})") from None
    except (OSError, http.client.HTTPException) as e:  # a timeout or a dropped connection mid-answer
        raise ServiceUnavailable(f"{url}: the kaas service does not answer ({e or type(e).__name__})") from None


def _api_error(e: urllib.error.HTTPError, url: str) -> ApiError:
    try:
        raw = e.read()
    except (OSError, http.client.HTTPException):
        raw = b""
    try:
        problem = json.loads(raw)
        if not isinstance(problem, dict):
            raise ValueError
    except ValueError:
        problem = {"detail": raw.decode("utf-8", "replace")[:500]}
    code = problem.get("code")
    if e.code == 404 and code in ("kernel_not_found", "baseline_faster"):
        return NoKernelError(e.code, problem, url)
    if e.code == 400 and code in ("unknown_device", "ambiguous_device"):
        return UnknownDeviceError(e.code, problem, url)
    if e.code == 429:
        try:
            retry = float(e.headers.get("Retry-After", "")) if e.headers is not None else None
        except ValueError:
            retry = None
        return QuotaError(e.code, problem, url, retry)
    return ApiError(e.code, problem, url)


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
