"""The launch manifest, ABI `kaas.hgemm.v1` (see src/manifest.rs in the service), and the
pure parts of launching one: tensor-map geometry and kernel-parameter packing. Nothing here
needs a GPU, torch or cuda-python."""

from __future__ import annotations

import ctypes
import re
import struct
from dataclasses import dataclass
from typing import Callable, Union

from .errors import LaunchError, ManifestError

ABI = "kaas.hgemm.v1"

ARCHS = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
ACCS = ("f16", "f32")
LAYOUTS = ("nn", "tn")
MAX_DIM = 65_536

MAX_LAUNCHES = 8
MAX_PARAMS = 32
MAX_THREADS_PER_BLOCK = 1024
MAX_CLUSTER_BLOCKS = 16
MAX_SHARED_MEM_BYTES = 232_448
MAX_WORKSPACE_BYTES = 1 << 30
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65_535

SWIZZLES = {"none": None, "32B": 32, "64B": 64, "128B": 128}
# A tensor map's optional `l2_promotion` and the CUtensorMapL2promotion suffix it names.
L2_PROMOTIONS = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}
TENSOR_MAP_BYTES = 128


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _uint(v, what: str, bits: int = 32) -> int:
    if not _is_int(v) or not 0 <= v < 2**bits:
        raise ManifestError(f"{what} = {v!r} is not an unsigned {bits}-bit integer")
    return v


def _fields(d, what: str, required: tuple, optional: tuple = (), strict: bool = True) -> dict:
    if not isinstance(d, dict):
        raise ManifestError(f"{what} must be a JSON object, got {type(d).__name__}")
    missing = [f for f in required if f not in d]
    if missing:
        raise ManifestError(f"{what}: missing field `{missing[0]}`")
    unknown = [f for f in d if f not in required + optional]
    if strict and unknown:
        raise ManifestError(f"{what}: unknown field `{unknown[0]}`")
    return d


def _triple(v, what: str) -> tuple[int, int, int]:
    if not isinstance(v, list) or len(v) != 3:
        raise ManifestError(f"{what} must be a list of 3 integers, got {v!r}")
    return tuple(_uint(x, what) for x in v)  # type: ignore[return-value]


# --------------------------------------------------------------------------------------
# Problem


@dataclass(frozen=True)
class Problem:
    """`(arch, acc, layout, m, n, k)`: A is row-major M×K, C row-major M×N; `nn`: B is
    row-major K×N; `tn`: B is stored N×K row-major. C = A·B."""

    arch: str
    acc: str
    layout: str
    m: int
    n: int
    k: int

    def __post_init__(self):
        if self.arch not in ARCHS:
            raise ManifestError(f"unknown arch `{self.arch}`: expected one of {', '.join(ARCHS)}")
        if self.acc not in ACCS:
            raise ManifestError(f"unknown accumulator `{self.acc}`: expected `f16` or `f32`")
        if self.layout not in LAYOUTS:
            raise ManifestError(f"unknown layout `{self.layout}`: expected `nn` or `tn`")
        for dim in "mnk":
            v = getattr(self, dim)
            if not _is_int(v) or not 1 <= v <= MAX_DIM:
                raise ManifestError(f"{dim.upper()} = `{v}` is not a whole number from 1 to {MAX_DIM}")

    @classmethod
    def from_dict(cls, d) -> "Problem":
        d = _fields(d, "problem", ("arch", "acc", "layout", "m", "n", "k"), strict=False)
        return cls(d["arch"], d["acc"], d["layout"], d["m"], d["n"], d["k"])

    @classmethod
    def parse(cls, path: str) -> "Problem":
        """Reads `{arch}/{acc}/{layout}/{m}x{n}x{k}`, e.g. `sm_90/f32/tn/4096x4096x4096`."""
        parts = path.strip("/").split("/")
        if len(parts) != 4:
            raise ManifestError(f"`{path}` is not of the form arch/acc/layout/MxNxK")
        m, n, k = parse_shape(parts[3])
        return cls(parts[0], parts[1], parts[2], m, n, k)

    def to_dict(self) -> dict:
        return {"arch": self.arch, "acc": self.acc, "layout": self.layout, "m": self.m, "n": self.n, "k": self.k}

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def path(self) -> str:
        """The URL path segment `{arch}/{acc}/{layout}/{m}x{n}x{k}`."""
        return f"{self.arch}/{self.acc}/{self.layout}/{self.shape}"

    def __str__(self) -> str:
        return self.path

    def operand_shape(self, operand: str) -> tuple[int, int]:
        """(rows, cols) of a row-major operand: A M×K; B K×N (`nn`) or N×K (`tn`); C M×N."""
        if operand == "A":
            return (self.m, self.k)
        if operand == "B":
            return (self.k, self.n) if self.layout == "nn" else (self.n, self.k)
        if operand == "C":
            return (self.m, self.n)
        raise ManifestError(f"unknown operand `{operand}`")

    def compute_capability(self) -> tuple[int, int]:
        return {"sm_80": (8, 0), "sm_86": (8, 6), "sm_89": (8, 9), "sm_90": (9, 0), "sm_90a": (9, 0)}[self.arch]

    def runs_on(self, cc: tuple[int, int]) -> bool:
        """Whether PTX for this arch runs on a device of compute capability `cc`
        (`sm_90a` only on exactly 9.0)."""
        return cc == (9, 0) if self.arch == "sm_90a" else tuple(cc) >= self.compute_capability()


def parse_shape(s: str) -> tuple[int, int, int]:
    """`MxNxK` → (m, n, k), digits only, each 1..=65536."""
    parts = s.split("x")
    if len(parts) != 3:
        raise ManifestError(f"shape `{s}` is not of the form MxNxK (e.g. 4096x4096x4096)")
    out = []
    for dim, v in zip("MNK", parts):
        if not v or len(v) > 6 or not v.isascii() or not v.isdigit() or not 1 <= int(v) <= MAX_DIM:
            raise ManifestError(f"{dim} = `{v}` is not a whole number from 1 to {MAX_DIM}")
        out.append(int(v))
    return tuple(out)  # type: ignore[return-value]


def parse_problem(text: str, arch: str = "sm_90", acc: str = "f32") -> Problem:
    """`tn/64x4096x4096` (arch and acc from the arguments) or a full
    `sm_90/f32/tn/64x4096x4096`."""
    parts = text.strip("/").split("/")
    if len(parts) == 2:
        m, n, k = parse_shape(parts[1])
        return Problem(arch, acc, parts[0], m, n, k)
    return Problem.parse(text)


# --------------------------------------------------------------------------------------
# Params


@dataclass(frozen=True)
class Ptr:
    """`{"ptr": "A"|"B"|"C"|"workspace"}`: a device pointer (8 bytes)."""

    buffer: str


@dataclass(frozen=True)
class I32:
    """`{"i32": "M"|"N"|"K"}` or `{"i32": <int>}`: a 32-bit integer (4 bytes)."""

    value: Union[str, int]


@dataclass(frozen=True)
class TensorMap:
    """`{"tensor_map": {"operand", "box", "swizzle"[, "l2_promotion"]}}`: a 128-byte
    CUtensorMap by value; `l2_promotion` is "128B" when absent."""

    operand: str
    box: tuple[int, int]
    swizzle: str
    l2_promotion: str = "128B"


Param = Union[Ptr, I32, TensorMap]
PARAM_BYTES = {Ptr: 8, I32: 4, TensorMap: TENSOR_MAP_BYTES}


def parse_param(d, what: str = "param") -> Param:
    if not isinstance(d, dict) or len(d) != 1:
        raise ManifestError(f"{what} must be an object with exactly one of `ptr`, `i32`, `tensor_map`, got {d!r}")
    ((kind, v),) = d.items()
    if kind == "ptr":
        if v not in ("A", "B", "C", "workspace"):
            raise ManifestError(f"{what}: ptr `{v}` is not one of A, B, C, workspace")
        return Ptr(v)
    if kind == "i32":
        if v in ("M", "N", "K"):
            return I32(v)
        if _is_int(v) and -(2**31) <= v < 2**31:
            return I32(v)
        raise ManifestError(f"{what}: i32 `{v!r}` is neither M, N, K nor a 32-bit integer")
    if kind == "tensor_map":
        t = _fields(v, f"{what}: tensor_map", ("operand", "box", "swizzle"), ("l2_promotion",))
        if t["operand"] not in ("A", "B", "C"):
            raise ManifestError(f"{what}: tensor map operand `{t['operand']}` is not one of A, B, C")
        box = t["box"]
        if not isinstance(box, list) or len(box) != 2:
            raise ManifestError(f"{what}: tensor map box must be a list of 2 integers, got {box!r}")
        box = tuple(_uint(x, f"{what}: tensor map box") for x in box)
        if t["swizzle"] not in SWIZZLES:
            raise ManifestError(f"{what}: swizzle `{t['swizzle']}` is not one of {', '.join(SWIZZLES)}")
        promotion = t.get("l2_promotion", "128B")
        if promotion not in L2_PROMOTIONS:
            raise ManifestError(f"{what}: l2_promotion `{promotion}` is not one of {', '.join(L2_PROMOTIONS)}")
        return TensorMap(t["operand"], box, t["swizzle"], promotion)  # type: ignore[arg-type]
    raise ManifestError(f"{what}: unknown param kind `{kind}` (expected ptr, i32 or tensor_map)")


def param_to_dict(p: Param) -> dict:
    if isinstance(p, Ptr):
        return {"ptr": p.buffer}
    if isinstance(p, I32):
        return {"i32": p.value}
    t = {"operand": p.operand, "box": list(p.box), "swizzle": p.swizzle}
    if p.l2_promotion != "128B":
        t["l2_promotion"] = p.l2_promotion
    return {"tensor_map": t}


# --------------------------------------------------------------------------------------
# Manifest


@dataclass(frozen=True)
class Launch:
    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cluster: tuple[int, int, int]
    shared_mem_bytes: int
    params: tuple[Param, ...]

    @classmethod
    def from_dict(cls, d, what: str = "launch") -> "Launch":
        d = _fields(d, what, ("entry", "grid", "block", "params"), ("cluster", "shared_mem_bytes"))
        if not isinstance(d["entry"], str):
            raise ManifestError(f"{what}: entry must be a string")
        if not isinstance(d["params"], list):
            raise ManifestError(f"{what}: params must be a list")
        return cls(
            entry=d["entry"],
            grid=_triple(d["grid"], f"{what}: grid"),
            block=_triple(d["block"], f"{what}: block"),
            cluster=_triple(d.get("cluster", [1, 1, 1]), f"{what}: cluster"),
            shared_mem_bytes=_uint(d.get("shared_mem_bytes", 0), f"{what}: shared_mem_bytes"),
            params=tuple(parse_param(p, f"{what}: param {i}") for i, p in enumerate(d["params"])),
        )

    def to_dict(self) -> dict:
        return {
            "entry": self.entry,
            "grid": list(self.grid),
            "block": list(self.block),
            "cluster": list(self.cluster),
            "shared_mem_bytes": self.shared_mem_bytes,
            "params": [param_to_dict(p) for p in self.params],
        }

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]

    @property
    def cluster_blocks(self) -> int:
        return self.cluster[0] * self.cluster[1] * self.cluster[2]

    @property
    def param_sizes(self) -> list[int]:
        """Bytes of each parameter, in order, as the entry must declare them."""
        return [PARAM_BYTES[type(p)] for p in self.params]

    def validate(self, workspace_bytes: int) -> None:
        """The service's structural checks (src/manifest.rs); raises with the message only."""
        if not re.fullmatch(r"[A-Za-z_$][A-Za-z0-9_$]*", self.entry) or len(self.entry) > 1024:
            raise ValueError(f"entry `{self.entry}` is not a PTX identifier")
        gx, gy, gz = self.grid
        if 0 in self.grid or gx > MAX_GRID_X or gy > MAX_GRID_YZ or gz > MAX_GRID_YZ:
            raise ValueError(f"grid {list(self.grid)} is outside 1..=[{MAX_GRID_X}, {MAX_GRID_YZ}, {MAX_GRID_YZ}]")
        if 0 in self.block or self.block[2] > 64 or self.threads_per_block > MAX_THREADS_PER_BLOCK:
            raise ValueError(f"block {list(self.block)} must have 1 to {MAX_THREADS_PER_BLOCK} threads (z at most 64)")
        if 0 in self.cluster or self.cluster_blocks > MAX_CLUSTER_BLOCKS:
            raise ValueError(f"cluster {list(self.cluster)} must have 1 to {MAX_CLUSTER_BLOCKS} blocks")
        if any(g % c for g, c in zip(self.grid, self.cluster)):
            raise ValueError(f"grid {list(self.grid)} is not a whole number of clusters {list(self.cluster)}")
        if self.shared_mem_bytes > MAX_SHARED_MEM_BYTES:
            raise ValueError(f"shared_mem_bytes = {self.shared_mem_bytes} exceeds {MAX_SHARED_MEM_BYTES}")
        if len(self.params) > MAX_PARAMS:
            raise ValueError(f"{len(self.params)} params; at most {MAX_PARAMS}")
        for i, p in enumerate(self.params):
            if p == Ptr("workspace") and workspace_bytes == 0:
                raise ValueError(f"param {i} points at the workspace, but workspace_bytes is 0")
            if isinstance(p, TensorMap):
                if any(not 1 <= d <= 256 for d in p.box):
                    raise ValueError(f"param {i}: tensor map box {list(p.box)} must be 1..=256 in each dimension")
                inner = p.box[0] * 2
                span = SWIZZLES[p.swizzle]
                if inner % 16 or (span is not None and inner > span):
                    raise ValueError(
                        f"param {i}: tensor map inner box of {inner} bytes must be a multiple of 16 "
                        f"and fit the {p.swizzle} swizzle"
                    )


@dataclass(frozen=True)
class Manifest:
    problem: Problem
    launches: tuple[Launch, ...]
    workspace_bytes: int = 0
    abi: str = ABI

    @classmethod
    def from_dict(cls, d) -> "Manifest":
        """Parses and validates a manifest (a decoded JSON object)."""
        d = _fields(d, "manifest", ("abi", "problem", "launches"), ("workspace_bytes",))
        if d["abi"] != ABI:
            raise ManifestError(f"abi is `{d['abi']}`; this client speaks `{ABI}`")
        try:
            problem = Problem.from_dict(d["problem"])
        except ManifestError as e:
            raise ManifestError(f"problem: {e}") from None
        if not isinstance(d["launches"], list):
            raise ManifestError("launches must be a list")
        m = cls(
            problem=problem,
            launches=tuple(Launch.from_dict(l, f"launch {i}") for i, l in enumerate(d["launches"])),
            workspace_bytes=_uint(d.get("workspace_bytes", 0), "workspace_bytes", 64),
        )
        m.validate()
        return m

    def validate(self) -> None:
        if not 1 <= len(self.launches) <= MAX_LAUNCHES:
            raise ManifestError(f"a manifest needs 1 to {MAX_LAUNCHES} launches, this one has {len(self.launches)}")
        if self.workspace_bytes > MAX_WORKSPACE_BYTES:
            raise ManifestError(f"workspace_bytes = {self.workspace_bytes} exceeds the limit of {MAX_WORKSPACE_BYTES}")
        for i, launch in enumerate(self.launches):
            try:
                launch.validate(self.workspace_bytes)
            except ValueError as e:
                raise ManifestError(f"launch {i}: {e}") from None

    def to_dict(self) -> dict:
        return {
            "abi": self.abi,
            "problem": self.problem.to_dict(),
            "workspace_bytes": self.workspace_bytes,
            "launches": [l.to_dict() for l in self.launches],
        }

    def entries(self) -> list[str]:
        """Entry names in launch order, without repeats."""
        return list(dict.fromkeys(l.entry for l in self.launches))


# --------------------------------------------------------------------------------------
# Tensor maps and kernel parameters


def tensor_map_geometry(problem: Problem, operand: str) -> tuple[tuple[int, int], int]:
    """Global dims (innermost first) and row stride in bytes of a row-major fp16 operand,
    exactly as the service's launcher (src/gpu/launch.rs): A [K, M]; B `nn` [N, K];
    B `tn` [K, N]; C [N, M]; stride = innermost extent × 2."""
    rows, cols = problem.operand_shape(operand)
    return (cols, rows), cols * 2


@dataclass(frozen=True)
class TensorMapRequest:
    """Every argument of the cuTensorMapEncodeTiled call for one tensor-map param."""

    address: int
    dims: tuple[int, int]
    row_stride_bytes: int
    box: tuple[int, int]
    swizzle: str
    element_strides: tuple[int, int] = (1, 1)
    data_type: str = "FLOAT16"
    interleave: str = "NONE"
    l2_promotion: str = "L2_128B"
    oob_fill: str = "NONE"
    rank: int = 2


def tensor_map_request(problem: Problem, spec: TensorMap, address: int) -> TensorMapRequest:
    dims, stride = tensor_map_geometry(problem, spec.operand)
    if stride % 16:
        raise LaunchError(
            f"tensor map over {spec.operand}: its rows are {stride} bytes apart; a tensor map needs a "
            f"multiple of 16 (the row length must be a multiple of 8 fp16 values)"
        )
    if address % 16:
        raise LaunchError(f"tensor map over {spec.operand}: address {address:#x} is not 16-byte aligned")
    return TensorMapRequest(
        address=address, dims=dims, row_stride_bytes=stride, box=spec.box, swizzle=spec.swizzle,
        l2_promotion=L2_PROMOTIONS[spec.l2_promotion],
    )


class Arg:
    """One kernel argument's bytes, in host memory we own, aligned, so that its address
    can go into the `void**` array the driver reads."""

    def __init__(self, data: bytes, align: int = 8):
        self.data = bytes(data)
        self._buf = (ctypes.c_ubyte * (len(self.data) + align))()
        base = ctypes.addressof(self._buf)
        self.address = (base + align - 1) // align * align
        ctypes.memmove(self.address, self.data, len(self.data))

    @property
    def size(self) -> int:
        return len(self.data)

    def __repr__(self) -> str:
        return f"Arg({self.size} bytes)"


def pack_params(
    params: tuple[Param, ...],
    problem: Problem,
    pointers: dict,
    encode_tensor_map: Callable[[TensorMapRequest], bytes],
) -> list[Arg]:
    """Encodes a launch's params in order. `pointers` maps A, B, C (and workspace, where
    the manifest uses one) to device addresses; `encode_tensor_map` turns a request into
    the 128 bytes of a CUtensorMap."""
    dims = {"M": problem.m, "N": problem.n, "K": problem.k}
    args = []
    for i, p in enumerate(params):
        if isinstance(p, Ptr):
            addr = pointers.get(p.buffer)
            if not _is_int(addr) or not 0 < addr < 2**64:
                raise LaunchError(f"param {i}: no device address for `{p.buffer}`")
            args.append(Arg(struct.pack("<Q", addr)))
        elif isinstance(p, I32):
            v = dims[p.value] if isinstance(p.value, str) else p.value
            args.append(Arg(struct.pack("<i", v)))
        elif isinstance(p, TensorMap):
            addr = pointers.get(p.operand)
            if not _is_int(addr) or not 0 < addr < 2**64:
                raise LaunchError(f"param {i}: no device address for `{p.operand}`")
            blob = encode_tensor_map(tensor_map_request(problem, p, addr))
            if len(blob) != TENSOR_MAP_BYTES:
                raise LaunchError(f"param {i}: tensor map is {len(blob)} bytes, not {TENSOR_MAP_BYTES}")
            args.append(Arg(blob, align=128))
        else:  # pragma: no cover - parse_param makes only these
            raise LaunchError(f"param {i}: unknown kind {p!r}")
    return args


def kernel_params(args: list[Arg]):
    """The `void**` array for cuLaunchKernel(Ex): one pointer per argument, in order."""
    return (ctypes.c_void_p * max(1, len(args)))(*[a.address for a in args])
