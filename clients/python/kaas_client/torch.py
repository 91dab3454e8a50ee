"""Drop-in PyTorch calls that run verified kaas kernels where they beat cuBLAS, and torch
everywhere else.

    import kaas_client.torch as kt
    kt.use(bundle="kernels")          # or kt.use(lock="kaas.lock") -- offline, sha256-checked
    kt.patch(model)                   # every fp16 nn.Linear on CUDA now dispatches through kt.linear

    kt.use(service="http://host:8080", model=model, tokens=[1, 16], tune=True, save_lock="kaas.lock")

`matmul(a, b)` and `linear(x, weight, bias=None)` map the call to a kaas problem by its
exact shape (see `kaas_client.dispatch`), and launch the kernel only when the loaded
kernels (a lock, or a bundle read with the service's "beats the baselines" rule, for this
GPU's device class) have one. Anything else -- another dtype, strides, device, alignment,
or a problem with no winning kernel -- runs the plain torch call, so a patched model is
never wrong and never meaningfully slower. Each kind of fallback warns once
(`KaasFallbackWarning`); `strict=True` turns every fallback into a `FallbackError`.

Launch cost: a kernel is prepared once per device (PTX JIT, function, parameter buffer,
workspace) on first use, or up front by `prepare()` / `patch()`. The first call of each
kind (shapes, strides, dtypes, devices of the operands) goes through every check and
records its outcome; a later call of that kind is one dict lookup on those, the two
checks that depend on the call itself (16-byte alignment of the data, autograd), the
output allocation and the libcuda launch on torch's current stream -- or, where the
recorded outcome is torch, the torch call at once (still raising in strict mode). First use
inside a CUDA-graph capture cannot JIT, so it falls back (warned; strict: error): warm up
before capturing, as torch itself asks. Under `torch.compile` the kernel is the custom op
`kaas::mm` (with a fake implementation, so `fullgraph=True` traces without breaks, and an
autograd formula computed with torch, so training graphs work too).

Bias: `linear` adds the bias after the GEMM (one fp16 add), where cuBLASLt fuses it in the
fp32 epilogue; results differ from `F.linear` by at most one fp16 rounding.

Concurrency: one prepared kernel has one parameter buffer and one workspace per device:
do not run the same problem from two threads at once, nor, for a kernel with a workspace,
on two streams at once.
"""

from __future__ import annotations

import os
import threading
import types
import warnings
from pathlib import Path
from typing import Any, Optional, Union

try:
    import torch
    import torch.nn.functional as F
except ModuleNotFoundError as e:  # still a ModuleNotFoundError: callers may catch it
    raise ModuleNotFoundError(
        f"kaas_client.torch needs PyTorch ({e}): pip install 'kaas-client[torch]' (from a kaas checkout: pip install './clients/python[torch]'); "
        "without torch, kaas_client itself pulls kernels, reads bundles and writes locks",
        name=e.name,
    ) from e

from . import dispatch as dp
from .catalog import Catalog
from .errors import FallbackError, KaasError, LockError
from .kernel import Kernel
from .launcher import Prepared
from .locking import Lock
from .manifest import Problem

__all__ = [
    "KaasFallbackWarning", "KaasServiceWarning", "use", "tune_report", "reset", "prepare", "matmul", "linear", "patch", "unpatch", "status", "set_strict",
]

F16 = torch.float16
PathLike = Union[str, Path]


class KaasFallbackWarning(UserWarning):
    """A call ran plain torch instead of a kaas kernel (warned once per reason)."""


class _Slot:
    """One problem's kernel on one device: the Kernel until first use, then Prepared."""

    __slots__ = ("kernel", "prepared", "workspace", "lock")

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.prepared: Optional[Prepared] = None
        self.workspace: Optional[torch.Tensor] = None
        self.lock = threading.Lock()


class _State:
    def __init__(self) -> None:
        self.kernels: dict = {}  # (layout, m, n, k) -> Kernel, for `device_class`
        self.device_class: Optional[str] = None
        self.source = ""
        self.slots: dict = {}  # (device index, key) -> _Slot
        self.classes: dict = {}  # device index -> device class
        self.strict = os.environ.get("KAAS_STRICT", "") not in ("", "0")
        self.warned: set = set()
        # What a call of each kind comes to, for `linear` and `matmul` apart (the same
        # operands are another problem for each), for fp16 operands (others fall back at
        # the plan's first check). Key: (a.shape, a.stride(), b.shape, b.stride(),
        # a.device, b.device) -- with the dtypes, everything the plan and the kernel
        # table decide by, the data pointers aside. Value: (Prepared.run, output shape,
        # device, device index), or _TORCH where torch runs every such call. Only
        # outcomes that the key alone decides are kept (see `_KEYED` and `_run`); cleared
        # with the kernel table and the prepared kernels (`use`, `reset`).
        self.fast_linear: dict = {}
        self.fast_mm: dict = {}
        self.tune_report: Any = None  # the last `use(service=..., tune=True)`'s TuneReport

    def forget(self) -> None:
        """Drops the prepared kernels and every recorded outcome."""
        self.slots.clear()
        self.fast_linear.clear()
        self.fast_mm.clear()


_S = _State()


# --------------------------------------------------------------------------------------
# Configuration


def use(*, lock: Optional[PathLike] = None, bundle: Optional[PathLike] = None, service: Optional[str] = None,
        model: Any = None, tokens: Any = None, problems: Any = None, tune: bool = False, token: Optional[str] = None,
        save_lock: Optional[PathLike] = None, timeout: float = 3600.0, progress: Any = True, public_key: Any = None,
        cache: Optional[PathLike] = None, device: Any = None, strict: Optional[bool] = None,
        device_class: Optional[str] = None) -> int:
    """Chooses the kernels to dispatch to and returns how many there are.

    `lock`: a `kaas.lock.v1` file; the kernels come from the cache alone (`cache`, default
    `$KAAS_CACHE` or ~/.cache/kaas/ptx), every sha256 (and signed record) checked (a
    missing or altered artifact raises). `bundle`: a catalog folder such as the repo's
    `kernels/`, read as the service reads it, keeping what the service would serve for
    this GPU's device class. With neither, `$KAAS_LOCK` or `$KAAS_BUNDLE` is used.

    `service`: a kaas service URL. The problems are `problems` and/or those of `model`'s
    fp16 linears at `tokens` (`kaas_client.shapes`); with `tune=True` the service is first
    asked to tune the ones it lacks for this device class and the request is followed
    (`kaas_client.tuning.tune`: `token`, `timeout`, `progress`; the report is kept for
    `tune_report()`). The service then answers each problem by its own rule; the kernels
    are cached on disk, each sha256 and signed record checked (`public_key` pins the key),
    and `save_lock` writes the result as a lock for offline use. What the service cannot
    give -- it does not answer, refuses the tune for a quota, does not know this device
    class, or the model has no fp16 linear -- is one warning and torch for what is left
    (strict: the error).

    A lock for another device class than this GPU's is not used: a one-time warning and
    torch everywhere (strict: LockError). `device`: whose device class to match (default:
    current). `device_class`: treat this GPU as that class instead of its own -- for
    testing the kernels on a sibling GPU (e.g. an H200 with the H100-SXM catalog); a
    kernel's speedup was measured on its own class only."""
    if strict is not None:
        _S.strict = strict
    if service is None and (model is not None or problems is not None or tune or save_lock is not None):
        raise KaasError("kaas_client.torch.use: model=, problems=, tune= and save_lock= go with service=")
    if service is None:
        lock = lock if lock is not None else (None if bundle is not None else os.environ.get("KAAS_LOCK"))
        bundle = bundle if bundle is not None else (None if lock is not None else os.environ.get("KAAS_BUNDLE"))
        if lock is None and bundle is None:
            raise KaasError("kaas_client.torch.use: give lock=, bundle= or service= (or set KAAS_LOCK / KAAS_BUNDLE)")
    elif lock is not None or bundle is not None:
        raise KaasError("kaas_client.torch.use: give one of lock=, bundle= and service=")
    index = _device_index(device)
    if device_class is not None:
        _S.classes[index] = device_class
    here = _device_class(index)
    kernels: dict = {}
    if service is not None:
        loaded = _from_service(service, here, index, model=model, tokens=tokens, problems=problems, tune=tune, token=token,
                               save_lock=save_lock, timeout=timeout, progress=progress, public_key=public_key, cache=cache)
        source = str(service)
    elif lock is not None:
        lk = Lock.read(lock)
        if lk.device_class != here:
            msg = f"{lock} was resolved for {lk.device_class}; this GPU (cuda:{index}) is {here}: torch everywhere"
            if _S.strict:
                raise LockError(msg)
            _warn_once(dp.DEVICE_CLASS, msg)
            loaded: dict = {}
        else:
            loaded = lk.load(cache, public_key=public_key)
        source = str(lock)
    else:
        catalog = Catalog.from_tree(bundle)  # type: ignore[arg-type]
        loaded = {e.problem: Kernel.from_entry(e) for e in catalog.served(here)}
        source = str(bundle)
        if not loaded:
            msg = (f"{bundle} serves no kernel for {here} (cuda:{index}); it has {', '.join(catalog.device_classes()) or 'none'}"
                   f": torch everywhere")
            if _S.strict:
                raise LockError(msg)
            _warn_once(dp.DEVICE_CLASS, msg)
    cc = torch.cuda.get_device_capability(index) if loaded else None
    for p, k in loaded.items():
        if p.acc == "f32" and p.runs_on(cc):  # torch's fp16 matmul accumulates in fp32
            kernels.setdefault((p.layout, p.m, p.n, p.k), k)
    _S.kernels, _S.device_class, _S.source = kernels, here, source
    _S.forget()
    return len(kernels)


class KaasServiceWarning(UserWarning):
    """The service could not give what was asked (down, quota, unknown device class, a
    model without fp16 linears): the model runs torch where it has no kernel."""


def _service_fault(msg: str, error: Exception) -> None:
    """A fault on the way to a service's kernels: raised in strict mode, else warned."""
    if _S.strict:
        raise error
    warnings.warn(f"kaas: {msg}", KaasServiceWarning, stacklevel=4)


def _from_service(service: str, here: str, index: int, *, model: Any, tokens: Any, problems: Any, tune: bool,
                  token: Optional[str], save_lock: Optional[PathLike], timeout: float, progress: Any, public_key: Any,
                  cache: Optional[PathLike]) -> dict:
    """{Problem: Kernel} the service serves for `here`, tuned first if asked; {} (after a
    warning) where it cannot say."""
    from .errors import QuotaError, ServiceUnavailable, UnknownDeviceError
    from .locking import resolve
    from .shapes import NoLinearsError
    from .tuning import gather, tune as tune_request

    _S.tune_report = None
    try:
        todo = gather(problems, model, tokens)
    except NoLinearsError as e:
        _service_fault(f"{e}: torch everywhere", e)
        return {}
    try:
        if tune:
            try:
                _S.tune_report = tune_request(service, todo, device_class=here, token=token, timeout=timeout, progress=progress)
            except QuotaError as e:
                more = f" (retry after {e.retry_after:g} s)" if e.retry_after else ""
                _service_fault(f"the service refused the tuning request for a quota{more}: {e.detail or e.code}; "
                               f"using what it serves already", e)
        lk = resolve(todo, service, here, cache=cache, public_key=public_key)
    except UnknownDeviceError as e:
        known = ", ".join(e.known) or "none"
        _service_fault(f"the service at {service} does not know this GPU's device class {here} (cuda:{index}); "
                       f"it knows {known}: torch everywhere", e)
        return {}
    except ServiceUnavailable as e:
        _service_fault(f"{e}: torch everywhere", e)
        return {}
    if save_lock is not None:
        lk.write(save_lock)
    return lk.load(cache)


def tune_report() -> Any:
    """The TuneReport of the last `use(service=..., tune=True)`, or None."""
    return _S.tune_report


def reset() -> None:
    """Forgets every kernel (all calls run torch), device-class overrides and the
    warnings already given."""
    _S.kernels, _S.device_class, _S.source = {}, None, ""
    _S.forget()
    _S.tune_report = None
    _S.classes.clear()
    _S.warned.clear()


def set_strict(strict: bool = True) -> None:
    """Strict mode: every fallback raises FallbackError instead of running torch."""
    _S.strict = strict


def status() -> dict:
    """What is loaded: source, device class, kernel count, prepared kernels, warnings given."""
    return {"source": _S.source, "device_class": _S.device_class, "kernels": len(_S.kernels),
            "prepared": sum(1 for s in _S.slots.values() if s.prepared is not None), "strict": _S.strict,
            "fallbacks_warned": sorted(_S.warned)}


def problems() -> list:
    """The (layout, M, N, K) problems that have a kernel."""
    return sorted(_S.kernels)


def _device_index(device: Any) -> int:
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return d.index if d.index is not None else torch.cuda.current_device()


def _device_class(index: int) -> str:
    dc = _S.classes.get(index)
    if dc is None:
        dc = _S.classes[index] = dp.device_class(torch.cuda.get_device_name(index))
    return dc


def prepare(device: Any = None, where: Any = None) -> int:
    """JIT-loads and prepares kernels on a device now (all of them, or those whose
    (N, K) is in `where`, a set), so that no first call pays for it and CUDA-graph
    capture finds them ready. Returns how many are prepared."""
    index = _device_index(device)
    n = 0
    for key in _S.kernels:
        if where is None or (key[2], key[3]) in where:
            if _slot(index, key, capturing=False) is not None:
                n += 1
    return n


def _slot(index: int, key: tuple, capturing: Optional[bool] = None) -> Optional[_Slot]:
    """The prepared kernel for a problem on a device, preparing it on first use; None
    when there is no kernel (or it cannot be prepared now: inside a graph capture)."""
    slot = _S.slots.get((index, key))
    if slot is not None and slot.prepared is not None:
        return slot
    kernel = _S.kernels.get(key)
    if kernel is None:
        return None
    if _S.device_class != _device_class(index):
        _fallback(dp.DEVICE_CLASS, f"cuda:{index} is {_device_class(index)}, the kernels are for {_S.device_class}")
        return None
    if capturing is None:
        capturing = torch.cuda.is_current_stream_capturing()
    if capturing:
        _fallback(dp.UNPREPARED, str(kernel.problem))
        return None
    if slot is None:
        slot = _S.slots.setdefault((index, key), _Slot(kernel.__class__(kernel.manifest, kernel.ptx, view=kernel.view, source=kernel.source)))
    with slot.lock:
        if slot.prepared is None:
            k = slot.kernel
            with torch.cuda.device(index):  # load makes the device's context current; torch's is restored
                k.load(index)
            ws = 0
            if k.manifest.workspace_bytes:
                slot.workspace = torch.zeros(k.manifest.workspace_bytes, dtype=torch.uint8, device=torch.device("cuda", index))
                torch.cuda.synchronize(index)  # zeroed before any stream uses it
                ws = slot.workspace.data_ptr()
            slot.prepared = Prepared.from_kernel(k, ws)
    return slot


# --------------------------------------------------------------------------------------
# Fallbacks


def _warn_once(reason: str, detail: str) -> None:
    if reason not in _S.warned:
        _S.warned.add(reason)
        warnings.warn(f"kaas: running torch instead: {dp.describe(reason, detail)} (warned once per reason)",
                      KaasFallbackWarning, stacklevel=4)


def _fallback(reason: str, detail: str = "") -> None:
    """Records a fallback: raises in strict mode, warns once per reason otherwise."""
    if _S.strict:
        raise FallbackError(reason, f"kaas (strict): {dp.describe(reason, detail)}")
    _warn_once(reason, detail)


def _problem_text(key: tuple) -> str:
    layout, m, n, k = key
    return f"{layout} {m}x{n}x{k}"


# --------------------------------------------------------------------------------------
# Running


# Module-level names for what the hot path calls, so that each call is one global lookup.
_empty = torch.empty
_grad_enabled = torch.is_grad_enabled
_is_compiling = torch.compiler.is_compiling  # dynamo folds it by identity, alias or not
# torch's current stream on a device as a raw CUstream handle.
_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (lambda index: torch.cuda.current_stream(index).cuda_stream)

_TORCH = "torch"  # a recorded outcome: torch runs every call of this kind
_FAST_MAX = 4096  # recorded outcomes per table; a full table starts over
# Fallbacks that the key alone decides, for fp16 operands (not alignment: the pointers
# are not in the key; not a shape error: torch raises it; not a first use inside a
# capture: it passes).
_KEYED = frozenset((dp.DEVICE, dp.LAYOUT, dp.NO_KERNEL))


def _remember(table: dict, key: tuple, outcome: Any) -> None:
    if len(table) >= _FAST_MAX:
        table.clear()
    table[key] = outcome


def _fast(hit: tuple, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A recorded kernel call: the launch, or None where this call's own data rule it
    out (data not 16-byte aligned, autograd, a bias of another dtype or device); the
    full path then decides and, where it falls back, says why."""
    run, shape, device, index = hit
    ap, bp = a.data_ptr(), b.data_ptr()
    if (ap | bp) & 15:
        return None
    if bias is None:
        if _grad_enabled() and (a.requires_grad or b.requires_grad):
            return None
        out = _empty(*shape, dtype=F16, device=device)  # sizes as ints: torch parses them faster than a tuple
        run(ap, bp, out.data_ptr(), _stream(index))
        return out
    if bias.dtype is not F16 or bias.device != device or (_grad_enabled() and (a.requires_grad or b.requires_grad or bias.requires_grad)):
        return None
    out = _empty(*shape, dtype=F16, device=device)
    run(ap, bp, out.data_ptr(), _stream(index))
    return out.add_(bias)


def _launch(run: Any, a: torch.Tensor, b: torch.Tensor, shape: tuple, device: torch.device) -> torch.Tensor:
    """C (allocated in `shape`, which is M×N row-major whatever its rank) = A·B by the kernel."""
    c = _empty(*shape, dtype=F16, device=device)
    run(a.data_ptr(), b.data_ptr(), c.data_ptr(), _stream(device.index))
    return c


def _needs_grad(*ts: Any) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """`torch.matmul(a, b)`: a kaas kernel for fp16 CUDA a (…, K) row-major and b (K, N)
    row-major (`nn`) or the transpose view of a row-major (N, K) weight (`tn`), when one
    beats the baselines for that exact problem; torch otherwise."""
    if _is_compiling():
        return _traced(dp.plan_mm(a, b, F16, check_pointers=False), a, b, None, lambda: torch.matmul(a, b))
    key = None
    # The recorded-outcome lookup, written out here and in `linear` rather than shared:
    # it is the whole hot path, and a helper call would add a Python frame to every call.
    if a.dtype is F16 and b.dtype is F16:  # else the plan says DTYPE at its first check
        key = (a.shape, a.stride(), b.shape, b.stride(), a.device, b.device)
        hit = _S.fast_mm.get(key)
        if hit is not None:
            if hit is _TORCH:
                if not _S.strict:
                    return torch.matmul(a, b)
            else:
                out = _fast(hit, a, b, None)
                if out is not None:
                    return out
    plan = dp.plan_mm(a, b, F16)
    if plan.__class__ is str:
        if plan != dp.SHAPE:  # shape errors are torch's to report
            _fallback(plan)  # type: ignore[arg-type]
        if key is not None and plan in _KEYED:
            _remember(_S.fast_mm, key, _TORCH)
        return torch.matmul(a, b)
    return _run(plan, a, b, None, lambda: torch.matmul(a, b), _S.fast_mm, key)  # type: ignore[arg-type]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`: the `tn` kaas kernel for M = x.numel() / K,
    N = out_features, K = in_features when one beats the baselines; the bias is added
    after. torch otherwise."""
    if _is_compiling():
        plan_t = dp.plan_linear(x, weight, F16, check_pointers=False)
        if bias is not None and plan_t.__class__ is not str and (bias.dtype is not F16 or bias.device != x.device):
            plan_t = dp.DTYPE
        return _traced(plan_t, x, weight, bias, lambda: F.linear(x, weight, bias))
    key = None
    if x.dtype is F16 and weight.dtype is F16:  # else the plan says DTYPE at its first check
        key = (x.shape, x.stride(), weight.shape, weight.stride(), x.device, weight.device)
        hit = _S.fast_linear.get(key)
        if hit is not None:
            if hit is _TORCH:
                if not _S.strict:
                    return F.linear(x, weight, bias)
            else:
                out = _fast(hit, x, weight, bias)
                if out is not None:
                    return out
    plan = dp.plan_linear(x, weight, F16)
    if plan.__class__ is str:
        if plan != dp.SHAPE:
            _fallback(plan)  # type: ignore[arg-type]
        if key is not None and plan in _KEYED:
            _remember(_S.fast_linear, key, _TORCH)
        return F.linear(x, weight, bias)
    if bias is not None and (bias.dtype is not F16 or bias.device != x.device):  # this call's bias alone: not recorded
        _fallback(dp.DTYPE if bias.dtype is not F16 else dp.DEVICE)
        return F.linear(x, weight, bias)
    return _run(plan, x, weight, bias, lambda: F.linear(x, weight, bias), _S.fast_linear, key)  # type: ignore[arg-type]


def _run(plan: dp.Plan, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], plain: Any,
         table: dict, key: Any) -> torch.Tensor:
    """A planned call: the kernel (prepared on first use) or, without one, torch; the
    outcome is recorded under `key` in `table` where the key alone decides it."""
    device = a.device
    slot = _S.slots.get((device.index, plan.key))
    if slot is None or slot.prepared is None:
        slot = _slot(device.index, plan.key)
        if slot is None:
            if plan.key in _S.kernels:  # device class mismatch or capture: _slot warned
                return plain()
            _fallback(dp.NO_KERNEL, _problem_text(plan.key))
            _remember(table, key, _TORCH)
            return plain()
    _remember(table, key, (slot.prepared.run, plan.out_shape, device, device.index))  # type: ignore[union-attr]
    if _needs_grad(a, b, bias):  # autograd through the op's formula
        out = torch.ops.kaas.mm(plan.a, plan.b, plan.key[0] == "tn").view(plan.out_shape)
    else:
        out = _launch(slot.prepared.run, plan.a, plan.b, plan.out_shape, device)  # type: ignore[union-attr]
    if bias is not None:
        out = out + bias if _needs_grad(bias, out) else out.add_(bias)
    return out


def _has_kernel_impl(index: int, key: tuple) -> bool:
    return key in _S.kernels and _S.device_class == _device_class(index)


# Traced as a constant: the kernel table is fixed while a graph runs (call `use` before compiling).
_has_kernel = getattr(torch.compiler, "assume_constant_result", None) or torch._dynamo.assume_constant_result
_has_kernel = _has_kernel(_has_kernel_impl)


def _traced(plan: Any, a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor], plain: Any) -> torch.Tensor:
    """Under torch.compile: the op where the static shape has a kernel, else torch (no
    warnings: they would break the graph; the op re-checks pointers when it runs)."""
    if plan.__class__ is str or not all(isinstance(v, int) for v in plan.key[1:]):
        return plain()
    if not _has_kernel(a.device.index, plan.key):
        return plain()
    out = torch.ops.kaas.mm(plan.a, plan.b, plan.key[0] == "tn")
    if bias is not None:
        out = out + bias
    return out.view(plan.out_shape)


# --------------------------------------------------------------------------------------
# The custom op: kaas::mm(a (M, K), b (K, N) or, transposed, (N, K)) -> (M, N)


@torch.library.custom_op("kaas::mm", mutates_args=())
def _kaas_mm(a: torch.Tensor, b: torch.Tensor, b_transposed: bool) -> torch.Tensor:
    """C = A·B with B stored (N, K) when `b_transposed` (layout tn), else (K, N) (nn):
    the kaas kernel when one is prepared for the problem here, else torch."""
    plain = (lambda: torch.matmul(a, b.t())) if b_transposed else (lambda: torch.matmul(a, b))
    if a.device.type != dp.ACCELERATOR or a.dtype is not F16 or b.dtype is not F16 or not a.is_contiguous() or not b.is_contiguous():
        return plain()
    m, k = a.shape
    n = b.shape[0] if b_transposed else b.shape[1]
    key = ("tn" if b_transposed else "nn", m, n, k)
    if a.data_ptr() % 16 or b.data_ptr() % 16:
        _fallback(dp.ALIGNMENT)
        return plain()
    slot = _slot(a.device.index, key)
    if slot is None:
        return plain()
    return _launch(slot.prepared.run, a, b, (m, n), a.device)  # type: ignore[union-attr]


@_kaas_mm.register_fake
def _kaas_mm_fake(a: torch.Tensor, b: torch.Tensor, b_transposed: bool) -> torch.Tensor:
    return a.new_empty((a.shape[0], b.shape[0] if b_transposed else b.shape[1]))


def _mm_setup(ctx: Any, inputs: tuple, output: Any) -> None:
    a, b, t = inputs
    ctx.save_for_backward(a, b)
    ctx.b_transposed = t


def _mm_backward(ctx: Any, grad: torch.Tensor) -> tuple:
    a, b = ctx.saved_tensors
    ga = gb = None
    if ctx.b_transposed:  # C = A·Bsᵀ, Bs (N, K)
        if ctx.needs_input_grad[0]:
            ga = grad @ b
        if ctx.needs_input_grad[1]:
            gb = grad.t() @ a
    else:  # C = A·B, B (K, N)
        if ctx.needs_input_grad[0]:
            ga = grad @ b.t()
        if ctx.needs_input_grad[1]:
            gb = a.t() @ grad
    return ga, gb, None


_kaas_mm.register_autograd(_mm_backward, setup_context=_mm_setup)


# --------------------------------------------------------------------------------------
# Patching models


def _eligible(m: Any) -> bool:
    w = getattr(m, "weight", None)
    return isinstance(m, torch.nn.Linear) and isinstance(w, torch.Tensor) and w.dtype is F16 and w.is_cuda


def _shapes() -> set:
    """(N, K) of every loaded kernel: a layer of another shape can never use one."""
    return {(key[2], key[3]) for key in _S.kernels}


def _linear_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self.weight, self.bias)


def patch(model: torch.nn.Module, *, prepare_kernels: bool = True, every_layer: bool = False) -> torch.nn.Module:
    """Makes every eligible `nn.Linear` in `model` run `linear` (the instance's forward is
    replaced; the class is untouched) and, unless `prepare_kernels=False`, prepares now
    every loaded kernel whose (N, K) one of them has. Eligible: fp16 weights on CUDA and
    -- unless `every_layer=True` -- an (out_features, in_features) that some loaded kernel
    has, so that layers no kernel can serve keep torch's forward and pay nothing (call
    `use` first). Returns the model."""
    shapes = {}
    served = _shapes()
    for m in model.modules():
        if _eligible(m) and not hasattr(m, "_kaas_patched") and (every_layer or (m.out_features, m.in_features) in served):
            m._kaas_patched = m.__dict__.get("forward")  # type: ignore[assignment]  # an instance override to restore
            m.forward = types.MethodType(_linear_forward, m)  # type: ignore[method-assign]
            shapes[(m.out_features, m.in_features)] = m.weight.device
    if prepare_kernels:
        for device in set(shapes.values()):
            prepare(device, where=set(shapes))
    return model


def unpatch(model: torch.nn.Module) -> torch.nn.Module:
    """Undoes `patch`: each patched layer gets its own forward back."""
    for m in model.modules():
        if hasattr(m, "_kaas_patched"):
            original = m.__dict__.pop("_kaas_patched")
            if original is None:
                m.__dict__.pop("forward", None)
            else:
                m.forward = original  # type: ignore[method-assign]
    return model


def patched(model: torch.nn.Module) -> list:
    """Names of the layers `patch` swapped."""
    return [name for name, m in model.named_modules() if hasattr(m, "_kaas_patched")]


def problem_key(problem: Problem) -> tuple:
    """A Problem's dispatch key (layout, M, N, K)."""
    return (problem.layout, problem.m, problem.n, problem.k)
