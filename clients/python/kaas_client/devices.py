"""Device classes as the service names them, from the spellings people use.

The same resolution as the service's (`src/gpu/device.rs` `resolve_device_class`, over
`dispatch.device_class`, the workers' mapping of driver names), so that a bundle, a lock
and the service answer `H100`, `h100`, `H100 SXM` or the driver's `NVIDIA H100 80GB HBM3`
with one class, `H100-SXM`, and a class nobody measured with `unknown_device`, never
"no kernel".
"""

from __future__ import annotations

from typing import Iterable

from .dispatch import device_class
from .errors import UnknownDeviceError


def resolve_device_class(asked: str, known: Iterable[str], where: str = "") -> str:
    """The known class that `asked` names: the class in any case, the driver's model name,
    words for model and form factor, or a bare model where one known class is of it.
    Raises UnknownDeviceError (code `unknown_device`, or `ambiguous_device` where a bare
    model names several form factors) listing the known classes."""
    known = sorted(set(known))
    asked = asked.strip()
    by_lower = {k.lower(): k for k in known}
    for spelling in (asked, device_class(asked)):
        if spelling.lower() in by_lower:
            return by_lower[spelling.lower()]
    cls = device_class(asked)
    model = cls.split("-")[0]
    names = ", ".join(known) if known else "none"
    if model == cls:
        of_model = [k for k in known if k.lower().startswith(model.lower() + "-") and len(k) > len(model) + 1]
        if len(of_model) == 1:
            return of_model[0]
        if len(of_model) > 1:
            raise UnknownDeviceError(400, {"code": "ambiguous_device", "device": asked, "known_device_classes": known,
                                           "detail": f"device `{asked}` could be any of {', '.join(of_model)}, which time differently: name one"}, where)
    raise UnknownDeviceError(400, {"code": "unknown_device", "device": asked, "known_device_classes": known,
                                   "detail": f"device class `{asked}` is not known here; known device classes: {names}"}, where)
