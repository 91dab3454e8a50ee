"""The GEMM problems of any PyTorch model, read from its layers without running it.

    import torch, kaas_client as kaas
    with torch.device("meta"):                       # no memory, no GPU, no weights
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float16)
    problems = kaas.linear_problems(model, tokens=[1, 16, 512])

Every fp16 `nn.Linear` (and subclass) computes `x @ W.T` with W stored out×in row-major:
kaas problem `tn` M×N×K with M = the rows of x (the token count), N = out_features,
K = in_features -- the problem `kaas_client.torch.linear` and `patch` dispatch by. Each
layer is read as it is: a fused projection (Phi-3's `qkv_proj`, `gate_up_proj`) is one
problem of its fused width, as it runs. Problems are deduplicated (the 32 decoder layers
of a model share their shapes), in the order the layers first appear, per token count.

Only shapes are read, so a model built on the meta device is enough. M is the token
count for every layer: a layer that sees fewer rows when the model runs (an MoE expert,
an LM head that keeps the last position only) is listed at the full count.
"""

from __future__ import annotations

import fnmatch
import warnings
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .errors import KaasError
from .manifest import MAX_DIM, Problem


class NoLinearsError(KaasError):
    """The model has no fp16 `nn.Linear` that a kaas kernel could run (none at all, or
    all of another dtype); the message says which."""


class ShapeWarning(UserWarning):
    """Layers left out of the problems (a dimension kaas cannot represent)."""


@dataclass(frozen=True)
class LinearShape:
    """One distinct (out_features, in_features) of a model's fp16 linears and the layers
    that have it (module names, in model order)."""

    out_features: int
    in_features: int
    layers: tuple

    def problem(self, tokens: int, arch: str = "sm_90", acc: str = "f32") -> Problem:
        return Problem(arch, acc, "tn", tokens, self.out_features, self.in_features)


def linear_shapes(model: Any, *, exclude: Iterable[str] = ()) -> list:
    """The distinct shapes of `model`'s fp16 `nn.Linear` layers, in the order they first
    appear. `exclude`: glob patterns of module names to leave out (e.g. `"lm_head"`).
    Raises NoLinearsError when there is none. Layers with a dimension above kaas's limit
    (e.g. an LM head over a 128k vocabulary) are left out, with one ShapeWarning."""
    import torch

    patterns = list(exclude)
    found: dict = {}
    other: dict = {}  # dtype -> count, for the error message
    too_big: list = []
    total = 0
    for name, m in model.named_modules():
        if not isinstance(m, torch.nn.Linear):
            continue
        total += 1
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        w = m.weight
        if w.dtype != torch.float16:
            other[str(w.dtype)] = other.get(str(w.dtype), 0) + 1
            continue
        n, k = int(m.out_features), int(m.in_features)
        if not (1 <= n <= MAX_DIM and 1 <= k <= MAX_DIM):
            too_big.append(f"{name or type(m).__name__} ({n}x{k})")
            continue
        found.setdefault((n, k), []).append(name)
    if too_big:
        warnings.warn(f"kaas: left out {len(too_big)} linear layer(s) with a dimension above {MAX_DIM}, which kaas "
                      f"problems cannot have (torch runs them): {', '.join(too_big[:4])}{' ...' if len(too_big) > 4 else ''}",
                      ShapeWarning, stacklevel=3)
    if not found:
        what = type(model).__name__
        if total == 0:
            raise NoLinearsError(f"{what} has no nn.Linear layer: kaas has nothing to run for it (torch runs it as it is)")
        if other:
            kinds = ", ".join(f"{c} of {d}" for d, c in sorted(other.items()))
            raise NoLinearsError(f"{what} has no float16 nn.Linear layer ({kinds}); kaas serves fp16 GEMMs: build the model "
                                 f"in float16 (`.half()`, or `dtype=torch.float16` for transformers)")
        raise NoLinearsError(f"{what}: every nn.Linear layer was excluded or is too large for a kaas problem")
    return [LinearShape(n, k, tuple(names)) for (n, k), names in found.items()]


def check_tokens(tokens: Any) -> list:
    """Token counts as a list of distinct ints in 1..=MAX_DIM (an int alone is one)."""
    seq: Sequence = [tokens] if isinstance(tokens, int) else list(tokens)
    if not seq:
        raise KaasError("no token counts: give e.g. tokens=[1, 16, 512]")
    out = []
    for t in seq:
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= MAX_DIM:
            raise KaasError(f"token count `{t!r}` is not a whole number from 1 to {MAX_DIM}")
        if t not in out:
            out.append(t)
    return out


def linear_problems(model: Any, tokens: Any, *, arch: str = "sm_90", acc: str = "f32", exclude: Iterable[str] = ()) -> list:
    """The deduplicated `tn` problems of `model`'s fp16 `nn.Linear` layers at each token
    count (M), per token count in the order given, layers in model order. `acc="f32"`
    is what torch's fp16 matmul computes (fp32 accumulation). Needs torch; reads shapes
    only, so a model on the meta device is enough. Raises NoLinearsError when the model
    has no fp16 linear."""
    shapes = linear_shapes(model, exclude=exclude)
    return [s.problem(t, arch, acc) for t in check_tokens(tokens) for s in shapes]
