"""Python client for kaas: pull verified HGEMM kernels (PTX + `kaas.hgemm.v1` manifest)
from a kaas service or a catalog bundle, and launch them on PyTorch tensors.

    import kaas_client.torch as kt
    kt.use(bundle="kernels")       # or kt.use(lock="kaas.lock"): offline, sha256-checked
    kt.patch(model)                # fp16 nn.Linear layers now run kaas kernels where they win

    kt.use(service="http://host:8080", model=model, tokens=[1, 16], tune=True)  # any model's shapes, tuned on request

    import kaas_client as kaas
    k = kaas.pull("http://localhost:8080", device="H100-SXM", m=4096, n=4096, k=4096)
    k.load(0).launch(a, b, c)      # torch fp16 tensors; A M×K, B N×K (tn), C M×N
    k.check()                      # vs torch.matmul in fp32
"""

from .catalog import Catalog
from .errors import (
    ApiError, CudaError, FallbackError, IntegrityError, KaasError, LaunchError, LockError, ManifestError, NoKernelError,
    QuotaError, ServiceUnavailable, UnknownDeviceError,
)
from .kernel import CheckResult, Kernel, tolerance
from .manifest import ABI, Launch, Manifest, Problem, tensor_map_geometry
from .locking import Lock, lock
from .remote import kernel_url, pull
from .shapes import LinearShape, NoLinearsError, linear_problems, linear_shapes
from .signing import canonical_json, verify_pulled, verify_record
from .tuning import Outcome, TuneReport, tune

__all__ = [
    "ABI", "ApiError", "Catalog", "CheckResult", "CudaError", "FallbackError", "IntegrityError", "KaasError",
    "Kernel", "Launch", "LaunchError", "Lock", "LockError", "Manifest", "ManifestError", "NoKernelError", "Problem",
    "kernel_url", "lock", "pull", "tensor_map_geometry", "tolerance",
    "canonical_json", "verify_pulled", "verify_record",
    "LinearShape", "NoLinearsError", "linear_problems", "linear_shapes",
    "Outcome", "QuotaError", "ServiceUnavailable", "TuneReport", "UnknownDeviceError", "tune",
]
__version__ = "0.2.0"
