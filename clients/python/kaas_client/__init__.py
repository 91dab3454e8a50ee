"""Python client for kaas: pull verified HGEMM kernels (PTX + `kaas.hgemm.v1` manifest)
from a kaas service or a catalog bundle, and launch them on PyTorch tensors.

    import kaas_client as kaas
    k = kaas.pull("http://localhost:8080", device="H100-SXM", m=4096, n=4096, k=4096)
    k.load(0).launch(a, b, c)      # torch fp16 tensors; A M×K, B N×K (tn), C M×N
    k.check()                      # vs torch.matmul in fp32
"""

from .errors import ApiError, CudaError, IntegrityError, KaasError, LaunchError, ManifestError, NoKernelError
from .kernel import CheckResult, Kernel, tolerance
from .manifest import ABI, Launch, Manifest, Problem, tensor_map_geometry
from .remote import kernel_url, pull
from .signing import canonical_json, verify_pulled, verify_record

__all__ = [
    "ABI", "ApiError", "CheckResult", "CudaError", "IntegrityError", "KaasError", "Kernel", "Launch",
    "LaunchError", "Manifest", "ManifestError", "NoKernelError", "Problem", "kernel_url", "pull",
    "tensor_map_geometry", "tolerance",
    "canonical_json", "verify_pulled", "verify_record",
]
__version__ = "0.1.0"
