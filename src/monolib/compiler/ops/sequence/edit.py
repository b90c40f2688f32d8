"""SequenceInsert and SequenceErase: a new sequence from one with an element added or
removed (ONNX operator specs, opset 11)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node, SeqType, bound_shapes, is_static, max_shape
from ..base import OpDef, register
from ..control.status import fail_statement
from ._slot import c_seq, c_shape, input_seq, is_tensor, seq_output

__all__ = ["SequenceErase", "SequenceInsert"]

logger = logging.getLogger(__name__)

# p in [-n, n] (insert) or [-n, n) (erase) made non-negative; out of range: -1
_POSITION = (
    "static inline int64_t ml_seq_position(int64_t p, int64_t n, int64_t end_ok) {\n"
    "  if (p < 0) p += n;\n"
    "  return (p < 0 || p > n || (p == n && !end_ok)) ? -1 : p;\n}"
)


def _position(node: Node, i: int) -> int | None:
    """The constant position input, normalised later; None when omitted or run-time."""
    v = node.input(i)
    if v is None or not v.is_const:
        return None
    return int(np.asarray(v.const).reshape(-1)[0])


def _c_position(ctx, node: Node, i: int, default: str) -> str:
    v = node.input(i)
    if v is None:
        return default
    return f"(int64_t)({ctx.ptr(v)})[0]"


@register
class SequenceInsert(OpDef):
    """ONNX ``SequenceInsert``: ``tensor`` inserted at ``position`` (default: the end).
    Output capacity: the input's plus one. A position out of range at run time stops
    the run (``monolib_run`` fails naming the node: ``ops/control/status.py``)."""

    op_type, since_version = "SequenceInsert", 11
    foldable = False

    def infer(self, node: Node):
        t = input_seq(node, 0)
        x = node.input(1)
        if not is_tensor(x):
            raise ShapeError(f"node {node.name!r} (SequenceInsert): input 1 must be a tensor")
        if np.dtype(x.dtype) != np.dtype(t.elem_dtype):
            raise ShapeError(f"node {node.name!r} (SequenceInsert): a {x.dtype} tensor into a "
                             f"sequence of {t.elem_dtype}")
        xmax = max_shape(x.shape)
        elem_max = bound_shapes([t.elem_max, xmax]) if t.capacity else xmax
        mixed = t.mixed or bool(t.capacity and len(x.shape) != t.rank)
        shapes = None
        pos = _position(node, 2)
        if t.shapes is not None and is_static(x.shape) and (node.input(2) is None
                                                               or pos is not None):
            n = len(t.shapes)
            p = n if pos is None else (pos + n if pos < 0 else pos)
            if not 0 <= p <= n:
                raise ShapeError(f"node {node.name!r} (SequenceInsert): position {pos} is out "
                                 f"of range for {n} elements")
            shapes = t.shapes[:p] + (tuple(x.shape),) + t.shapes[p:]
        return [seq_output(node, 0, SeqType("sequence", t.elem_dtype, t.capacity + 1,
                                            elem_max, shapes, None, mixed))]

    def reference(self, node: Node, inputs):
        seq = list(inputs[0])
        pos = len(seq) if node.input(2) is None else int(np.asarray(inputs[2]).reshape(-1)[0])
        if not -len(seq) <= pos <= len(seq):
            raise ShapeError(f"node {node.name!r} (SequenceInsert): position {pos} is out of "
                             f"range for {len(seq)} elements")
        seq.insert(pos + len(seq) if pos < 0 else pos, np.asarray(inputs[1]))
        return [seq]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        ctx.helper(_POSITION)
        src, x, out = node.inputs[0], node.inputs[1], node.outputs[0]
        s, o = c_seq(ctx, src), c_seq(ctx, out)
        itemsize = np.dtype(x.dtype).itemsize
        decl, shp = c_shape(ctx, x.shape)
        pos = _c_position(ctx, node, 2, "n_")
        return (f"  {{ int64_t n_ = *ml_seq_count({s});\n"
                f"    int64_t p_ = ml_seq_position({pos}, n_, 1);\n"
                f"    if (p_ < 0) {{ {fail_statement(ctx, node, 'position')} return; }} {{\n"
                "      for (int64_t k = n_ - 1; k >= p_; --k) "
                f"ml_seq_copy_elem({o}, k + 1, {s}, k, {itemsize});\n"
                "      for (int64_t k = 0; k < p_; ++k) "
                f"ml_seq_copy_elem({o}, k, {s}, k, {itemsize});\n"
                f"      {decl}\n"
                f"      ml_seq_put({o}, p_, {ctx.ptr(x)}, {shp}, {len(x.shape)}, {itemsize});\n"
                f"      *ml_seq_count({o}) = n_ + 1;\n    }}\n  }}")


@register
class SequenceErase(OpDef):
    """ONNX ``SequenceErase``: the sequence without the element at ``position``
    (default: the last). A position out of range at run time stops the run
    (``monolib_run`` fails naming the node)."""

    op_type, since_version = "SequenceErase", 11
    foldable = False

    def infer(self, node: Node):
        t = input_seq(node, 0)
        shapes = None
        pos = _position(node, 1)
        if t.shapes is not None and (node.input(1) is None or pos is not None):
            n = len(t.shapes)
            p = n - 1 if pos is None else (pos + n if pos < 0 else pos)
            if not 0 <= p < n:
                raise ShapeError(f"node {node.name!r} (SequenceErase): position {pos} is out "
                                 f"of range for {n} elements")
            shapes = t.shapes[:p] + t.shapes[p + 1:]
        return [seq_output(node, 0, SeqType("sequence", t.elem_dtype, t.capacity, t.elem_max,
                                            shapes, None, t.mixed))]

    def reference(self, node: Node, inputs):
        seq = list(inputs[0])
        pos = -1 if node.input(1) is None else int(np.asarray(inputs[1]).reshape(-1)[0])
        if not -len(seq) <= pos < len(seq):
            raise ShapeError(f"node {node.name!r} (SequenceErase): position {pos} is out of "
                             f"range for {len(seq)} elements")
        del seq[pos]
        return [seq]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        ctx.helper(_POSITION)
        src, out = node.inputs[0], node.outputs[0]
        s, o = c_seq(ctx, src), c_seq(ctx, out)
        itemsize = np.dtype(src.seq.elem_dtype).itemsize
        pos = _c_position(ctx, node, 1, "n_ - 1")
        return (f"  {{ int64_t n_ = *ml_seq_count({s});\n"
                f"    int64_t p_ = ml_seq_position({pos}, n_, 0);\n"
                f"    if (p_ < 0) {{ {fail_statement(ctx, node, 'position')} return; }} {{\n"
                "      for (int64_t k = 0; k < p_; ++k) "
                f"ml_seq_copy_elem({o}, k, {s}, k, {itemsize});\n"
                "      for (int64_t k = p_ + 1; k < n_; ++k) "
                f"ml_seq_copy_elem({o}, k - 1, {s}, k, {itemsize});\n"
                f"      *ml_seq_count({o}) = n_ - 1;\n    }}\n  }}")
