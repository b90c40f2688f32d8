"""SplitToSequence and ConcatFromSequence: between one tensor and a sequence of its
pieces (ONNX operator specs, opsets 11 and 24)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import CompileError, ShapeError
from ...ir import Node, SeqType, is_static, max_shape, shape_size
from ...symbolic import Dim
from ..base import OpDef, register
from ..control.status import fail_statement
from ._slot import c_seq, c_shape, input_seq, is_tensor, seq_output

__all__ = ["ConcatFromSequence", "SplitToSequence"]

logger = logging.getLogger(__name__)


def _axis(node: Node, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): axis {axis} out of range "
                         f"for rank {rank}")
    return axis % rank


@register
class SplitToSequence(OpDef):
    """ONNX ``SplitToSequence``: ``input`` split along ``axis`` into a sequence: by the
    sizes in ``split`` (a 1-D constant), into pieces of ``split`` (a scalar constant;
    the last one shorter), or into pieces of 1 (``keepdims`` 0 drops the axis). The
    split must be known at compile time, and the axis' length static."""

    op_type, since_version = "SplitToSequence", 11
    also_versions = (24,)  # new element types only
    foldable = False

    def pieces(self, node: Node) -> tuple[int, list[int], bool]:
        """``(axis, sizes, keep the axis)``."""
        x = node.inputs[0]
        axis = _axis(node, int(node.attrs.get("axis", 0)), len(x.shape))
        length = x.shape[axis]
        if isinstance(length, Dim):
            raise CompileError(f"node {node.name!r} (SplitToSequence): the split axis has a "
                               f"run-time length ({length.display()}); it must be static")
        split = node.input(1)
        if split is None:
            return axis, [1] * length, bool(node.attrs.get("keepdims", 1))
        if not split.is_const or split.is_symbolic_const:
            raise CompileError(f"node {node.name!r} (SplitToSequence): 'split' must be a "
                               "compile-time constant (pass it with constants=)")
        s = np.asarray(split.const).astype(np.int64)
        if s.ndim == 0:
            size = int(s)
            if size <= 0:
                raise ShapeError(f"node {node.name!r} (SplitToSequence): split {size} <= 0")
            sizes = [size] * (length // size) + ([length % size] if length % size else [])
        else:
            sizes = [int(d) for d in s]
            if sum(sizes) != length or min(sizes, default=0) < 0:
                raise ShapeError(f"node {node.name!r} (SplitToSequence): split {sizes} does not "
                                 f"sum to the axis length {length}")
        return axis, sizes, True

    def infer(self, node: Node):
        x = node.inputs[0]
        if not is_tensor(x):
            raise ShapeError(f"node {node.name!r} (SplitToSequence): input 0 must be a tensor")
        axis, sizes, keep = self.pieces(node)
        shapes = [x.shape[:axis] + ((s,) if keep else ()) + x.shape[axis + 1:] for s in sizes]
        if is_static(x.shape):
            return [seq_output(node, 0, SeqType.of_shapes("sequence", x.dtype, shapes))]
        elem_max = tuple(max(d) for d in zip(*(max_shape(s) for s in shapes)))
        return [seq_output(node, 0, SeqType("sequence", x.dtype, len(sizes), elem_max))]

    def reference(self, node: Node, inputs):
        axis, sizes, keep = self.pieces(node)
        parts = np.split(np.asarray(inputs[0]), np.cumsum(sizes)[:-1], axis=axis)
        return [[p if keep else np.squeeze(p, axis) for p in parts]]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        x, out = node.inputs[0], node.outputs[0]
        axis, sizes, keep = self.pieces(node)
        itemsize = np.dtype(x.dtype).itemsize
        outer, inner = shape_size(x.shape[:axis]), shape_size(x.shape[axis + 1:])
        length = x.shape[axis]
        o = c_seq(ctx, out)
        lines = [f"  *ml_seq_count({o}) = {len(sizes)};",
                 f"  {{ const uint8_t* src_ = (const uint8_t*)({ctx.ptr(x)});"]
        start = 0
        for k, size in enumerate(sizes):
            shape = x.shape[:axis] + ((size,) if keep else ()) + x.shape[axis + 1:]
            decl, shp = c_shape(ctx, shape)
            lines.append(
                f"    {{ {decl}\n"
                f"      ml_seq_set_shape({o}, {k}, {shp}, {len(shape)});\n"
                f"      uint8_t* dst_ = ml_seq_data({o}, {k});\n"
                f"      for (int64_t i = 0; i < {outer}; ++i)\n"
                f"        memcpy(dst_ + i * {size} * ({inner}) * {itemsize},\n"
                f"               src_ + (i * {length} + {start}) * ({inner}) * {itemsize},\n"
                f"               (size_t)({size} * ({inner}) * {itemsize})); }}")
            start += size
        lines.append("  }")
        return "\n".join(lines)


@register
class ConcatFromSequence(OpDef):
    """ONNX ``ConcatFromSequence``: the elements concatenated along ``axis`` (stacked
    along a new axis with ``new_axis`` 1). The output shape is static when every element
    shape is known at compile time; else the concatenated axis is a computed dim (the
    other dims are element 0's, computed dims too). An empty sequence at run time stops
    the run (``monolib_run`` fails naming the node)."""

    op_type, since_version = "ConcatFromSequence", 11
    foldable = False

    def geometry(self, node: Node) -> tuple[int, bool, SeqType]:
        """``(axis in the output, new_axis, the sequence's type)``."""
        t = input_seq(node, 0)
        if t.mixed:
            raise ShapeError(f"node {node.name!r} (ConcatFromSequence): the sequence holds "
                             "elements of several ranks")
        new = bool(node.attrs.get("new_axis", 0))
        rank = t.rank + (1 if new else 0)
        return _axis(node, int(node.attrs["axis"]), rank), new, t

    def infer(self, node: Node):
        axis, new, t = self.geometry(node)
        if t.shapes is not None:
            if not t.shapes:
                raise ShapeError(f"node {node.name!r} (ConcatFromSequence): the sequence is "
                                 "empty")
            first = t.shapes[0]
            for s in t.shapes:
                rest_s = s if new else s[:axis] + s[axis + 1:]
                rest_f = first if new else first[:axis] + first[axis + 1:]
                if rest_s != rest_f:
                    raise ShapeError(f"node {node.name!r} (ConcatFromSequence): element shapes "
                                     f"{[list(x) for x in t.shapes]} do not concatenate")
            n = len(t.shapes) if new else sum(s[axis] for s in t.shapes)
            return [(first[:axis] + (n,) + (first[axis:] if new else first[axis + 1:]),
                     t.elem_dtype)]
        from ...symbolic import computed_symbol  # issue 13's data-dependent dims

        hi = t.capacity * (1 if new else t.elem_max[axis])
        n = Dim.of(computed_symbol(f"{node.name}_len", hi=hi))
        # the other dims: element 0's, read from its record when the run starts
        rest = [Dim.of(computed_symbol(f"{node.name}_d{a}", hi=m)) for a, m in
                enumerate(t.elem_max) if new or a != axis]
        return [(tuple(rest[:axis]) + (n,) + tuple(rest[axis:]), t.elem_dtype)]

    def reference(self, node: Node, inputs):
        axis, new, _ = self.geometry(node)
        join = np.stack if new else np.concatenate
        return [join([np.asarray(x) for x in inputs[0]], axis=axis)]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        axis, new, t = self.geometry(node)
        src, out = node.inputs[0], node.outputs[0]
        s = c_seq(ctx, src)
        itemsize = np.dtype(t.elem_dtype).itemsize
        # element 0's record gives the dims around the axis (the elements share them)
        lines = [f"  {{ const int64_t n_ = *ml_seq_count({s});",
                 f"    if (n_ <= 0) {{ {fail_statement(ctx, node, 'empty sequence')} return; }}",
                 "    {",
                 f"    const int64_t* r0_ = ml_seq_shape({s}, 0);",
                 "    int64_t outer_ = 1, inner_ = 1, total_ = 0;",
                 f"    for (int64_t a = 0; a < {axis}; ++a) outer_ *= r0_[a];",
                 f"    for (int64_t a = {axis if new else axis + 1}; a < {t.rank}; ++a) "
                 "inner_ *= r0_[a];",
                 "    for (int64_t k = 0; k < n_; ++k) total_ += "
                 + ("1;" if new else f"ml_seq_shape({s}, k)[{axis}];"),
                 f"    uint8_t* y_ = (uint8_t*)({ctx.ptr(out)});",
                 "    int64_t at_ = 0;",
                 "    for (int64_t k = 0; k < n_; ++k) {",
                 "      const int64_t len_ = "
                 + ("1;" if new else f"ml_seq_shape({s}, k)[{axis}];"),
                 f"      const uint8_t* x_ = ml_seq_data({s}, k);",
                 "      for (int64_t i = 0; i < outer_; ++i)",
                 f"        memcpy(y_ + ((i * total_ + at_) * inner_) * {itemsize}, "
                 f"x_ + (i * len_ * inner_) * {itemsize}, (size_t)(len_ * inner_ * {itemsize}));",
                 "      at_ += len_;",
                 "    }"]
        if not is_static(out.shape):
            lines.append(f"    {ctx.set_symbol(out.shape[axis], 'total_')}")
            others = [a for a in range(t.rank) if new or a != axis]
            for d, a in zip(out.shape[:axis] + out.shape[axis + 1:], others):
                lines.append(f"    {ctx.set_symbol(d, f'r0_[{a}]')}")
        lines.append("  } }")
        return "\n".join(lines)
