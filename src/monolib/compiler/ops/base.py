"""Operator definitions: the base class, the registry, and the emitter contract.

Every ONNX operator monolib supports is ONE class (one small file per op or small
family under ``compiler/ops/``), registered with :func:`register`. A class implements
one ONNX version range: the registry picks the newest class whose ``since_version`` is
not above the model's opset (the ONNX reference evaluator's rule).

What an op class provides
-------------------------
``infer(node)``
    Output types from input types: ``[(shape, dtype), ...]``, one per output. May
    read ``node.inputs[i].const`` (e.g. Reshape's target shape). Raise
    :class:`~monolib.errors.ShapeError` on inconsistent input.
``reference(node, inputs)``
    The NumPy reference: ``inputs`` is a list of ``np.ndarray`` (``None`` for an
    omitted optional input); returns a list of arrays, one per output. It is the
    oracle for constant folding and for tests, so it follows the ONNX spec exactly.
``emit(node, ctx)``
    C statements (a string) that compute the node's outputs, given an
    :class:`EmitContext`. Shapes are baked in as integer constants.
``c_expr(node, args)``  (elementwise ops only, ``elementwise = True``)
    A C expression of one output element from the C expressions ``args`` of the
    corresponding input elements (``""`` for an omitted optional input). Used by
    fused elementwise loops and by epilogues.
``emit_device(node, ctx)``  (ops that device targets run)
    The device lowering: a ``Kernel`` (work-item count and the scalar C body of one
    work item, ``backends/device/lowerings.py``), rendered as OpenCL C or CUDA C.
``epilogue_groups(node)``
    How the op's output 0 is viewed as ``[B, M, N]`` when it accepts a fused
    epilogue: a list of three lists of output dims (each list consecutive, in order,
    possibly empty), e.g. Conv NCHW -> ``[[0], [1], [2, 3]]``. ``None`` (default):
    the op takes no epilogue.

Attribute defaults are filled in by the frontend from ``onnx.defs.get_schema``; an op
reads ``node.attrs[...]`` directly and never types a default twice.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Protocol, Sequence

import numpy as np

from ...errors import CompileError, UnsupportedOpError
from ..backends.cstyle import STORAGE_TYPES
from ..ir import Node, Value

__all__ = [
    "OpDef",
    "EmitContext",
    "register",
    "lookup",
    "registered_ops",
    "compute_dtype",
    "is_storage",
    "Shape",
    "OutType",
    "op_of",
    "device_ops",
    "has_device_kernel",
]

Shape = tuple[int, ...]
OutType = tuple[Shape, np.dtype]

# (domain, op_type) -> classes sorted by since_version
_REGISTRY: dict[tuple[str, str], list[type["OpDef"]]] = {}

def is_storage(dtype: Any) -> bool:
    """True for a storage type (float16, bfloat16, float8, float4, int4/uint4, int2/uint2):
    C code holds its ONNX bit pattern and computes on :func:`compute_dtype`."""
    return np.dtype(dtype) in STORAGE_TYPES


def compute_dtype(dtype: Any) -> np.dtype:
    """The dtype a value of ``dtype`` is computed in: float32 for the storage floats,
    int32 for int4/uint4/int2/uint2, else ``dtype`` itself."""
    dt = np.dtype(dtype)
    if dt not in STORAGE_TYPES:
        return dt
    return np.dtype("int32") if "int" in dt.name else np.dtype("float32")


class EmitContext(Protocol):
    """What the C code generator gives an op's ``emit``.

    Inside the emitted statements two variables are in scope: ``params``
    (``const uint8_t*``, the params blob: weights, 64-byte aligned) and ``arena``
    (``uint8_t*``, the planned workspace holding every activation, the graph inputs
    and outputs).
    """

    def ptr(self, value: Value) -> str:
        """C expression of a typed pointer to ``value``'s data, e.g.
        ``((float*)(arena + 4096))`` or, for a constant, ``((const float*)(params + 128))``
        (the constant is added to the params blob on first use). For a node's output
        0 that has a fused epilogue, this is the buffer of the epilogue's final value."""

    def param(self, array: np.ndarray, hint: str) -> str:
        """Add a compile-time array (e.g. weights packed in a kernel's layout) to the
        params blob, 64-byte aligned; return a typed ``const`` pointer expression."""

    def scratch(self, nbytes: int) -> str:
        """A temporary buffer of ``nbytes`` in the arena, 64-byte aligned, valid only
        while this node runs: ``((uint8_t*)(arena + OFF))``."""

    def helper(self, code: str) -> None:
        """Add a top-level C definition (a static function...) once; identical texts
        are emitted once."""

    def include(self, header: str) -> None:
        """Paste kernel header ``header`` (e.g. ``"gemm.h"``, beside its op family)
        into the generated source, once. ``vmath.h`` (``ml_expf``), ``types.h``
        (storage-type conversions) and ``threadpool.h`` are always there
        (``backends.cstyle.HOST_C.headers``)."""

    def unique(self, prefix: str) -> str:
        """A fresh C identifier starting with ``prefix``."""

    def blocked(self, value: Value) -> bool:
        """Whether ``value`` (this node's input or output 0) is stored channel-blocked,
        ``[N][C/16][H][W][16]`` (NCHW16c), instead of row-major. Only between two convs
        whose algorithms both take it (``backends/c/layout.py``); an op that never reads
        or writes it there need not ask."""

    def side_inputs(self) -> bool:
        """Whether the chain fused after this node reads tensors besides its output (a
        residual Add's other operand; scalar constants do not count): its output then
        stays row-major (``backends/c/layout.py``)."""

    def tile_epilogue(self, groups: Sequence[Sequence[int]]) -> str:
        """Name of a generated C function
        ``void f(void* out, int64_t b, int64_t m0, int64_t m1, int64_t n0, int64_t n1)``
        that applies the fused epilogue in place to rows ``m0..m1`` and columns
        ``n0..n1`` of batch ``b`` of output 0 viewed as ``[B, M, N]`` (``groups`` as in
        :meth:`OpDef.epilogue_groups`); ``"0"`` (a null pointer) when the node has no
        epilogue. A kernel calls it on each finished tile, or once on the whole output."""

    def output_expr(self, acc: str, index: Sequence[str]) -> str:
        """C expression of the final (epilogue-applied) value of output 0's element
        whose value before the epilogue is ``acc`` and whose index in each output dim
        is ``index`` (C expressions). Identity when there is no epilogue."""

    def parallel_for(self, var: str, extent: Any, body: str, work: Any) -> str:
        """C statements running ``body`` for ``var`` in ``[0, extent)``: a plain loop, or
        blocks of ``var`` on the thread pool when ``work`` (multiply-adds, a float moved
        counting 4) is large enough. ``body`` writes disjoint data per ``var`` and uses
        no scratch; it may use ``params``, ``arena`` and ``S``."""


class OpDef:
    """Base class of an operator implementation (one ONNX version range).

    Subclasses set ``op_type`` and ``since_version`` and implement ``infer``,
    ``reference`` and ``emit`` (and ``c_expr`` when ``elementwise``).
    """

    op_type: ClassVar[str] = ""
    domain: ClassVar[str] = ""
    since_version: ClassVar[int] = 1
    #: output 0 is computed element by element from inputs broadcast to its shape;
    #: ``c_expr`` is implemented and the op can be fused.
    elementwise: ClassVar[bool] = False
    #: output 0 shares input 0's storage (Reshape, Squeeze, ...): ``emit`` returns "".
    alias: ClassVar[bool] = False
    #: ``reference`` may be used to fold the node when all its inputs are constant.
    foldable: ClassVar[bool] = True
    #: Newer ONNX versions of the op (``since_version`` of their schemas) whose changes
    #: this class handles: type-only additions (the C backend refuses a dtype it has
    #: no type for) or attributes it implements. :func:`lookup` refuses any other
    #: newer schema version at or above :data:`CHECKED_FROM`.
    also_versions: ClassVar[tuple[int, ...]] = ()
    #: Defaults of attributes the ONNX schema gives none for: optional attributes
    #: (``None``: absent), attributes that older versions of the op lack, ops of
    #: domains without an onnx schema. The one place such a default is written;
    #: schema defaults are filled in by the frontend. Read through :meth:`attr`.
    defaults: ClassVar[dict[str, Any]] = {}

    def attr(self, node: Node, name: str) -> Any:
        """Attribute ``name`` of ``node`` as the model gives it (or the schema default
        the frontend filled in), else this class's :attr:`defaults` entry.

        Raises
        ------
        CompileError
            When the node lacks the attribute and the class declares no default.
        """
        if name in node.attrs:
            return node.attrs[name]
        if name in self.defaults:
            return self.defaults[name]
        raise CompileError(
            f"{self.op_type} (node {node.name!r}): attribute {name!r} is missing and has no default"
        )

    def infer(self, node: Node) -> list[OutType]:
        raise NotImplementedError(f"{self.op_type}: infer")

    def reference(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        raise NotImplementedError(f"{self.op_type}: reference")

    def emit(self, node: Node, ctx: EmitContext) -> str:
        raise NotImplementedError(f"{self.op_type}: emit")

    def emit_device(self, node: Node, ctx: Any) -> Any:
        """The device lowering, counterpart of ``emit`` for OpenCL and CUDA targets.

        Parameters
        ----------
        node : Node
            The anchor node of a fused op.
        ctx : KernelContext
            ``backends.device.generate.KernelContext``: device pointers and the
            epilogue-applying ``store``.

        Returns
        -------
        Kernel
            ``backends.device.lowerings.Kernel``: the work-item count and the scalar
            C body of one work item.

        Raises
        ------
        UnsupportedOpError
            Here, in the base class: only classes that override this method have a
            device kernel (:func:`device_ops`).
        """
        raise UnsupportedOpError(f"{self.op_type} (node {node.name!r}) has no device kernel")

    def c_expr(self, node: Node, args: Sequence[str]) -> str:
        raise NotImplementedError(f"{self.op_type}: c_expr")

    def epilogue_groups(self, node: Node) -> list[list[int]] | None:
        return None

    def state_bytes(self, node: Node) -> int:
        """Bytes of state the op keeps in the arena from run to run (the random ops'
        generator): ``plan_memory`` gives it a region never reused, found at
        ``ctx.plan.state[node.name]``; the arena starts zeroed. 0 (default): none."""
        return 0


def register(cls: type[OpDef]) -> type[OpDef]:
    """Class decorator: register an op implementation under (domain, op_type)."""
    if not cls.op_type:
        raise TypeError(f"{cls.__name__} has no op_type")
    versions = _REGISTRY.setdefault((cls.domain, cls.op_type), [])
    if any(c.since_version == cls.since_version for c in versions):
        raise TypeError(f"{cls.op_type} version {cls.since_version} registered twice")
    versions.append(cls)
    versions.sort(key=lambda c: c.since_version)
    return cls


_INSTANCES: dict[type[OpDef], OpDef] = {}


#: Schema versions from this one on must be declared by the class that serves them
#: (``since_version`` or ``also_versions``). Versions up to 21 predate the check: the
#: frontend accepted opsets 11 to 21 when the op classes were written, and each class
#: follows the versions of that range it was written against.
CHECKED_FROM = 22


def _schema_since(op_type: str, opset: int, domain: str) -> int | None:
    """``since_version`` of the ONNX schema of ``op_type`` in effect at ``opset``
    (``None`` when ONNX defines no such schema, e.g. a custom domain)."""
    import onnx.defs

    try:
        return int(onnx.defs.get_schema(op_type, opset, domain).since_version)
    except onnx.defs.SchemaError:
        return None


def lookup(op_type: str, opset: int, domain: str = "", node_name: str = "") -> OpDef:
    """The implementation of ``op_type`` for a model whose ``domain`` opset is
    ``opset``: the newest registered class with ``since_version <= opset``.

    The class must also cover the ONNX schema in effect at ``opset``: when that
    schema (``onnx.defs.get_schema(op_type, opset).since_version``) is newer than the
    class and at least :data:`CHECKED_FROM`, the class must list it in
    ``also_versions``; otherwise ONNX changed the operator after the class was written
    and using it silently could compute the wrong thing.

    Raises
    ------
    UnsupportedOpError
        When the op is not implemented, only for newer versions, or only for older
        versions whose semantics the model's version changed; the message names the
        op, the node and the versions.
    """
    versions = _REGISTRY.get((domain, op_type))
    where = f" (node {node_name!r})" if node_name else ""
    qual = f"{domain}::{op_type}" if domain else op_type
    if not versions:
        raise UnsupportedOpError(f"operator {qual}{where} is not supported by monolib")
    chosen = [c for c in versions if c.since_version <= opset]
    have = ", ".join(str(c.since_version) for c in versions)
    if not chosen:
        raise UnsupportedOpError(
            f"operator {qual}{where} at opset {opset} is not supported; "
            f"monolib implements versions {have}"
        )
    cls = chosen[-1]
    since = _schema_since(op_type, opset, domain)
    if (
        since is not None
        and since > cls.since_version
        and since >= CHECKED_FROM
        and since not in cls.also_versions
    ):
        covered = ", ".join(str(v) for v in (cls.since_version, *cls.also_versions))
        raise UnsupportedOpError(
            f"operator {qual}{where} at opset {opset} is version {since} of the ONNX "
            f"spec; monolib implements versions {covered} (classes {have}), and "
            f"version {since} changed the operator"
        )
    inst = _INSTANCES.get(cls)
    if inst is None:
        inst = _INSTANCES[cls] = cls()
    return inst


def registered_ops() -> dict[tuple[str, str], list[int]]:
    """Every registered (domain, op_type) with the versions implemented."""
    return {k: [c.since_version for c in v] for k, v in sorted(_REGISTRY.items())}


def has_device_kernel(op: OpDef) -> bool:
    """True when ``op``'s class overrides :meth:`OpDef.emit_device`."""
    return type(op).emit_device is not OpDef.emit_device


def device_ops() -> list[str]:
    """ONNX op types (default domain) with a device lowering in some registered
    version: the classes that override :meth:`OpDef.emit_device`."""
    return sorted(
        t
        for (domain, t), classes in _REGISTRY.items()
        if not domain and any(c.emit_device is not OpDef.emit_device for c in classes)
    )


def op_of(node: Node) -> OpDef:
    """The implementation for ``node`` (by its op_type, domain and opset)."""
    return lookup(node.op_type, node.opset, node.domain, node.name)


Reference = Callable[[Node, list], list]
