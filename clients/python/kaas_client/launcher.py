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

Every driver call on the hot path goes through an untyped ctypes function pointer with its
argument tuple built once: ctypes' per-argument `argtypes` conversion costs more than the
call itself (about 1.2 µs of a typed 11-argument cuLaunchKernel). The tuples hold ctypes
objects for everything 64-bit (handles, pointers: a bare Python int would be passed as a
32-bit C int) and Python ints for the 32-bit values; the stream and a tensor map's address
are `c_void_p` cells inside those tuples, rewritten only when they change.
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
    """libcuda.so.1, loaded once; `EntryPoints` takes the functions the launcher calls
    from it."""
    global _LIB
    if _LIB is None:
        try:
            _LIB = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise KaasError(f"cannot load the CUDA driver (libcuda.so.1): {e}") from None
    return _LIB


class EntryPoints:
    """The driver functions a `Prepared` calls, as untyped ctypes function pointers taken
    from `lib` by name (`lib[name]`: a `ctypes.CDLL` gives a fresh pointer with no
    `argtypes`, so arguments go through ctypes' cheap built-in conversion).

    cuLaunchKernel(Ex) releases the GIL as any CDLL call does: the driver blocks there
    while the launch queue is full. cuCtxGetCurrent only reads a thread-local, so it is
    called with the GIL held (a PYFUNCTYPE pointer to the same address), which is cheaper."""

    def __init__(self, lib: Any):
        self.launch_kernel = lib["cuLaunchKernel"]
        self.launch_kernel_ex = lib["cuLaunchKernelEx"]
        self.encode_tiled = lib["cuTensorMapEncodeTiled"]
        self.set_current = lib["cuCtxSetCurrent"]
        self.error_name = lib["cuGetErrorName"]
        address = ctypes.cast(lib["cuCtxGetCurrent"], ctypes.c_void_p).value
        self.get_current = ctypes.PYFUNCTYPE(ctypes.c_int)(address)


def handle(obj: Any) -> int:
    """The raw value of a cuda-python handle (CUfunction, CUcontext, CUstream) or an int."""
    if isinstance(obj, int):
        return obj
    try:
        return int(obj)
    except TypeError:
        return ctypes.c_void_p.from_address(obj.getPtr()).value or 0


def _check(cu: EntryPoints, rc: int, call: str) -> None:
    if rc:
        name = ctypes.c_char_p()
        try:
            cu.error_name(rc, ctypes.byref(name))
            text = (name.value or b"").decode() or f"CUresult {rc}"
        except Exception:  # the code alone still says what failed
            text = f"CUresult {rc}"
        raise CudaError(call, text, f"error {rc}")


class _TensorMapSlot:
    """One tensor-map parameter: its place in the buffer and the encode call's arguments,
    built once; only the operand's address cell changes."""

    def __init__(self, cu: EntryPoints, problem: Problem, spec: TensorMap, address: int):
        req = tensor_map_request(problem, spec, 256)  # geometry checks; address comes later
        self.cu = cu
        self.operand = spec.operand
        self.address = address
        self.dims = (ctypes.c_uint64 * 2)(*req.dims)
        self.stride = (ctypes.c_uint64 * 1)(req.row_stride_bytes)
        self.box = (ctypes.c_uint32 * 2)(*req.box)
        self.elem = (ctypes.c_uint32 * 2)(*req.element_strides)
        self.swizzle = _SWIZZLE[spec.swizzle]
        self.l2 = _L2[req.l2_promotion]
        self.pointer = ctypes.c_void_p()
        # cuTensorMapEncodeTiled(out, dtype, rank, global address, dims, strides, box,
        # element strides, interleave, swizzle, L2 promotion, OOB fill): the enums and the
        # rank are small C ints, so Python ints pass as they are.
        self.args = (ctypes.c_void_p(address), _DT_FLOAT16, 2, self.pointer, self.dims, self.stride, self.box, self.elem,
                     0, self.swizzle, self.l2, 0)
        self.describe = f"tensor map over {spec.operand} (dims {list(req.dims)}, box {list(req.box)}, swizzle {spec.swizzle})"

    def encode(self, pointer: int) -> None:
        if pointer % 16:
            raise LaunchError(f"{self.operand}'s data is not 16-byte aligned ({pointer:#x}); a tensor map needs it")
        self.pointer.value = pointer
        rc = self.cu.encode_tiled(*self.args)
        if rc:
            _check(self.cu, rc, f"cuTensorMapEncodeTiled ({self.describe})")


def param_layout(params: Any) -> tuple:
    """Each parameter's offset in the buffer, and the buffer's size: every parameter at
    its own alignment (tensor maps 128 bytes, pointers 8, i32s 4), in order."""
    offsets, size = [], 0
    for p in params:
        n, align = (TENSOR_MAP_BYTES, 128) if isinstance(p, TensorMap) else (8, 8) if isinstance(p, Ptr) else (4, 4)
        size = (size + align - 1) // align * align
        offsets.append(size)
        size += n
    return offsets, size


class _Launch:
    """One manifest launch: its parameter buffer, `void**` array, and the launch call with
    its argument tuple."""

    def __init__(self, cu: EntryPoints, function: int, launch: Any, problem: Problem, workspace: int):
        self.cu = cu
        self.function = function
        self.entry = launch.entry
        offsets, size = param_layout(launch.params)
        self._storage = (ctypes.c_ubyte * (size + 128))()
        base = self.base = (ctypes.addressof(self._storage) + 127) // 128 * 128
        self.params = (ctypes.c_void_p * max(1, len(offsets)))(*[base + o for o in offsets])
        # Where each operand's pointer goes (`Prepared` rewrites them when it changes).
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
                self.maps[p.operand].append(_TensorMapSlot(cu, problem, p, base + off))
        self.grid, self.block, self.smem = tuple(launch.grid), tuple(launch.block), launch.shared_mem_bytes
        fn = ctypes.c_void_p(function)
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
            # The stream cell is the config's own hStream field.
            self.stream = ctypes.c_void_p.from_buffer(cfg, LaunchConfig.hStream.offset)
            self.call = cu.launch_kernel_ex
            self.args: tuple = (ctypes.byref(cfg), fn, self.params, None)
            self.what = f"cuLaunchKernelEx `{self.entry}` (cluster)"
        else:
            # Grid, block and shared memory are unsigned ints below 2^31 (the manifest's
            # limits), so Python ints, which ctypes passes as C ints, carry the same bits.
            self.stream = ctypes.c_void_p()
            self.call = cu.launch_kernel
            self.args = (fn, *self.grid, *self.block, self.smem, self.stream, self.params, None)
            self.what = f"cuLaunchKernel `{self.entry}`"


class Prepared:
    """A loaded kernel ready for `run(a_ptr, b_ptr, c_ptr, stream)` with no other work
    than writing changed pointers (and re-encoding their tensor maps) and the launches.

    `functions` are the CUfunction handles in launch order (from `Loaded.launches`);
    `context` the primary context's handle: where another is current (torch's current
    device is another GPU) it is made current for the launches and the other one
    restored, since torch reads its current device from the current context; where
    none is (a fresh thread), it is made current and left so; `workspace` a device address of at least the
    manifest's `workspace_bytes`, zeroed, or 0 when it asks for none. `lib`: libcuda as a
    `ctypes.CDLL` (default), or anything that hands out ctypes function pointers by name."""

    def __init__(self, manifest: Any, functions: list, context: int, workspace: int = 0, lib: Any = None):
        self.cu = EntryPoints(lib if lib is not None else libcuda())
        self.problem: Problem = manifest.problem
        if manifest.workspace_bytes and not workspace:
            raise LaunchError(f"{self.problem}: the kernel needs a {manifest.workspace_bytes}-byte workspace")
        self.context = context
        self._context_arg = ctypes.c_void_p(context)
        self.launches = [_Launch(self.cu, f, l, self.problem, workspace) for f, l in zip(functions, manifest.launches)]
        self._calls = tuple((l.call, l.args, l) for l in self.launches)
        self._streams = tuple(l.stream for l in self.launches)
        self._stream: Optional[int] = None  # what the stream cells hold
        self._current = ctypes.c_void_p()
        self._current_ref = ctypes.byref(self._current)
        # Per operand (A, B, C), across every launch: the pointer params' views and the
        # tensor maps to rewrite when its pointer changes, and the pointer they now hold
        # (0: unknown, so the next call writes it).
        self._views = tuple(tuple(v for l in self.launches for v in l.pointer_slots[o]) for o in "ABC")
        self._maps = tuple(tuple(m for l in self.launches for m in l.maps[o]) for o in "ABC")
        self._pointers = [0, 0, 0]
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
        held = self._pointers
        if a != held[0] or b != held[1] or c != held[2]:
            self._repoint(a, b, c)
        if stream != self._stream:
            self._set_stream(stream)
        cu = self.cu
        rc = cu.get_current(self._current_ref)
        if rc:
            _check(cu, rc, "cuCtxGetCurrent")
        if self._current.value != self.context:
            self._run_switched()
            return
        for call, args, launch in self._calls:
            rc = call(*args)
            if rc:
                _check(cu, rc, launch.what)

    def _run_switched(self) -> None:
        """The launches with our context made current, and the caller's (if any) restored."""
        cu, previous = self.cu, self._current.value
        _check(cu, cu.set_current(self._context_arg), "cuCtxSetCurrent")
        try:
            for call, args, launch in self._calls:
                rc = call(*args)
                if rc:
                    _check(cu, rc, launch.what)
        finally:
            if previous:
                _check(cu, cu.set_current(ctypes.c_void_p(previous)), "cuCtxSetCurrent (restoring the caller's context)")

    def _set_stream(self, stream: int) -> None:
        for cell in self._streams:
            cell.value = stream
        self._stream = stream

    def _repoint(self, a: int, b: int, c: int) -> None:
        held = self._pointers
        for i, new in ((0, a), (1, b), (2, c)):
            if new != held[i]:
                held[i] = 0  # a failed encode must not leave a half-written operand trusted
                for view in self._views[i]:
                    view.value = new
                for tensor_map in self._maps[i]:
                    tensor_map.encode(new)
                    self.encodes += 1
                held[i] = new
