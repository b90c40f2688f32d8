"""SequenceAt, SequenceLength, OptionalHasElement and OptionalGetElement: read a
sequence or optional slot (ONNX operator specs, opsets 11, 15 and 18)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node
from ..base import OpDef, register
from ..control.status import fail_statement
from ._slot import (c_seq, element_shape, input_seq, is_seq, is_tensor, seq_output,
                    write_shape_symbols)

__all__ = ["OptionalGetElement", "OptionalHasElement", "SequenceAt", "SequenceLength"]

logger = logging.getLogger(__name__)


def _const_index(node: Node, i: int) -> int | None:
    v = node.input(i)
    if v is None or not v.is_const or v.is_symbolic_const:
        return None
    return int(np.asarray(v.const).reshape(-1)[0])


def take_element(ctx, node: Node, src, index_c: str) -> str:
    """C copying element ``index_c`` (a C int64 expression, already in range) of the
    slot ``src`` to ``node``'s output 0, writing its computed dims if any."""
    out = node.outputs[0]
    itemsize = np.dtype(out.dtype).itemsize
    s = c_seq(ctx, src)
    return (f"  {{ int64_t k_ = {index_c};\n"
            f"    memcpy({ctx.ptr(out)}, ml_seq_data({s}, k_), "
            f"(size_t)(ml_seq_numel({s}, k_) * {itemsize}));\n"
            f"    const int64_t* r_ = ml_seq_shape({s}, k_); (void)r_;\n"
            f"{write_shape_symbols(ctx, out, 'r_')}\n  }}")


@register
class SequenceAt(OpDef):
    """ONNX ``SequenceAt``: the tensor at ``position`` (negative counts from the back).
    Its shape is static when the compiler knows it (a constant position into known
    element shapes, or elements all of one shape), else computed dims written from
    the element's shape record. A position out of range at run time stops the run
    (``monolib_run`` fails naming the node: ``ops/control/status.py``)."""

    op_type, since_version = "SequenceAt", 11
    foldable = False

    def infer(self, node: Node):
        t = input_seq(node, 0)
        index = _const_index(node, 1)
        if index is not None and t.count is not None and not -t.count <= index < t.count:
            raise ShapeError(f"node {node.name!r} (SequenceAt): position {index} is out of "
                             f"range for {t.count} elements")
        return [(element_shape(node, t, index), t.elem_dtype)]

    def reference(self, node: Node, inputs):
        seq, pos = inputs[0], int(np.asarray(inputs[1]).reshape(-1)[0])
        if not -len(seq) <= pos < len(seq):
            raise ShapeError(f"node {node.name!r} (SequenceAt): position {pos} is out of "
                             f"range for {len(seq)} elements")
        return [seq[pos]]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        src = node.inputs[0]
        pos = f"(int64_t)({ctx.ptr(node.inputs[1])})[0]"
        return (f"  {{ int64_t at_ = {pos}, n_ = *ml_seq_count({c_seq(ctx, src)});\n"
                "  if (at_ < 0) at_ += n_;\n"
                "  if (at_ < 0 || at_ >= n_) "
                f"{{ {fail_statement(ctx, node, 'position')} return; }}\n"
                + take_element(ctx, node, src, "at_") + "\n  }")


@register
class SequenceLength(OpDef):
    """ONNX ``SequenceLength``: the element count, an int64 scalar."""

    op_type, since_version = "SequenceLength", 11
    foldable = False

    def infer(self, node: Node):
        input_seq(node, 0)
        return [((), np.dtype(np.int64))]

    def reference(self, node: Node, inputs):
        return [np.array(len(inputs[0]), np.int64)]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        return (f"  {ctx.ptr(node.outputs[0])}[0] = "
                f"*ml_seq_count({c_seq(ctx, node.inputs[0])});")


@register
class OptionalHasElement(OpDef):
    """ONNX ``OptionalHasElement``: whether the optional holds a value (true for a
    tensor or sequence input, false with no input; opset 18)."""

    op_type, since_version = "OptionalHasElement", 15
    also_versions = (18, 28)  # 18: tensor and sequence inputs; 28: new element types
    foldable = False

    def infer(self, node: Node):
        return [((), np.dtype(bool))]

    def reference(self, node: Node, inputs):
        return [np.array(bool(inputs) and inputs[0] is not None)]

    def emit(self, node: Node, ctx) -> str:
        v, out = node.input(0), ctx.ptr(node.outputs[0])
        if v is None:
            return f"  {out}[0] = 0;"
        if v.seq is None or v.seq.kind == "sequence":
            return f"  {out}[0] = 1;"
        ctx.include("sequence.h")
        return f"  {out}[0] = *ml_seq_count({c_seq(ctx, v)}) >= 0;"


@register
class OptionalGetElement(OpDef):
    """ONNX ``OptionalGetElement``: the value an optional holds (a tensor or a
    sequence); a tensor or sequence input is returned as it is (opset 18). An empty
    optional at run time stops the run (``monolib_run`` fails naming the node)."""

    op_type, since_version = "OptionalGetElement", 15
    also_versions = (18, 28)  # 18: tensor and sequence inputs; 28: new element types
    foldable = False

    def infer(self, node: Node):
        v = node.input(0)
        if v is None:
            raise ShapeError(f"node {node.name!r} (OptionalGetElement): no input")
        if is_tensor(v):
            return [(v.shape, v.dtype)]
        t = v.seq
        if t.present is False:
            raise ShapeError(f"node {node.name!r} (OptionalGetElement): the optional is "
                             "always empty")
        if t.kind in ("sequence", "optional_sequence"):
            return [seq_output(node, 0, dataclasses.replace(t, kind="sequence", present=None))]
        return [(element_shape(node, t, 0), t.elem_dtype)]

    def reference(self, node: Node, inputs):
        if inputs[0] is None:
            raise ShapeError(f"node {node.name!r} (OptionalGetElement): the optional is empty")
        return [inputs[0]]

    def emit(self, node: Node, ctx) -> str:
        v, out = node.inputs[0], node.outputs[0]
        if is_tensor(v):
            return f"  memcpy({ctx.ptr(out)}, {ctx.ptr(v)}, {v.nbytes});"
        ctx.include("sequence.h")
        itemsize = np.dtype(v.seq.elem_dtype).itemsize
        empty = (f"  if (*ml_seq_count({c_seq(ctx, v)}) < 0) "  # None: the op fails
                 f"{{ {fail_statement(ctx, node, 'empty optional')} return; }}\n")
        if is_seq(out):
            return empty + f"  ml_seq_copy({c_seq(ctx, out)}, {c_seq(ctx, v)}, {itemsize});"
        return empty + take_element(ctx, node, v, "0")
