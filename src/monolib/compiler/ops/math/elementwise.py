"""The elementwise op base class: broadcast inference, a generic loop emitter, and
helpers that build C expressions safely.

An elementwise op only states its NumPy function (``np_fn``) and its C expression
(``c_expr``); shape inference (ONNX multidirectional broadcasting), the reference and
a standalone loop (used when the code generator does not fuse the node into a chain)
come from :class:`Elementwise`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, Value
from ...symbolic import Dim
from ..base import EmitContext, OpDef, OutType
from ...backends.cstyle import bound_expression, c_literal, ctype
from ..tensor.loops import (
    broadcast_shape,
    broadcast_strides,
    collapse_dims,
    contiguous_strides,
    emit_loops,
    has_epilogue,
    linear_offset,
)

__all__ = [
    "Elementwise",
    "at_least",
    "at_most",
    "bind",
    "cast_expr",
    "cfn",
    "const_scalar",
    "input_dtype",
    "is_float",
]

logger = logging.getLogger(__name__)

# a call (other than the INT64_C literal macro) or a nested bound expression (GNU
# statement expression or CUDA lambda, see bind)
_CALL = re.compile(r"(?<!INT64_C)(?<![A-Za-z0-9_])(?!INT64_C\b)[A-Za-z_][A-Za-z0-9_]*\s*\(|\(\{|\[&\]|\?")


def is_float(dtype: np.dtype) -> bool:
    """True for floating point dtypes."""
    return np.dtype(dtype).kind == "f"


#: float32 functions with a branch-free definition in vmath.h
_VMATH = {"exp": "ml_expf", "erf": "ml_erff", "tanh": "ml_tanhf"}


def cfn(name: str, dtype: np.dtype) -> str:
    """The C math function ``name`` for ``dtype``: ``sqrtf`` for float32, ``sqrt`` for
    float64 (C99 ``<math.h>`` names; ``fabs`` for ``abs``); float32 ``exp``, ``erf`` and
    ``tanh`` are ``ml_expf``, ``ml_erff`` and ``ml_tanhf`` (``backends/c/kernels/vmath.h``:
    they vectorize on every target, erf 2.4x faster than libmvec's, tanh 1.25x)."""
    dt = np.dtype(dtype)
    if dt == np.float32:
        return _VMATH.get(name, name + "f")
    if dt == np.float64:
        return name
    raise UnsupportedOpError(f"math function {name} is not defined for dtype {dt}")


def at_least(x: str, lo: str, dt: np.dtype) -> str:
    """C ``x < lo ? lo : x`` (a NaN ``x`` stays NaN), ``x`` a bound name or simple
    expression: ``ml_atleastf`` for float32 (vmath.h: a select gcc vectorizes as a compare
    and a masked move, where nested ternaries inside a product cost 1.7x more)."""
    return f"ml_atleastf({x}, {lo})" if np.dtype(dt) == np.float32 else f"({x} < {lo} ? {lo} : {x})"


def at_most(x: str, hi: str, dt: np.dtype) -> str:
    """C ``x > hi ? hi : x`` (see :func:`at_least`; ``ml_atmostf`` for float32)."""
    return f"ml_atmostf({x}, {hi})" if np.dtype(dt) == np.float32 else f"({x} > {hi} ? {hi} : {x})"


def cast_expr(expr: str, dtype: np.dtype) -> str:
    """``expr`` converted to ``dtype`` in C (bool becomes ``0``/``1``)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return f"((uint8_t)(({expr}) != 0))"
    return f"(({ctype(dt)})({expr}))"


def bind(args: Sequence[str], dtypes: Sequence[np.dtype], body: Callable[..., str],
         loads: bool = False) -> str:
    """``body(*names)`` where each argument expression is evaluated once.

    Simple arguments (a literal, an identifier, an array element) are passed as they
    are; others are bound to fresh temporaries, so an expression that uses its argument
    twice (``x * x``, ``x > 0 ? x : 0``) neither recomputes nor re-reads it. ``loads``:
    array elements are bound too, so a ternary that reads one in a single arm (PRelu's
    ``x >= 0 ? x : x * slope[c]``) reads it every time and the compiler may turn it
    into a vector blend (gcc does not speculate a conditional load: such a loop stayed
    scalar, a compare and a branch per element, 4.6 ns an element). The
    binding is spelled by the language being written
    (:func:`~monolib.compiler.backends.cstyle.bound_expression`): a GNU statement
    expression ``({ float t = ...; ...; })`` in C and OpenCL C, a lambda called in
    place in CUDA C.
    """
    decls, names = [], []
    for a, dt in zip(args, dtypes):
        if len(a) < 160 and not _CALL.search(a) and not (loads and "[" in a):
            names.append(a)
            continue
        # named after the expression (not a counter) so the generated C is deterministic
        t = f"ml_t{len(decls)}_{hashlib.sha1(a.encode()).hexdigest()[:8]}"
        decls.append(f"{ctype(dt)} {t} = {a};")
        names.append(t)
    return bound_expression(decls, body(*names))


def const_scalar(value: Value | None) -> float | int | None:
    """The single value of a constant whose elements are all equal, else ``None``."""
    if value is None or value.const is None or value.const.size == 0:
        return None
    flat = value.const.reshape(-1)
    first = flat[0]
    if flat.size > 1 and not np.all(flat == first):
        return None
    return first.item()


def input_dtype(node: Node, i: int = 0) -> np.dtype:
    """The dtype of input ``i`` (``float32`` when omitted)."""
    v = node.input(i)
    return v.dtype if v is not None else np.dtype("float32")


def _holds_dims(a: np.ndarray) -> bool:
    """True for an ``object`` array holding run-time Dims (a symbolic shape value)."""
    return any(isinstance(v, Dim) for v in a.reshape(-1))


class Elementwise(OpDef):
    """Base of ops whose output 0 is a function of the broadcast input elements.

    Subclasses set ``np_fn`` (the reference on broadcast arrays) and implement
    ``c_expr``; ``out_dtype`` overrides the output type (default: input 0's).
    ``float_only`` rejects integer inputs where ONNX does.
    """

    elementwise: ClassVar[bool] = True
    float_only: ClassVar[bool] = False
    #: indices of the inputs that broadcast to the output (default: all present)
    data_inputs: ClassVar[tuple[int, ...] | None] = None

    def np_fn(self, node: Node, *xs: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{self.op_type}: np_fn")

    def out_dtype(self, node: Node) -> np.dtype:
        return input_dtype(node, 0)

    def _data(self, node: Node) -> list[Value]:
        idx = self.data_inputs if self.data_inputs is not None else range(len(node.inputs))
        return [node.inputs[i] for i in idx if node.input(i) is not None]

    def _loaded(self, node: Node) -> list[Value | None]:
        """The inputs as the C loop reads them: non-data inputs become ``None``."""
        keep = self.data_inputs
        return [v if keep is None or i in keep else None for i, v in enumerate(node.inputs)]

    def infer(self, node: Node) -> list[OutType]:
        """Output shape: the ONNX multidirectional broadcast of the data inputs.

        Raises
        ------
        ShapeError
            For shapes that do not broadcast.
        UnsupportedOpError
            For an integer input to a float-only op.
        """
        data = self._data(node)
        if self.float_only and not is_float(data[0].dtype):
            raise UnsupportedOpError(
                f"{self.op_type} (node {node.name!r}) takes float inputs, got {data[0].dtype}"
            )
        shape = broadcast_shape(*(v.shape for v in data), where=f"{self.op_type} {node.name!r}")
        return [(shape, self.out_dtype(node))]

    def reference(self, node: Node, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        """Apply ``np_fn``; the result is cast to the inferred dtype and shape."""
        shape, dtype = self.infer(node)[0]
        with np.errstate(all="ignore"):
            out = self.np_fn(node, *inputs)
        out = np.asarray(out)
        if not (out.dtype == object and dtype.kind in "iu" and _holds_dims(out)):
            out = out.astype(dtype, copy=False)  # Dims of a shape computation stay
        if out.shape != shape:
            out = np.broadcast_to(out, shape).copy()
        return [out]

    def c_args(self, node: Node, ctx: EmitContext, index: Sequence[str], out_shape) -> list[str]:
        """C expressions of each input element at output position ``index``: a literal
        for a constant scalar, else a load with broadcast strides."""
        args = []
        for v in self._loaded(node):
            if v is None:
                args.append("")
                continue
            s = const_scalar(v) if v.size == 1 else None
            if s is not None:
                args.append(c_literal(s, v.dtype))
            else:
                strides = broadcast_strides(v.shape, out_shape)
                args.append(f"{ctx.ptr(v)}[{linear_offset(index, strides)}]")
        return args

    def emit(self, node: Node, ctx: EmitContext) -> str:
        """One loop nest over the output (used when the node is not fused into a
        chain): ``out[i] = epilogue(c_expr(inputs[i]))``. Dims are collapsed when
        there is no epilogue needing per-dim indices."""
        out = node.outputs[0]
        shape = out.shape
        if has_epilogue(ctx, len(shape)):
            return emit_loops(ctx, shape, lambda idx: self._store(node, ctx, idx, idx, shape))
        present = [v for v in self._loaded(node) if v is not None and v.size != 1]
        operands = [(contiguous_strides(shape), 0)] + [
            (broadcast_strides(v.shape, shape), 0) for v in present
        ]
        cshape, cstrides = collapse_dims(shape, operands)
        if not cshape and any(n == 0 for n in shape):
            return ""

        def body(idx: list[str]) -> str:
            args = []
            it = iter(cstrides[1:])
            for v in self._loaded(node):
                if v is None:
                    args.append("")
                elif v.size == 1:
                    s = const_scalar(v)
                    args.append(c_literal(s, v.dtype) if s is not None else f"{ctx.ptr(v)}[0]")
                else:
                    args.append(f"{ctx.ptr(v)}[{linear_offset(idx, next(it))}]")
            value = ctx.output_expr(self.c_expr(node, args), ["0"] * len(shape))
            return f"{ctx.ptr(out)}[{linear_offset(idx, cstrides[0])}] = {value};"

        return emit_loops(ctx, cshape, body)

    def _store(self, node, ctx, idx, out_idx, shape) -> str:
        args = self.c_args(node, ctx, idx, shape)
        value = ctx.output_expr(self.c_expr(node, args), out_idx)
        off = linear_offset(idx, contiguous_strides(shape))
        return f"{ctx.ptr(node.outputs[0])}[{off}] = {value};"


def check_same_dtype(node: Node) -> None:
    """Raise :class:`ShapeError` when the present inputs' dtypes differ (ONNX binary
    ops take one type ``T``)."""
    dts = {v.dtype for v in node.inputs if v is not None}
    if len(dts) > 1:
        raise ShapeError(
            f"{node.op_type} (node {node.name!r}): inputs have different dtypes {sorted(map(str, dts))}"
        )
