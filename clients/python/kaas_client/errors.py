"""Exceptions raised by the kaas client."""

import sys


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


class ServiceUnavailable(KaasError):
    """The service did not answer (down, unreachable, or the connection failed or timed
    out); nothing was asked of it."""


class UnknownDeviceError(ApiError):
    """The service does not know the device class asked for (400 `unknown_device`, or
    `ambiguous_device`); `known` lists the classes it knows."""

    def __init__(self, status: int, problem: dict, url: str):
        super().__init__(status, problem, url)
        known = problem.get("known_device_classes")
        self.known = [str(k) for k in known] if isinstance(known, list) else []
        self.device = problem.get("device")


class QuotaError(ApiError):
    """The service refused the request for a quota or a rate limit (429: `quota_exceeded`,
    `rate_limited`); nothing was queued. `retry_after` is the `Retry-After` header's
    seconds, or None."""

    def __init__(self, status: int, problem: dict, url: str, retry_after=None):
        super().__init__(status, problem, url)
        self.retry_after = retry_after


class NoKernelError(ApiError):
    """No catalog kernel to use for the problem (`kernel_not_found`), or a cuBLAS/cuBLASLt
    baseline is faster than every kernel (`baseline_faster`). `use_instead` is the
    baseline to call instead (library, layout, median_us, config), or None if the
    service has measured none; `device_class` is where it was measured."""

    def __init__(self, status: int, problem: dict, url: str):
        super().__init__(status, problem, url)
        self.use_instead = problem.get("use_instead")
        self.device_class = problem.get("device_class")


class LockError(KaasError):
    """A lock file that is unreadable, malformed, for another device class, or whose
    artifacts are missing from the cache; the message names the file and the fault."""


class FallbackError(KaasError):
    """Strict mode: a call that would have fallen back to torch. `reason` is one of
    `kaas_client.dispatch.REASONS`."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


def run_cli(args, prog: str, also: tuple = ()) -> int:
    """Runs a parsed subcommand (`args.run`); a KaasError (or one of `also`) becomes one
    line on stderr and exit status 2, never a traceback."""
    try:
        return args.run(args)
    except (KaasError, *also) as e:
        print(f"{prog}: {e}", file=sys.stderr)
        return 2
