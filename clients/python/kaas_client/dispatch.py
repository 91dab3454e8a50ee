"""Which kaas problem a torch call is, or why it is none: the decisions of
`kaas_client.torch`, kept free of torch (tensors are duck-typed) so that they are tested
with the standard library alone and cost a handful of attribute reads per call.

kaas computes C (M×N, row-major) = A (M×K, row-major) · B. Layout `nn`: B is K×N
row-major; `tn`: B is stored N×K row-major, which is exactly `nn.Linear`'s weight
(out_features × in_features). So `linear(x, W)` with x flattened to (M, K) is `tn`
M×N×K with N = out_features, K = in_features, and `matmul(a, b)` is `nn` when b is a
row-major K×N tensor, `tn` when b is the transpose view `W.t()` of a row-major N×K one.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Union

# The device type kernels run on. (The CPU tests set "cpu" to drive the kernel path of
# kaas_client.torch through a fake launcher; nothing else should change it.)
ACCELERATOR = "cuda"

# Why a call is not sent to a kaas kernel. Each is warned about once (or raised, in strict mode).
DTYPE = "dtype"            # not float16 (kaas serves fp16 in, fp16 out, fp32 accumulate)
DEVICE = "device"          # not a CUDA tensor, or operands on different devices
LAYOUT = "layout"          # strides that are neither row-major nor a transposed row-major weight
ALIGNMENT = "alignment"    # data not 16-byte aligned (a tensor map, and vector loads, need it)
SHAPE = "shape"            # empty, or shapes that do not multiply (torch raises its own error)
NO_KERNEL = "no_kernel"    # no verified kernel that beats the baselines for this exact problem
UNPREPARED = "unprepared"  # first use of a kernel inside a CUDA-graph capture (JIT is not capturable)
DEVICE_CLASS = "device_class"  # the lock/bundle is for another device class than this GPU
REASONS = (DTYPE, DEVICE, LAYOUT, ALIGNMENT, SHAPE, NO_KERNEL, UNPREPARED, DEVICE_CLASS)


class Plan(NamedTuple):
    """A call mapped to a kaas problem: `key` = (layout, M, N, K); `a` is A viewed as
    M×K; `b` is B's row-major storage (K×N for nn, N×K for tn); `out_shape` is the shape
    torch would return. (A NamedTuple: torch.compile traces its creation.)"""

    key: tuple
    a: Any
    b: Any
    out_shape: tuple


def plan_mm(a: Any, b: Any, f16: Any, check_pointers: bool = True) -> Union[Plan, str]:
    """`torch.matmul(a, b)` for a (…, K) and a 2-D b (K, N) as a kaas problem, or the
    reason it is not one. `check_pointers=False` skips the alignment test (under
    torch.compile tracing there are no pointers yet; the op checks them when it runs)."""
    if a.dtype is not f16 or b.dtype is not f16:
        return DTYPE
    if a.device.type != ACCELERATOR or b.device != a.device:
        return DEVICE
    if a.dim() < 2 or b.dim() != 2:
        return LAYOUT
    k, n = b.shape[0], b.shape[1]
    if a.shape[-1] != k or k == 0 or n == 0:
        return SHAPE
    if not a.is_contiguous():
        return LAYOUT
    if b.is_contiguous():
        layout, store = "nn", b
    elif tuple(b.stride()) == (1, k):  # b = W.t() with W row-major N×K
        layout, store = "tn", b.t()
    else:
        return LAYOUT
    return _plan(layout, a, store, n, k, check_pointers)


def plan_linear(x: Any, weight: Any, f16: Any, check_pointers: bool = True) -> Union[Plan, str]:
    """`F.linear(x, weight)` (no bias) for x (…, K) and weight (N, K) as a `tn` problem."""
    if x.dtype is not f16 or weight.dtype is not f16:
        return DTYPE
    if x.device.type != ACCELERATOR or weight.device != x.device:
        return DEVICE
    if weight.dim() != 2 or x.dim() < 1:
        return LAYOUT
    n, k = weight.shape[0], weight.shape[1]
    if x.shape[-1] != k or k == 0 or n == 0:
        return SHAPE
    if not x.is_contiguous() or not weight.is_contiguous():
        return LAYOUT
    return _plan("tn", x, weight, n, k, check_pointers)


def _plan(layout: str, a: Any, store: Any, n: int, k: int, check_pointers: bool) -> Union[Plan, str]:
    """The checks common to both calls once the layout is known: rows, alignment."""
    m = a.numel() // k
    if m == 0:
        return SHAPE
    if check_pointers and (a.data_ptr() % 16 or store.data_ptr() % 16):
        return ALIGNMENT
    a2 = a if a.dim() == 2 else a.reshape(m, k)
    return Plan((layout, m, n, k), a2, store, tuple(a.shape[:-1]) + (n,))


def describe(reason: str, detail: str = "") -> str:
    """The one-line text of a fallback (the warning, or the strict-mode error)."""
    text = {
        DTYPE: "operands are not torch.float16",
        DEVICE: "operands are not on one CUDA device",
        LAYOUT: "operands are neither row-major nor a transposed row-major weight",
        ALIGNMENT: "operand data is not 16-byte aligned",
        SHAPE: "the operands are empty or do not multiply",
        NO_KERNEL: "no verified kaas kernel beats the baselines for this problem",
        UNPREPARED: "the kernel was first needed inside a CUDA-graph capture (run once before capturing, or call kaas_client.torch.prepare())",
        DEVICE_CLASS: "the kernels were chosen for another device class",
    }.get(reason, reason)
    return f"{text}{': ' + detail if detail else ''}"


def device_class(name: str) -> str:
    """The device class of a GPU model name, as the service names it (src/gpu/device.rs):
    `NVIDIA H100 80GB HBM3` → `H100-SXM`, `NVIDIA H100 PCIe` → `H100-PCIe`,
    `NVIDIA H100 NVL` → `H100-NVL`, `NVIDIA H200` → `H200`, `NVIDIA A100-SXM4-80GB` →
    `A100-SXM`; anything else a slug of its name (`NVIDIA GeForce RTX 4090` →
    `GeForce-RTX-4090`)."""
    words = [w for w in re.split(r"[^A-Za-z0-9]", name.upper()) if w]
    for model in ("H100", "H200", "H800", "H20", "A100", "A800", "B200", "B100", "GH200", "GB200"):
        if model not in words:
            continue
        if "PCIE" in words:
            return f"{model}-PCIe"
        if "NVL" in words:
            return f"{model}-NVL"
        if model != "H200" and any(w.startswith("SXM") or w in ("HBM3", "HBM2E") for w in words):
            return f"{model}-SXM"
        return model
    rest = name
    while rest.startswith("NVIDIA"):
        rest = rest[len("NVIDIA"):]
    return re.sub(r"[^A-Za-z0-9]+", "-", rest).strip("-") or "unknown"
