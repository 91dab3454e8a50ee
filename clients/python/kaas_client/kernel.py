"""A kernel: PTX + manifest, loaded with the CUDA driver through cuda-python and launched
on PyTorch tensors from the manifest alone. torch and cuda-python are imported only when a
kernel is loaded, launched or checked."""

from __future__ import annotations

import ctypes
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .bundle import read_index
from .catalog import Catalog, CatalogEntry
from .errors import CudaError, IntegrityError, KaasError, LaunchError, ManifestError
from .manifest import (
    Launch,
    Manifest,
    Problem,
    TensorMapRequest,
    kernel_params,
    pack_params,
)

DEFAULT_MAX_DYNAMIC_SHARED = 48 * 1024


def sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------
# The driver


def import_driver():
    """`cuda.bindings.driver` (cuda-python >= 12.6), else the older `from cuda import cuda`."""
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # type: ignore[no-redef]
        except ImportError as e:
            raise KaasError("loading a kernel needs NVIDIA's CUDA Python bindings: pip install 'kaas-client[cuda]' (from a kaas checkout: pip install './clients/python[cuda]')") from e
    return driver


class Driver:
    """cuda-python's driver module with results unpacked and failures raised as CudaError."""

    def __init__(self, cu=None):
        self.cu = cu if cu is not None else import_driver()

    def __call__(self, name: str, *args):
        try:
            result = getattr(self.cu, name)(*args)
        except RuntimeError as e:  # e.g. cuda-python finds no libcuda.so.1
            raise KaasError(f"{name}: {e}") from None
        err, rest = result[0], tuple(result[1:])
        if err != self.cu.CUresult.CUDA_SUCCESS:
            raise self.error(name, err)
        return rest[0] if len(rest) == 1 else (rest or None)

    def error(self, call: str, err, log: str = "") -> CudaError:
        def text(fn):
            try:
                r = getattr(self.cu, fn)(err)
                return r[1].decode() if isinstance(r[1], bytes) else str(r[1])
            except Exception:  # a name is all we need; never mask the real error
                return str(err)

        return CudaError(call, text("cuGetErrorName"), text("cuGetErrorString"), log)

    def enum(self, type_name: str, member: str):
        return getattr(getattr(self.cu, type_name), member)


_libcuda = None


def encode_tensor_map(driver: Driver, req: TensorMapRequest) -> bytes:
    """cuTensorMapEncodeTiled, as the service's launcher calls it, into a 128-byte-aligned
    buffer of ours. (cuda-python's own wrapper writes into a CUtensorMap held inside a
    Python object, which is not 64-byte aligned as the driver asks, so the driver's entry
    point is called directly; the enum values come from cuda-python.)"""
    global _libcuda
    if _libcuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = lib.cuTensorMapEncodeTiled
        fn.restype = ctypes.c_int
        u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p,
                       u32p, u32p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        _libcuda = lib
    e = lambda t, m: int(driver.enum(t, m).value)  # noqa: E731
    storage = (ctypes.c_ubyte * 256)()
    out = (ctypes.addressof(storage) + 127) // 128 * 128
    rc = _libcuda.cuTensorMapEncodeTiled(
        ctypes.c_void_p(out),
        e("CUtensorMapDataType", f"CU_TENSOR_MAP_DATA_TYPE_{req.data_type}"),
        req.rank,
        ctypes.c_void_p(req.address),
        (ctypes.c_uint64 * 2)(*req.dims),
        (ctypes.c_uint64 * 1)(req.row_stride_bytes),
        (ctypes.c_uint32 * 2)(*req.box),
        (ctypes.c_uint32 * 2)(*req.element_strides),
        e("CUtensorMapInterleave", f"CU_TENSOR_MAP_INTERLEAVE_{req.interleave}"),
        e("CUtensorMapSwizzle", f"CU_TENSOR_MAP_SWIZZLE_{req.swizzle.upper()}"),
        e("CUtensorMapL2promotion", f"CU_TENSOR_MAP_L2_PROMOTION_{req.l2_promotion}"),
        e("CUtensorMapFloatOOBfill", f"CU_TENSOR_MAP_FLOAT_OOB_FILL_{req.oob_fill}"),
    )
    if rc != 0:
        err = driver.cu.CUresult(rc)
        raise driver.error(
            f"cuTensorMapEncodeTiled (dims {list(req.dims)}, row stride {req.row_stride_bytes} B, "
            f"box {list(req.box)}, swizzle {req.swizzle})",
            err,
        )
    return ctypes.string_at(out, 128)


@dataclass
class _Prepared:
    function: object
    launch: Launch


class Loaded:
    """The PTX JIT-loaded into the primary context of one device (the one torch uses),
    with every launch checked against the device and the entry's parameter list."""

    def __init__(self, manifest: Manifest, ptx: str, ordinal: int, driver: Optional[Driver] = None):
        d = self.driver = driver or Driver()
        d("cuInit", 0)
        self.ordinal = ordinal
        self.dev = d("cuDeviceGet", ordinal)
        attr = lambda name: d("cuDeviceGetAttribute", d.enum("CUdevice_attribute", f"CU_DEVICE_ATTRIBUTE_{name}"), self.dev)  # noqa: E731
        self.cc = (attr("COMPUTE_CAPABILITY_MAJOR"), attr("COMPUTE_CAPABILITY_MINOR"))
        name = d("cuDeviceGetName", 256, self.dev)
        self.device_name = (name.split(b"\0")[0].decode() if isinstance(name, bytes) else str(name)).strip()
        if not manifest.problem.runs_on(self.cc):
            raise LaunchError(
                f"the kernel is built for {manifest.problem.arch}; device {ordinal} ({self.device_name}) "
                f"has compute capability {self.cc[0]}.{self.cc[1]}"
            )
        self.ctx = d("cuDevicePrimaryCtxRetain", self.dev)
        d("cuCtxSetCurrent", self.ctx)
        self.module = self._load_module(ptx)
        smem_optin = attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
        functions = {e: d("cuModuleGetFunction", self.module, e.encode()) for e in manifest.entries()}
        self.launches = [self._prepare(functions[l.entry], l, smem_optin) for l in manifest.launches]

    def _load_module(self, ptx: str):
        d = self.driver
        image = ptx.encode("utf-8") + b"\0"
        log = bytearray(16384)
        opt = lambda m: d.enum("CUjit_option", m)  # noqa: E731
        try:
            result = d.cu.cuModuleLoadDataEx(
                image, 2, [opt("CU_JIT_ERROR_LOG_BUFFER"), opt("CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES")], [log, len(log)]
            )
        except TypeError:  # a binding that cannot take a log buffer: load without one
            return d("cuModuleLoadData", image)
        if result[0] != d.cu.CUresult.CUDA_SUCCESS:
            raise d.error("cuModuleLoadDataEx (JIT of the PTX)", result[0], log.split(b"\0")[0].decode(errors="replace"))
        return result[1]

    def _prepare(self, function, launch, smem_optin: int) -> _Prepared:
        d = self.driver
        stage = f"launch `{launch.entry}`"
        fattr = lambda name: d("cuFuncGetAttribute", d.enum("CUfunction_attribute", f"CU_FUNC_ATTRIBUTE_{name}"), function)  # noqa: E731
        max_threads = fattr("MAX_THREADS_PER_BLOCK")
        if launch.threads_per_block > max_threads:
            raise LaunchError(f"{stage}: block {list(launch.block)} has {launch.threads_per_block} threads; this entry allows at most {max_threads}")
        static_smem = fattr("SHARED_SIZE_BYTES")
        if static_smem + launch.shared_mem_bytes > smem_optin:
            raise LaunchError(f"{stage}: {launch.shared_mem_bytes} bytes dynamic + {static_smem} static shared memory exceed the device's {smem_optin} per block")
        # Static and dynamic shared memory together above 48 KiB need the opt-in (a kernel
        # with exactly 48 KiB dynamic and any static fails to launch without it).
        if static_smem + launch.shared_mem_bytes > DEFAULT_MAX_DYNAMIC_SHARED:
            d("cuFuncSetAttribute", function, d.enum("CUfunction_attribute", "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES"), launch.shared_mem_bytes)
        if launch.cluster_blocks > 1:
            if self.cc < (9, 0):
                raise LaunchError(f"{stage}: cluster {list(launch.cluster)} needs compute capability 9.0")
            if launch.cluster_blocks > 8:
                d("cuFuncSetAttribute", function, d.enum("CUfunction_attribute", "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED"), 1)
        sizes = self._param_sizes(function)
        if sizes is not None and sizes != launch.param_sizes:
            raise LaunchError(f"{stage}: the entry's parameters are {sizes} bytes, the manifest's are {launch.param_sizes}")
        return _Prepared(function, launch)

    def _param_sizes(self, function) -> Optional[list]:
        """Sizes of the entry's parameters (cuFuncGetParamInfo, CUDA >= 12.4), or None."""
        cu = self.driver.cu
        if not hasattr(cu, "cuFuncGetParamInfo"):
            return None
        sizes: list[int] = []
        for i in range(4096):
            err, *rest = cu.cuFuncGetParamInfo(function, i)
            if err == cu.CUresult.CUDA_ERROR_INVALID_VALUE:
                return sizes
            if err != cu.CUresult.CUDA_SUCCESS:
                return None  # driver too old for the call: skip the check
            sizes.append(int(rest[1]))
        return None

    def launch_all(self, problem: Problem, pointers: dict, stream_handle: int) -> None:
        """Encodes the params and queues every launch, in order, on one stream."""
        d = self.driver
        d("cuCtxSetCurrent", self.ctx)
        encode = lambda req: encode_tensor_map(d, req)  # noqa: E731
        stream = d.cu.CUstream(stream_handle)
        for p in self.launches:
            l = p.launch
            args = pack_params(l.params, problem, pointers, encode)
            ptrs = kernel_params(args)
            if l.cluster_blocks == 1:
                d("cuLaunchKernel", p.function, *l.grid, *l.block, l.shared_mem_bytes, stream, ctypes.addressof(ptrs), 0)
                continue
            cfg = d.cu.CUlaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = l.grid
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = l.block
            cfg.sharedMemBytes = l.shared_mem_bytes
            cfg.hStream = stream
            attr = d.cu.CUlaunchAttribute()
            attr.id = d.enum("CUlaunchAttributeID", "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION")
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = l.cluster
            cfg.attrs = [attr]
            cfg.numAttrs = 1
            d("cuLaunchKernelEx", cfg, p.function, ctypes.addressof(ptrs), 0)


# --------------------------------------------------------------------------------------
# Operands


def check_operands(problem: Problem, a, b, c, ordinal: Optional[int] = None) -> None:
    """Dtype float16, contiguous, the manifest's shapes, one CUDA device (torch tensors,
    duck-typed so that this needs no torch)."""
    for name, t in (("A", a), ("B", b), ("C", c)):
        want = problem.operand_shape(name)
        if str(getattr(t, "dtype", None)) != "torch.float16":
            raise LaunchError(f"{name} must be a torch.float16 tensor, got {getattr(t, 'dtype', type(t).__name__)}")
        if tuple(t.shape) != want:
            layout = f" (layout {problem.layout})" if name == "B" else ""
            raise LaunchError(f"{name} must be {want[0]}×{want[1]}{layout} for {problem}, got {tuple(t.shape)}")
        if not t.is_contiguous():
            raise LaunchError(f"{name} must be contiguous (row-major)")
        if t.device.type != "cuda":
            raise LaunchError(f"{name} is on {t.device}, not a CUDA device")
        if ordinal is not None and t.device.index != ordinal:
            raise LaunchError(f"{name} is on {t.device}; the kernel is loaded on cuda:{ordinal}")
        if t.data_ptr() % 16:
            raise LaunchError(f"{name}'s data is not 16-byte aligned ({t.data_ptr():#x})")


def tolerance(acc: str, k: int) -> float:
    """Largest max-abs error accepted against an fp32 reference for inputs uniform in
    [-1, 1]. Outputs reach about 2·sqrt(K), where fp16 output rounding alone costs up to
    sqrt(K)/1024; fp32 accumulation adds little, so `f32` gets twice that. fp16
    accumulation rounds at every step, growing about linearly in K: K/1024."""
    return 2 * math.sqrt(k) / 1024 if acc == "f32" else k / 1024


@dataclass
class CheckResult:
    problem: str
    device: str
    max_abs_err: float
    tolerance: float
    exact_mismatches: int
    cublas_max_abs_err: float
    passed: bool

    def __str__(self) -> str:
        return (
            f"{self.problem} on {self.device}: max abs error {self.max_abs_err:.6g} "
            f"(tolerance {self.tolerance:.4g}; torch fp16 matmul {self.cublas_max_abs_err:.6g}), "
            f"{{0,1}} exact-test mismatches {self.exact_mismatches} -> {'PASS' if self.passed else 'FAIL'}"
        )


def _torch():
    try:
        import torch
    except ImportError as e:
        raise KaasError("launching a kernel needs PyTorch") from e
    return torch


def _ordinal_of(device) -> int:
    if isinstance(device, int):
        return device
    index = getattr(device, "index", None)
    if index is None and isinstance(device, str):
        index = int(device.split(":")[1]) if ":" in device else 0
    return int(index or 0)


# --------------------------------------------------------------------------------------
# Kernel


class Kernel:
    """PTX + its `kaas.hgemm.v1` manifest. `view` is the service's KernelView, when pulled."""

    def __init__(self, manifest: Manifest, ptx: str, *, sha256: Optional[str] = None, view: Optional[dict] = None, source: str = ""):
        self.manifest = manifest
        self.ptx = ptx
        self.sha256 = sha256_hex(ptx)
        if sha256 is not None and sha256 != self.sha256:
            raise IntegrityError(f"{source or 'PTX'}: sha256 is {self.sha256}, the catalog says {sha256}")
        for entry in manifest.entries():
            if not re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\(", ptx):
                raise ManifestError(f"the manifest launches `{entry}`, which the PTX has no `.entry` for")
        self.view = view
        self.source = source
        self._loaded: Optional[Loaded] = None
        self._workspace = None

    def __repr__(self) -> str:
        return f"Kernel({self.problem}, {', '.join(self.manifest.entries())}, sha256={self.sha256[:12]})"

    @property
    def problem(self) -> Problem:
        return self.manifest.problem

    # ---- reading and writing ----

    @classmethod
    def from_dir(cls, path) -> "Kernel":
        """Reads `kernel.ptx` and `manifest.json` (what `kaas pull -o DIR` writes); where
        the directory also has `kernel.json` (the service's KernelView, which `kaas pull`
        writes too), the PTX must have its `artifact.sha256`."""
        p = Path(path)
        manifest = Manifest.from_dict(json.loads((p / "manifest.json").read_text()))
        view = json.loads((p / "kernel.json").read_text()) if (p / "kernel.json").exists() else None
        sha = view["artifact"]["sha256"] if view else None
        return cls(manifest, (p / "kernel.ptx").read_text(encoding="utf-8"), sha256=sha, view=view, source=str(p / "kernel.ptx"))

    @classmethod
    def bundle_entries(cls, path, *, device: Optional[str] = None) -> list["Kernel"]:
        """Every kernel of a catalog bundle (`index.json` or `index.json.gz` +
        `ptx/<sha256>.ptx`, as in the repo's kernels/ and kernels/h100/), optionally only
        those of one device class. Raw entries: whether the service would serve each one
        is `kaas_client.catalog.Catalog.lookup`'s question."""
        p = Path(path)
        index = read_index(p)
        out = []
        for i, e in enumerate(index.get("entries", [])):
            if device is not None and e.get("device_class") != device:
                continue
            sha = e["artifact"]
            if not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise IntegrityError(f"entries[{i}].artifact `{sha}` is not a sha256")
            ptx = (p / "ptx" / f"{sha}.ptx").read_text(encoding="utf-8")
            out.append(cls(Manifest.from_dict(e["manifest"]), ptx, sha256=sha, view=e, source=f"{p}/ptx/{sha}.ptx"))
        return out

    @classmethod
    def from_bundle(cls, path, *, m: int, n: int, k: int, acc: str = "f32", layout: str = "tn", arch: str = "sm_90", device: Optional[str] = None) -> "Kernel":
        """The catalog entry for one problem (and device class, if given: any spelling the
        service takes), as the service holds it after importing the tree (`kernels/`: its
        own bundle, then each sub-bundle in name order, a later entry replacing an earlier
        one), whether or not a baseline beats it (`Catalog.lookup` applies the service's
        rule). Without a device class, the fastest entry of any."""
        want = Problem(arch, acc, layout, m, n, k)
        found = Catalog.from_tree(path).candidates(want, device)
        if not found:
            on = f" on {device}" if device else ""
            raise KaasError(f"{path}: the bundle has no kernel for {want}{on}")
        return cls.from_entry(found[0])

    @classmethod
    def from_entry(cls, entry: CatalogEntry) -> "Kernel":
        """A catalog entry (`Catalog.lookup`, `Catalog.served`) as a Kernel, its PTX read from
        the bundle and checked against the sha256 it is filed under."""
        return cls(Manifest.from_dict(entry.record["manifest"]), entry.read_ptx(), sha256=entry.sha256, view=entry.record, source=str(entry.ptx_path))

    def save(self, path) -> Path:
        """Writes `kernel.ptx` and `manifest.json` (and `kernel.json`, for a pulled kernel)
        into a directory, created if needed: the layout `kaas pull -o DIR` writes."""
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        (p / "kernel.ptx").write_text(self.ptx, encoding="utf-8")
        (p / "manifest.json").write_text(json.dumps(self.manifest.to_dict(), indent=2) + "\n")
        if self.view and isinstance(self.view.get("artifact"), dict):  # a KernelView, as pulled
            (p / "kernel.json").write_text(json.dumps(self.view, indent=2) + "\n")
        return p

    # ---- running ----

    def load(self, device=0, *, driver: Optional[Driver] = None) -> "Kernel":
        """JIT-loads the PTX on a CUDA device (ordinal, `cuda:N` or torch.device) in the
        primary context that torch also uses."""
        self._loaded = Loaded(self.manifest, self.ptx, _ordinal_of(device), driver)
        return self

    @property
    def device_name(self) -> Optional[str]:
        return self._loaded.device_name if self._loaded else None

    def launch(self, a, b, c, stream=None):
        """Queues C = A·B on `stream` (a torch.cuda.Stream, a raw CUstream handle, or None
        for torch's current stream) and returns C. A is M×K, B K×N (`nn`) or N×K (`tn`),
        C M×N, all float16, contiguous, on the loaded device."""
        torch = _torch()
        if self._loaded is None:
            self.load(a.device.index if a.device.type == "cuda" else 0)
        ordinal = self._loaded.ordinal
        check_operands(self.problem, a, b, c, ordinal)
        if stream is None:
            stream = torch.cuda.current_stream(ordinal)
        elif isinstance(stream, int):
            stream = torch.cuda.ExternalStream(stream, device=torch.device("cuda", ordinal))
        pointers = {"A": a.data_ptr(), "B": b.data_ptr(), "C": c.data_ptr()}
        self._workspace = None
        if self.manifest.workspace_bytes:
            with torch.cuda.stream(stream):
                self._workspace = torch.zeros(self.manifest.workspace_bytes, dtype=torch.uint8, device=a.device)
            pointers["workspace"] = self._workspace.data_ptr()
        self._loaded.launch_all(self.problem, pointers, stream.cuda_stream)
        return c

    def check(self, seed: int = 0, device=None, verbose: bool = True) -> CheckResult:
        """Runs the kernel on random fp16 inputs in [-1, 1] (and on {0,1} inputs, which must
        come out exact) and compares with torch.matmul in fp32."""
        torch = _torch()
        if self._loaded is None or (device is not None and _ordinal_of(device) != self._loaded.ordinal):
            self.load(0 if device is None else device)
        assert self._loaded is not None
        p, dev = self.problem, torch.device("cuda", self._loaded.ordinal)
        gen = torch.Generator(device=dev).manual_seed(seed)
        rand = lambda shape: torch.rand(shape, generator=gen, device=dev)  # noqa: E731
        b_kn = (lambda b: b) if p.layout == "nn" else (lambda b: b.t())  # B as K×N

        def run(a, b):
            c = torch.full((p.m, p.n), float("nan"), dtype=torch.float16, device=dev)
            self.launch(a, b, c)
            torch.cuda.synchronize(dev)
            return c

        def reference(a, b):
            before = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision("highest")  # no TF32 in the reference
            try:
                return torch.matmul(a.float(), b_kn(b).float())
            finally:
                torch.set_float32_matmul_precision(before)

        a = (rand((p.m, p.k)) * 2 - 1).half()
        b = (rand(p.operand_shape("B")) * 2 - 1).half()
        c = run(a, b)
        ref = reference(a, b)
        max_err = float((c.float() - ref).abs().max()) if bool(torch.isfinite(c).all()) else float("nan")
        cublas_err = float((torch.matmul(a, b_kn(b)).float() - ref).abs().max())

        density = min(0.5, math.sqrt(512 / p.k))  # sums stay well under 2048
        a01 = (rand((p.m, p.k)) < density).half()
        b01 = (rand(p.operand_shape("B")) < density).half()
        c01, ref01 = run(a01, b01).float(), reference(a01, b01)
        mismatches = int(((c01 != ref01) & (ref01 < 2048)).sum())

        tol = tolerance(p.acc, p.k)
        result = CheckResult(
            problem=p.path,
            device=self._loaded.device_name,
            max_abs_err=max_err,
            tolerance=tol,
            exact_mismatches=mismatches,
            cublas_max_abs_err=cublas_err,
            passed=math.isfinite(max_err) and max_err <= tol and mismatches == 0,
        )
        if verbose:
            print(result)
        return result
