"""The hot path: one kernel, one problem, one device, prepared once and launched many times
with nothing but a few ctypes calls.

`Kernel.launch` re-encodes every parameter, allocates a workspace and goes through
cuda-python's wrappers on each call: fine for checking a kernel, too slow to sit under
every `nn.Linear` of a model (a decode-size GEMM takes 5–20 µs on an H100). A `Prepared`
does that work once:

* the function (cuModuleLoadData + cuModuleGetFunction) comes from `Kernel.load`, which
  also checks every launch against the device and the entry's parameter sizes;
* every launch's parameters live in one buffer we own, with the `void**` array pointing
  into it; the i32 values and the workspace pointer are written once, A/B/C pointers only
  when they change, and a tensor map only when its operand's pointer changes (the shape
  is fixed by the problem, so the pointer is all that can change);
* the workspace is allocated and zeroed once by the caller (kernels leave it reusable), so
  one `Prepared` must not run on two streams at once;
* launches go straight to libcuda: cuLaunchKernel, or cuLaunchKernelEx with a prebuilt
  CUlaunchConfig for clustered entries, on the stream handle given (torch's current one),
  which is what a CUDA-graph capture records.
"""

from __future__ import annotations

import ctypes
from typing import Any, Optional

from .errors import CudaError, KaasError, LaunchError
from .manifest import (
    SWIZZLES,
    TENSOR_MAP_BYTES,
    I32,
    Problem,
    Ptr,
    TensorMap,
    tensor_map_request,
)

# CUlaunchAttributeID CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION (cuda.h, stable since 12.0).
CLUSTER_DIMENSION = 4
# CUtensorMap enum values (cuda.h; stable since 12.0).
_DT_FLOAT16 = 6
_SWIZZLE = {"none": 0, "32B": 1, "64B": 2, "128B": 3}
_L2 = {"NONE": 0, "L2_64B": 1, "L2_128B": 2, "L2_256B": 3}
assert set(_SWIZZLE) == set(SWIZZLES)


class LaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("clusterDim", ctypes.c_uint * 3)]


class LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: the id, padded to 8 bytes, then a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    """CUlaunchConfig (cuda.h)."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("numAttrs", ctypes.c_uint),
    ]


assert ctypes.sizeof(LaunchAttribute) == 72 and ctypes.sizeof(LaunchConfig) == 56

_LIB: Any = None


def libcuda() -> Any:
    """libcuda.so.1 with the few entry points the hot path calls, typed."""
    global _LIB
    if _LIB is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise KaasError(f"cannot load the CUDA driver (libcuda.so.1): {e}") from None
        vp, u, i = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int
        lib.cuLaunchKernel.argtypes = [vp, u, u, u, u, u, u, u, vp, vp, vp]
        lib.cuLaunchKernel.restype = i
        lib.cuLaunchKernelEx.argtypes = [vp, vp, vp, vp]
        lib.cuLaunchKernelEx.restype = i
        lib.cuCtxSetCurrent.argtypes = [vp]
        lib.cuCtxSetCurrent.restype = i
        lib.cuCtxGetCurrent.argtypes = [ctypes.POINTER(vp)]
        lib.cuCtxGetCurrent.restype = i
        u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
        lib.cuTensorMapEncodeTiled.argtypes = [vp, i, ctypes.c_uint32, vp, u64p, u64p, u32p, u32p, i, i, i, i]
        lib.cuTensorMapEncodeTiled.restype = i
        lib.cuGetErrorName.argtypes = [i, ctypes.POINTER(ctypes.c_char_p)]
        lib.cuGetErrorName.restype = i
        _LIB = lib
    return _LIB


def handle(obj: Any) -> int:
    """The raw value of a cuda-python handle (CUfunction, CUcontext, CUstream) or an int."""
    if isinstance(obj, int):
        return obj
    try:
        return int(obj)
    except TypeError:
        return ctypes.c_void_p.from_address(obj.getPtr()).value or 0


def _check(lib: Any, rc: int, call: str) -> None:
    if rc:
        name = ctypes.c_char_p()
        try:
            lib.cuGetErrorName(rc, ctypes.byref(name))
            text = (name.value or b"").decode() or f"CUresult {rc}"
        except Exception:  # the code alone still says what failed
            text = f"CUresult {rc}"
        raise CudaError(call, text, f"error {rc}")


class _TensorMapSlot:
    """One tensor-map parameter: its place in the buffer and every encode argument but
    the address, built once."""

    def __init__(self, problem: Problem, spec: TensorMap, address: int):
        req = tensor_map_request(problem, spec, 256)  # geometry checks; address comes later
        self.operand = spec.operand
        self.address = address
        self.dims = (ctypes.c_uint64 * 2)(*req.dims)
        self.stride = (ctypes.c_uint64 * 1)(req.row_stride_bytes)
        self.box = (ctypes.c_uint32 * 2)(*req.box)
        self.elem = (ctypes.c_uint32 * 2)(*req.element_strides)
        self.swizzle = _SWIZZLE[spec.swizzle]
        self.l2 = _L2[req.l2_promotion]
        self.describe = f"tensor map over {spec.operand} (dims {list(req.dims)}, box {list(req.box)}, swizzle {spec.swizzle})"

    def encode(self, lib: Any, pointer: int) -> None:
        if pointer % 16:
            raise LaunchError(f"{self.operand}'s data is not 16-byte aligned ({pointer:#x}); a tensor map needs it")
        rc = lib.cuTensorMapEncodeTiled(
            self.address, _DT_FLOAT16, 2, pointer, self.dims, self.stride, self.box, self.elem, 0, self.swizzle, self.l2, 0
        )
        _check(lib, rc, f"cuTensorMapEncodeTiled ({self.describe})")


class _Launch:
    """One manifest launch: its parameter buffer, `void**` array and launch call."""

    def __init__(self, lib: Any, function: int, launch: Any, problem: Problem, workspace: int):
        self.lib = lib
        self.function = function
        self.entry = launch.entry
        offsets, size = [], 0
        for p in launch.params:
            n, align = (TENSOR_MAP_BYTES, 128) if isinstance(p, TensorMap) else (8, 8) if isinstance(p, Ptr) else (4, 4)
            size = (size + align - 1) // align * align
            offsets.append(size)
            size += n
        self._storage = (ctypes.c_ubyte * (size + 128))()
        base = (ctypes.addressof(self._storage) + 127) // 128 * 128
        self.params = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
        self.pointer_slots: dict = {"A": [], "B": [], "C": []}  # operand -> c_uint64 views
        self.maps: dict = {"A": [], "B": [], "C": []}  # operand -> _TensorMapSlot
        dims = {"M": problem.m, "N": problem.n, "K": problem.k}
        for p, off in zip(launch.params, offsets):
            if isinstance(p, Ptr):
                view = ctypes.c_uint64.from_address(base + off)
                if p.buffer == "workspace":
                    if not workspace:
                        raise LaunchError(f"launch `{launch.entry}` points at a workspace, and none was given")
                    view.value = workspace
                else:
                    self.pointer_slots[p.buffer].append(view)
            elif isinstance(p, I32):
                ctypes.c_int32.from_address(base + off).value = dims[p.value] if isinstance(p.value, str) else p.value
            else:
                self.maps[p.operand].append(_TensorMapSlot(problem, p, base + off))
        self.grid, self.block, self.smem = tuple(launch.grid), tuple(launch.block), launch.shared_mem_bytes
        self.config: Optional[LaunchConfig] = None
        if launch.cluster_blocks > 1:
            self._attr = LaunchAttribute()
            self._attr.id = CLUSTER_DIMENSION
            self._attr.value.clusterDim[0], self._attr.value.clusterDim[1], self._attr.value.clusterDim[2] = launch.cluster
            cfg = LaunchConfig()
            cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.grid
            cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = self.block
            cfg.sharedMemBytes = self.smem
            cfg.attrs = ctypes.pointer(self._attr)
            cfg.numAttrs = 1
            self.config = cfg
            self._config_ref = ctypes.byref(cfg)

    def set_pointer(self, operand: str, pointer: int) -> None:
        for view in self.pointer_slots[operand]:
            view.value = pointer
        for slot in self.maps[operand]:
            slot.encode(self.lib, pointer)

    def __call__(self, stream: int) -> None:
        if self.config is None:
            gx, gy, gz = self.grid
            bx, by, bz = self.block
            rc = self.lib.cuLaunchKernel(self.function, gx, gy, gz, bx, by, bz, self.smem, stream, self.params, None)
            if rc:
                _check(self.lib, rc, f"cuLaunchKernel `{self.entry}`")
        else:
            self.config.hStream = stream
            rc = self.lib.cuLaunchKernelEx(self._config_ref, self.function, self.params, None)
            if rc:
                _check(self.lib, rc, f"cuLaunchKernelEx `{self.entry}` (cluster)")


class Prepared:
    """A loaded kernel ready for `run(a_ptr, b_ptr, c_ptr, stream)` with no other work
    than writing changed pointers (and re-encoding their tensor maps) and the launches.

    `functions` are the CUfunction handles in launch order (from `Loaded.launches`);
    `context` the primary context's handle: where another is current (torch's current
    device is another GPU) it is made current for the launches and the other one
    restored, since torch reads its current device from the current context; where
    none is (a fresh thread), it is made current and left so; `workspace` a device address of at least the
    manifest's `workspace_bytes`, zeroed, or 0 when it asks for none."""

    def __init__(self, manifest: Any, functions: list, context: int, workspace: int = 0, lib: Any = None):
        self.lib = lib if lib is not None else libcuda()
        self.problem: Problem = manifest.problem
        if manifest.workspace_bytes and not workspace:
            raise LaunchError(f"{self.problem}: the kernel needs a {manifest.workspace_bytes}-byte workspace")
        self.context = context
        self.launches = [_Launch(self.lib, f, l, self.problem, workspace) for f, l in zip(functions, manifest.launches)]
        self._current = ctypes.c_void_p()
        self._current_ref = ctypes.byref(self._current)
        self._last = (0, 0, 0)
        self._pointers = {"A": 0, "B": 0, "C": 0}
        self.encodes = 0  # tensor-map encodes so far (what the tests watch)

    @classmethod
    def from_kernel(cls, kernel: Any, workspace: int = 0, lib: Any = None) -> "Prepared":
        """From a `Kernel` already `load`ed on its device."""
        loaded = kernel._loaded
        if loaded is None:
            raise KaasError(f"{kernel.problem}: load the kernel on a device first")
        return cls(kernel.manifest, [handle(p.function) for p in loaded.launches], handle(loaded.ctx), workspace, lib)

    def run(self, a: int, b: int, c: int, stream: int) -> None:
        """Queues C = A·B on `stream` (a raw CUstream handle; 0 is the legacy stream)."""
        last = self._last
        if a != last[0] or b != last[1] or c != last[2]:
            self._repoint(a, b, c)
        lib = self.lib
        rc = lib.cuCtxGetCurrent(self._current_ref)
        if rc:
            _check(lib, rc, "cuCtxGetCurrent")
        previous = self._current.value
        if previous == self.context:
            for launch in self.launches:
                launch(stream)
            return
        _check(lib, lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        try:
            for launch in self.launches:
                launch(stream)
        finally:
            if previous:
                _check(lib, lib.cuCtxSetCurrent(previous), "cuCtxSetCurrent (restoring the caller's context)")

    def _repoint(self, a: int, b: int, c: int) -> None:
        self._last = (0, 0, 0)  # a failed encode must not leave a half-updated state trusted
        for operand, new in (("A", a), ("B", b), ("C", c)):
            if new != self._pointers[operand]:
                self._pointers[operand] = 0
                for launch in self.launches:
                    launch.set_pointer(operand, new)
                    self.encodes += len(launch.maps[operand])
                self._pointers[operand] = new
        self._last = (a, b, c)
