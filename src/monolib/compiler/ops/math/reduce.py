"""Reductions: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
ReduceL2, ReduceSumSquare, ReduceLogSum, ReduceLogSumExp.

ONNX specs: ``axes`` is an attribute up to ReduceSum-11 / the others' 13 and an
optional input from ReduceSum-13 / the others' 18, which also added
``noop_with_empty_axes``. ``keepdims`` keeps reduced dims as size 1.

The emitter collapses the input into alternating runs of kept and reduced dims and
picks one of three loop shapes: a contiguous row reduction (``[K, R]``, vectorized
through ``math_reduce.h`` for float32), a strided reduction into a row of
accumulators (``[K, R, K2]``, the inner loop vectorizes), or a general scatter into an
accumulator buffer. Sums accumulate in the element type (float32 like ONNX Runtime),
integer sums in 64 bits.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...symbolic import is_dim
from ..base import EmitContext, OutType, register
from ...backends.cstyle import c_literal, ctype
from ..tensor.flat import FlatEpilogueOp
from ..tensor.loops import (
    collapse_dims,
    contiguous_strides,
    emit_loops,
    flat_index_exprs,
    linear_offset,
    normalize_axis,
)
from .elementwise import cfn, is_float

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["Reduce", "acc_ctype", "reduce_axes"]

logger = logging.getLogger(__name__)


def acc_ctype(dtype: np.dtype) -> str:
    """Accumulator C type: the float type itself, 64-bit for integers."""
    dt = np.dtype(dtype)
    if is_float(dt):
        return ctype(dt)
    return "uint64_t" if dt.kind in "ub" else "int64_t"


@dataclass(frozen=True)
class _Kind:
    """How one reduction starts, accumulates and finishes."""

    np_fn: Callable[[np.ndarray, tuple, bool], np.ndarray]
    init: Callable[[np.dtype], str]
    combine: Callable[[str, str, np.dtype], str]
    finalize: Callable[[str, int, np.dtype], str]
    row: str = ""  # float32 helper in math_reduce.h for a contiguous row


def _bound(dt: np.dtype, low: bool):
    """The identity of max (``low``) or min: -inf/+inf, the integer limits, False/True."""
    dt = np.dtype(dt)
    if is_float(dt):
        return -np.inf if low else np.inf
    if dt.kind == "b":
        return not low
    return np.iinfo(dt).min if low else np.iinfo(dt).max


def _np(fn):
    def run(x, axes, keepdims):
        with np.errstate(all="ignore"):
            return fn(x, axes, keepdims)

    return run


def _mean_fin(a: str, n: int, dt) -> str:
    if is_dim(n):  # a run-time count: its C expression, converted
        return f"({a} / ({ctype(dt)})({n}))"
    return f"({a} / {c_literal(n, dt) if is_float(dt) else n})"


def _sqrt_fin(a: str, n: int, dt) -> str:
    return f"{cfn('sqrt', dt)}({a})" if is_float(dt) else f"(({acc_ctype(dt)})sqrt((double)({a})))"


def _log_fin(a: str, n: int, dt) -> str:
    return f"{cfn('log', dt)}({a})"


_ID = lambda a, n, dt: a
_ADD = lambda a, x, dt: f"{a} + {x}"
_SQ = lambda a, x, dt: f"{a} + {x} * {x}"


def _extreme(low: bool, np_fn, sym: str, row: str) -> _Kind:
    """ReduceMax (``low``: starts from the lowest value, keeps ``x > acc``) or ReduceMin
    (``x < acc``); a NaN propagates."""
    return _Kind(
        _np(lambda x, a, k: np_fn(x, a, keepdims=k, initial=_bound(x.dtype, low))),
        lambda dt: c_literal(_bound(dt, low), dt),
        lambda a, x, dt: f"((({x} {sym} {a}) | ({x} != {x})) ? {x} : {a})",  # branchless
        _ID,
        row,
    )


_KINDS: dict[str, _Kind] = {
    "ReduceSum": _Kind(
        _np(lambda x, a, k: np.sum(x, a, dtype=x.dtype, keepdims=k)),
        lambda dt: "0",
        _ADD,
        _ID,
        "ml_rsum_f32",
    ),
    "ReduceMean": _Kind(
        _np(lambda x, a, k: np.mean(x, a, keepdims=k)),
        lambda dt: "0",
        _ADD,
        _mean_fin,
        "ml_rsum_f32",
    ),
    "ReduceMax": _extreme(True, np.max, ">", "ml_rmax_f32"),
    "ReduceMin": _extreme(False, np.min, "<", "ml_rmin_f32"),
    "ReduceProd": _Kind(
        _np(lambda x, a, k: np.prod(x, a, dtype=x.dtype, keepdims=k)),
        lambda dt: "1",
        lambda a, x, dt: f"{a} * {x}",
        _ID,
    ),
    "ReduceL1": _Kind(
        _np(lambda x, a, k: np.sum(np.abs(x), a, dtype=x.dtype, keepdims=k)),
        lambda dt: "0",
        lambda a, x, dt: f"{a} + ({x} < 0 ? -{x} : {x})",
        _ID,
    ),
    "ReduceL2": _Kind(
        _np(lambda x, a, k: np.sqrt(np.sum(np.square(x), a, dtype=x.dtype, keepdims=k))),
        lambda dt: "0",
        _SQ,
        _sqrt_fin,
    ),
    "ReduceSumSquare": _Kind(
        _np(lambda x, a, k: np.sum(np.square(x), a, dtype=x.dtype, keepdims=k)),
        lambda dt: "0",
        _SQ,
        _ID,
    ),
    "ReduceLogSum": _Kind(
        _np(lambda x, a, k: np.log(np.sum(x, a, dtype=x.dtype, keepdims=k))),
        lambda dt: "0",
        _ADD,
        _log_fin,
        "ml_rsum_f32",
    ),
    "ReduceLogSumExp": _Kind(
        _np(lambda x, a, k: np.log(np.sum(np.exp(x), a, dtype=x.dtype, keepdims=k))),
        lambda dt: "0",
        lambda a, x, dt: f"{a} + {cfn('exp', dt)}({x})",
        _log_fin,
    ),
}


def reduce_axes(node: Node, rank: int, from_input: bool) -> tuple[int, ...]:
    """The sorted, non-negative axes ``node`` reduces (``()`` for a no-op).

    Raises
    ------
    ShapeError
        When the ``axes`` input is not a compile-time constant or an axis is out of
        range.
    """
    if from_input:
        v = node.input(1)
        if v is not None and not v.is_const:
            raise ShapeError(
                f"{node.op_type} (node {node.name!r}): the axes input must be a constant"
            )
        axes = [] if v is None else [int(a) for a in v.const.reshape(-1)]
        if not axes:
            return () if node.attrs["noop_with_empty_axes"] else tuple(range(rank))
    else:
        axes = node.attrs.get("axes")
        if axes is None:
            return tuple(range(rank))
    where = f"{node.op_type} (node {node.name!r})"
    return tuple(sorted({normalize_axis(int(a), rank, where) for a in axes}))


class Reduce(FlatEpilogueOp):
    """A reduction op; ``axes_input`` tells whether ``axes`` is input 1."""

    axes_input: ClassVar[bool] = False

    @property
    def kind(self) -> _Kind:
        return _KINDS[self.op_type]

    def axes(self, node: Node) -> tuple[int, ...]:
        return reduce_axes(node, len(node.inputs[0].shape), self.axes_input)

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        axes = self.axes(node)
        keep = node.attrs["keepdims"]
        shape = tuple((1 if keep else None) if d in axes else n for d, n in enumerate(x.shape))
        return [(tuple(n for n in shape if n is not None), x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        axes = self.axes(node)  # () reduces each element on its own (L2 gives |x|)
        out = self.kind.np_fn(x, axes, bool(node.attrs["keepdims"]))
        return [np.asarray(out).astype(x.dtype, copy=False).reshape(self.infer(node)[0][0])]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if y.size == 0:
            return ""
        axes = self.axes(node)
        kd = [1 if d in axes else n for d, n in enumerate(x.shape)]
        kd_strides = contiguous_strides(kd)
        out_strides = [0 if d in axes else kd_strides[d] for d in range(len(kd))]
        # math.prod keeps a run-time dim symbolic (its C renders over S)
        count = math.prod(x.shape[d] for d in axes)
        shape, (ist, ost) = collapse_dims(
            x.shape, [(contiguous_strides(x.shape), 0), (out_strides, 0)]
        )
        red = [s == 0 for s in ost]
        if len(shape) >= 1 and red[-1] and sum(red) == 1:
            return self._emit_rows(node, ctx, math.prod(shape[:-1]), shape[-1], count)
        if len(shape) >= 2 and red[-2] and not red[-1] and sum(red) == 1:
            k = math.prod(shape[:-2])
            return self._emit_strided(node, ctx, k, shape[-2], shape[-1], count)
        return self._emit_general(node, ctx, shape, ist, ost, count)

    # -- loop shapes -------------------------------------------------------------

    def _store(self, node, ctx, flat: str, acc: str, count: int) -> str:
        y = node.outputs[0]
        value = self.kind.finalize(acc, count, y.dtype)
        value = f"(({ctype(y.dtype)})({value}))"
        return f"{ctx.ptr(y)}[{flat}] = {ctx.output_expr(value, flat_index_exprs(flat, y.shape))};"

    def _emit_rows(self, node, ctx, k: int, r: int, count: int) -> str:
        """``[K, R]``: one accumulator per contiguous row of R elements."""
        x = node.inputs[0]
        kind, dt, act = self.kind, x.dtype, acc_ctype(x.dtype)
        o, j, acc = ctx.unique("o"), ctx.unique("j"), ctx.unique("acc")
        row = f"{ctx.ptr(x)} + {o}*{r}"
        if kind.row and dt == np.float32:
            ctx.include("math_reduce.h")
            reduce_row = f"{act} {acc} = {kind.row}({row}, {r});"
        elif self.op_type in ("ReduceL2", "ReduceSumSquare") and dt == np.float32:
            ctx.include("math_reduce.h")
            reduce_row = f"{act} {acc} = ml_rsumsq_f32({row}, {r}, 0.0f);"
        else:
            xi = f"{ctx.ptr(x)}[{o}*{r} + {j}]"
            reduce_row = (
                f"{act} {acc} = {kind.init(dt)};\n"
                f"for (int64_t {j} = 0; {j} < {r}; ++{j}) {acc} = {kind.combine(acc, xi, dt)};"
            )
        # rows are independent: on the pool when large (a float read counts 4 units)
        return ctx.parallel_for(o, k, f"{reduce_row}\n{self._store(node, ctx, o, acc, count)}",
                                k * r * 4)

    def _emit_strided(self, node, ctx, k: int, r: int, k2: int, count: int) -> str:
        """``[K, R, K2]``: a row of K2 accumulators updated by contiguous rows."""
        x = node.inputs[0]
        kind, dt, act = self.kind, x.dtype, acc_ctype(x.dtype)
        buf = ctx.unique("acc")
        o, q, j = ctx.unique("o"), ctx.unique("r"), ctx.unique("j")
        xi = f"{ctx.ptr(x)}[{o}*{r * k2} + {q}*{k2} + {j}]"
        return (
            f"{act}* {buf} = ({act}*){ctx.scratch(k2 * 8)};\n"
            f"for (int64_t {o} = 0; {o} < {k}; ++{o}) {{\n"
            f"for (int64_t {j} = 0; {j} < {k2}; ++{j}) {buf}[{j}] = {kind.init(dt)};\n"
            f"for (int64_t {q} = 0; {q} < {r}; ++{q})\n"
            f"for (int64_t {j} = 0; {j} < {k2}; ++{j}) {buf}[{j}] = {kind.combine(f'{buf}[{j}]', xi, dt)};\n"
            f"for (int64_t {j} = 0; {j} < {k2}; ++{j}) "
            f"{self._store(node, ctx, f'{o}*{k2} + {j}', f'{buf}[{j}]', count)}\n}}"
        )

    def _emit_general(self, node, ctx, shape, ist, ost, count: int) -> str:
        """Any axes: accumulate every input element into a full accumulator buffer."""
        x, y = node.inputs[0], node.outputs[0]
        kind, dt, act = self.kind, x.dtype, acc_ctype(x.dtype)
        buf, j = ctx.unique("acc"), ctx.unique("j")

        def body(idx):
            a = f"{buf}[{linear_offset(idx, ost)}]"
            return f"{a} = {kind.combine(a, f'{ctx.ptr(x)}[{linear_offset(idx, ist)}]', dt)};"

        return (
            f"{act}* {buf} = ({act}*){ctx.scratch(y.size * 8)};\n"
            f"for (int64_t {j} = 0; {j} < {y.size}; ++{j}) {buf}[{j}] = {kind.init(dt)};\n"
            f"{emit_loops(ctx, shape, body)}\n"
            f"for (int64_t {j} = 0; {j} < {y.size}; ++{j}) "
            f"{self._store(node, ctx, j, f'{buf}[{j}]', count)}"
        )


#: device reductions: op -> (initial value, combine(acc, v), finish(acc, count))
_DEVICE = {
    "ReduceMean": ("0", "acc + v", "acc / ({T})" + "{R}"),
    "ReduceSum": ("0", "acc + v", "acc"),
    "ReduceMax": ("(-INFINITY)", "(v > acc ? v : acc)", "acc"),
    "ReduceMin": ("INFINITY", "(v < acc ? v : acc)", "acc"),
    "ReduceProd": ("1", "acc * v", "acc"),
    "ReduceSumSquare": ("0", "acc + v * v", "acc"),
    "ReduceL1": ("0", "acc + (v < 0 ? -v : v)", "acc"),
}


def _emit_device(self: Reduce, node: Node, ctx: Any) -> Kernel:
    """Device ReduceMean/Sum/Max/Min/Prod/SumSquare/L1 over any axes (float): one
    output element per work item, a loop over the reduced elements; the method
    ``emit_device`` of those ops' classes (:func:`_define`)."""
    from ...backends.device.lowerings import decompose, element_kernel, flat_of

    x = node.inputs[0]
    if x.dtype.kind != "f":
        raise UnsupportedOpError(f"device {node.op_type} (node {node.name!r}): floats only")
    axes = self.axes(node)
    kept = [1 if d in axes else n for d, n in enumerate(x.shape)]
    red = [x.shape[d] for d in axes]
    R = max(1, math.prod(red))
    st = contiguous_strides(x.shape)
    T = ctype(node.outputs[0].dtype)
    init, comb, fin = _DEVICE[node.op_type]
    inner = [f"  {line}" for line in decompose("r", red, "j")] if red else []
    base = flat_of([f"i{d}" for d in range(len(kept))], st)
    off = flat_of([f"j{k}" for k in range(len(red))], [st[d] for d in axes])
    body = [
        *decompose("gid", kept, "i"),
        f"{ctx.language.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)} + {base};",
    ]
    if red and comb.startswith("acc + ") and isinstance(R, int) and R > 256:
        # a sum of ~sqrt(R) partial sums: one serial float sum over a 160x160 map (the
        # SE blocks of PP-OCRv6 det) drifts far more from ORT's than this
        B = math.isqrt(R - 1) + 1
        body += [
            f"{T} acc = 0;",
            f"for (idx_t r0 = 0; r0 < {R}; r0 += {B}) {{",
            f"  {T} part = 0;",
            f"  const idx_t r1 = r0 + {B} < {R} ? r0 + {B} : {R};",
            "  for (idx_t r = r0; r < r1; ++r) {",
            *[f"  {line}" for line in inner],
            f"    const {T} v = X[{off}];",
            f"    part += {comb[len('acc + '):]};",
            "  }",
            "  acc += part;",
            "}",
        ]
    else:
        body += [
            f"{T} acc = {init};",
            f"for (idx_t r = 0; r < {R if red else 1}; ++r) {{",
            *inner,
            f"  const {T} v = X[{off if red else '0'}];",
            f"  acc = {comb};",
            "}",
        ]
    body.append(f"acc = {fin.format(T=T, R=R)};")
    return element_kernel(node, ctx, body)


def _define(op_type: str, input_since: int) -> None:
    """Register the attribute-axes class (since 1) and the input-axes class."""
    doc = f"ONNX ``{op_type}``: {{}} (axes {{}}); see the module docstring."
    attr_cls = type(
        op_type + "_1",
        (Reduce,),
        {
            "op_type": op_type,
            "since_version": 1,
            "axes_input": False,
            "__doc__": doc.format(f"versions 1..{input_since - 1}", "attribute"),
        },
    )
    input_cls = type(
        op_type + f"_{input_since}",
        (Reduce,),
        {
            "op_type": op_type,
            "since_version": input_since,
            "axes_input": True,
            # 28 drops the integer types of ReduceLogSum(Exp): nothing more to handle
            "also_versions": (28,) if op_type in ("ReduceLogSum", "ReduceLogSumExp") else (),
            "__doc__": doc.format(f"versions {input_since}+", "input, noop_with_empty_axes"),
        },
    )
    if op_type in _DEVICE:
        attr_cls.emit_device = input_cls.emit_device = _emit_device
    register(attr_cls)
    register(input_cls)


for _op in _KINDS:
    _define(_op, 13 if _op == "ReduceSum" else 18)
