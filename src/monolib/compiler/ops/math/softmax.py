"""Softmax and LogSoftmax.

ONNX specs: versions 1 and 11 coerce the input to 2-D ``[prod(shape[:axis]),
prod(shape[axis:])]`` and normalize over the second dim (default ``axis=1``); version
13 normalizes over the single dim ``axis`` (default ``-1``). Both are computed the
stable way, ``exp(x - max)``.

The emitter views the input as ``[outer, n, inner]``. With ``inner == 1`` (the usual
last-axis case) the rows are contiguous: float32 calls ``kernels/softmax.h``, which
splits the rows over the thread pool and vectorizes the exp loop (a fused elementwise
tail then runs in one pass over the output); float64 rows are done serially here.
Otherwise ``inner`` columns are processed together so the innermost loop stays
contiguous.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ....errors import UnsupportedOpError
from ...ir import Node, shape_size
from ...symbolic import is_dim, is_one
from ..base import EmitContext, OutType, register
from ...backends.cstyle import c_literal, ctype
from ..tensor.axis import split_at_axis
from ..tensor.flat import FlatEpilogueOp
from ..tensor.loops import flat_index_exprs, has_epilogue, normalize_axis
from .elementwise import cfn, is_float

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["LogSoftmax1", "LogSoftmax13", "Softmax1", "Softmax13", "softmax_view"]

logger = logging.getLogger(__name__)


#: Columns per block of a softmax along a strided axis (``_emit_columns``): a few vectors
#: wide, so the blocks are many (threads) and each row of a block one cache line or more.
COLUMN_BLOCK = 64


def softmax_view(shape, axis: int, coerce_2d: bool) -> tuple[int, int, int]:
    """``(outer, n, inner)``: the normalized dims have ``n`` elements at stride
    ``inner`` (``inner == 1`` for the 2-D coercion of versions 1 and 11)."""
    rank = len(shape)
    if rank == 0:
        return 1, 1, 1
    a = normalize_axis(axis, rank, "Softmax")
    if coerce_2d:  # run-time dims stay symbolic (shape_size)
        return shape_size(shape[:a]), shape_size(shape[a:]), 1
    outer, n, inner = split_at_axis(shape, a)
    return outer, n if is_dim(n) else int(n), inner


class _SoftmaxBase(FlatEpilogueOp):
    coerce_2d: ClassVar[bool] = False
    log: ClassVar[bool] = False

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if not is_float(x.dtype):
            raise UnsupportedOpError(
                f"{self.op_type} (node {node.name!r}) takes floats, got {x.dtype}"
            )
        softmax_view(x.shape, node.attrs["axis"], self.coerce_2d)  # checks the axis
        return [(x.shape, x.dtype)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        outer, n, inner = softmax_view(x.shape, node.attrs["axis"], self.coerce_2d)
        v = x.reshape(outer, n, inner)
        m = v.max(axis=1, keepdims=True)
        e = np.exp(v - m)
        s = e.sum(axis=1, keepdims=True)
        out = (v - m - np.log(s)) if self.log else e / s
        return [out.astype(x.dtype).reshape(x.shape)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        if x.size == 0:
            return ""
        outer, n, inner = softmax_view(x.shape, node.attrs["axis"], self.coerce_2d)
        if is_one(inner) and x.dtype == np.float32:  # a run-time inner dim is never 1
            return self._emit_rows_f32(node, ctx, outer, n)
        if is_one(inner):
            return self._emit_rows(node, ctx, outer, n)
        return self._emit_columns(node, ctx, outer, n, inner)

    def _final(self, node, ctx, flat: str, xv: str, ev: str, m: str, s: str) -> str:
        """Store output element ``flat`` given x, exp(x - m), the max and the sum."""
        y = node.outputs[0]
        dt = y.dtype
        val = f"({xv} - {m} - {cfn('log', dt)}({s}))" if self.log else f"({ev} * {s})"
        return f"{ctx.ptr(y)}[{flat}] = {ctx.output_expr(val, flat_index_exprs(flat, y.shape))};"

    def _emit_rows_f32(self, node, ctx, outer: int, n: int) -> str:
        """Contiguous float32 rows: one ``ml_softmax_f32`` call (``kernels/softmax.h``),
        then a fused epilogue, if any, in one pass over the output."""
        x, y = node.inputs[0], node.outputs[0]
        ctx.include("math_reduce.h")
        ctx.include("softmax.h")
        scratch = ctx.scratch(n * 4) if self.log else "0"
        a = ctx.unique("sm")
        lines = [
            f"{{ ml_softmax_args {a} = {{{ctx.ptr(x)}, {ctx.ptr(y)}, {outer}, {n}, 0, {int(self.log)}}};",
            f"  ml_softmax_f32(&{a}, {scratch}); }}",
        ]
        if has_epilogue(ctx, len(y.shape)):
            i = ctx.unique("i")
            yi = f"{ctx.ptr(y)}[{i}]"
            value = ctx.output_expr(yi, flat_index_exprs(i, y.shape))
            lines.append(f"for (int64_t {i} = 0; {i} < {y.size}; ++{i}) {yi} = {value};")
        return "\n".join(lines)

    def _emit_rows(self, node, ctx, outer: int, n: int) -> str:
        x = node.inputs[0]
        dt = x.dtype
        ct = "float" if dt == np.float32 else "double"
        exp = cfn("exp", dt)
        o, j, m, s, row = (ctx.unique(p) for p in ("o", "j", "m", "s", "row"))
        buf = ctx.unique("ex")
        lines = [f"{ct}* {buf} = ({ct}*){ctx.scratch(n * dt.itemsize)};"]
        lines.append(f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) {{")
        lines.append(f"const {ct}* {row} = {ctx.ptr(x)} + {o}*{n};")
        if dt == np.float32:
            ctx.include("math_reduce.h")
            lines.append(f"{ct} {m} = ml_rmax_f32({row}, {n});")
        else:
            lines.append(f"{ct} {m} = -INFINITY;")
            lines.append(
                f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {m} = {row}[{j}] > {m} ? {row}[{j}] : {m};"
            )
        lines.append(
            f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {buf}[{j}] = {exp}({row}[{j}] - {m});"
        )
        if dt == np.float32:
            lines.append(f"{ct} {s} = ml_rsum_f32({buf}, {n});")
        else:
            lines.append(f"{ct} {s} = 0;")
            lines.append(f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {s} += {buf}[{j}];")
        if not self.log:
            lines.append(f"{s} = {c_literal(1, dt)} / {s};")
        store = self._final(node, ctx, f"{o}*{n} + {j}", f"{row}[{j}]", f"{buf}[{j}]", m, s)
        lines.append(f"for (int64_t {j} = 0; {j} < {n}; ++{j}) {store}")
        lines.append("}")
        return "\n".join(lines)

    def _emit_columns(self, node, ctx, outer: int, n: int, inner: int) -> str:
        """Softmax along a strided axis (``[outer, n, inner]``, e.g. over channels):
        per block of ``COLUMN_BLOCK`` columns ``i`` (vectorised along them), the max,
        the exponentials and their sum, and the outputs, over every ``o``; the blocks
        write disjoint columns of the scratch and of the output, so they split over
        the thread pool (YOLOv8's class softmax over 80 x 8400: 0.37 ms on one thread)."""
        x = node.inputs[0]
        dt = x.dtype
        ct = "float" if dt == np.float32 else "double"
        exp = cfn("exp", dt)
        c, o, k, i = ctx.unique("c"), ctx.unique("o"), ctx.unique("k"), ctx.unique("i")
        lo, hi = ctx.unique("lo"), ctx.unique("hi")
        mb, sb, eb = ctx.unique("mx"), ctx.unique("sm"), ctx.unique("ex")
        base = f"{o}*{n * inner} + {k}*{inner} + {i}"
        xv = f"{ctx.ptr(x)}[{base}]"
        blocks = (inner + COLUMN_BLOCK - 1) // COLUMN_BLOCK  # a run-time dim stays symbolic
        cols = f"for (int64_t {i} = {lo}; {i} < {hi}; ++{i})"
        lines = [
            # scratch columns i of the max, the sum and the exponentials: a block's own
            f"{ct}* {mb} = ({ct}*){ctx.scratch(inner * dt.itemsize)};",
            f"{ct}* {sb} = ({ct}*){ctx.scratch(inner * dt.itemsize)};",
            f"{ct}* {eb} = ({ct}*){ctx.scratch(n * inner * dt.itemsize)};",
            f"const int64_t {lo} = {c} * {COLUMN_BLOCK};",
            f"const int64_t {hi} = {lo} + {COLUMN_BLOCK} < {inner} ? {lo} + {COLUMN_BLOCK} : {inner};",
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) {{",
            f"{cols} {{ {mb}[{i}] = -INFINITY; {sb}[{i}] = 0; }}",
            f"for (int64_t {k} = 0; {k} < {n}; ++{k}) {cols} {mb}[{i}] = {xv} > {mb}[{i}] ? {xv} : {mb}[{i}];",
            (
                f"for (int64_t {k} = 0; {k} < {n}; ++{k}) {cols} {{"
                f" {eb}[{k}*{inner} + {i}] = {exp}({xv} - {mb}[{i}]); {sb}[{i}] += {eb}[{k}*{inner} + {i}]; }}"
            ),
        ]
        if not self.log:
            lines.append(f"{cols} {sb}[{i}] = {c_literal(1, dt)} / {sb}[{i}];")
        store = self._final(
            node, ctx, base, xv, f"{eb}[{k}*{inner} + {i}]", f"{mb}[{i}]", f"{sb}[{i}]"
        )
        lines.append(f"for (int64_t {k} = 0; {k} < {n}; ++{k}) {cols} {store}")
        lines.append("}")
        # an exp and a few flops per element: some 16 units of work each
        return ctx.parallel_for(c, blocks, "\n".join(lines), outer * n * inner * 16)

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """Device Softmax / LogSoftmax: one row per work item (max, sum of
        exponentials, normalize: the C backend's order of operations)."""
        from ...backends.device.lowerings import Kernel

        x = node.inputs[0]
        outer, n, inner = softmax_view(x.shape, node.attrs["axis"], self.coerce_2d)
        T = ctype(node.outputs[0].dtype)
        f = (lambda name: name + "f") if T == "float" else (lambda name: name)
        last = "v - m - L" if self.log else "e * inv"
        body = [
            f"const idx_t base = (gid / {inner}) * {n * inner} + gid % {inner};",
            f"{ctx.language.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)} + base;",
            f"{T} m = X[0];",
            f"for (idx_t j = 1; j < {n}; ++j) m = {f('fmax')}(m, X[j * {inner}]);",
            f"{T} s = 0;",
            f"for (idx_t j = 0; j < {n}; ++j) s += {f('exp')}(X[j * {inner}] - m);",
            f"const {T} inv = ({T})1 / s, L = {f('log')}(s);",
            "(void)inv; (void)L;",
            f"for (idx_t j = 0; j < {n}; ++j) {{",
            f"  const {T} v = X[j * {inner}], e = {f('exp')}(v - m);",
            "  (void)e;",
            *("  " + s for s in ctx.store(f"base + j * {inner}", last)),
            "}",
        ]
        return Kernel(outer * inner, body)


@register
class Softmax1(_SoftmaxBase):
    """ONNX ``Softmax`` 1 and 11: normalized over the input coerced to 2-D at ``axis``."""

    op_type, since_version, coerce_2d = "Softmax", 1, True


@register
class Softmax13(_SoftmaxBase):
    """ONNX ``Softmax`` 13: normalized over the one dim ``axis``."""

    op_type, since_version = "Softmax", 13


@register
class LogSoftmax1(_SoftmaxBase):
    """ONNX ``LogSoftmax`` 1 and 11: ``x - max - log(sum(exp(x - max)))`` over the
    input coerced to 2-D at ``axis``."""

    op_type, since_version, coerce_2d, log = "LogSoftmax", 1, True, True


@register
class LogSoftmax13(_SoftmaxBase):
    """ONNX ``LogSoftmax`` 13: over the one dim ``axis``."""

    op_type, since_version, log = "LogSoftmax", 13, True
