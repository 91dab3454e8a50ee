"""Exceptions raised by the kaas client."""


class KaasError(Exception):
    """Base class of every error this package raises."""


class ManifestError(KaasError, ValueError):
    """A manifest that is not valid `kaas.hgemm.v1`; the message names the first fault."""


class IntegrityError(KaasError):
    """Downloaded or stored PTX whose sha256 is not the one the catalog names."""


class LaunchError(KaasError, ValueError):
    """Operands, device or stream that do not fit the manifest; nothing was launched."""


class CudaError(KaasError):
    """A CUDA driver call failed."""

    def __init__(self, call: str, name: str, message: str, log: str = ""):
        self.call, self.name, self.log = call, name, log
        text = f"{call} failed: {name} ({message})"
        if log:
            text += f"\n{log}"
        super().__init__(text)


class ApiError(KaasError):
    """The service answered with an error (`application/problem+json`)."""

    def __init__(self, status: int, problem: dict, url: str):
        self.status = status
        self.url = url
        self.problem = problem
        self.code = problem.get("code", "")
        self.detail = problem.get("detail", "")
        super().__init__(f"{url}: HTTP {status} {self.code}: {self.detail}".rstrip(": "))


class NoKernelError(ApiError):
    """No catalog kernel to use for the problem (`kernel_not_found`), or a cuBLAS/cuBLASLt
    baseline is faster than every kernel (`baseline_faster`). `use_instead` is the
    baseline to call instead (library, layout, median_us, config), or None if the
    service has measured none; `device_class` is where it was measured."""

    def __init__(self, status: int, problem: dict, url: str):
        super().__init__(status, problem, url)
        self.use_instead = problem.get("use_instead")
        self.device_class = problem.get("device_class")
