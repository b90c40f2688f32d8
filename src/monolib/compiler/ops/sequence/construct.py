"""SequenceConstruct, SequenceEmpty and Optional: make a sequence or optional slot
(ONNX operator specs, opsets 11 and 15)."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import onnx

from ....errors import ShapeError
from ...ir import Node, SeqType, bound_shapes, is_static, max_shape
from ..base import OpDef, register
from ._slot import c_seq, c_shape, is_seq, seq_output

__all__ = ["Optional", "SequenceConstruct", "SequenceEmpty"]

logger = logging.getLogger(__name__)


def tensors_seq(node: Node, values, kind: str = "sequence") -> SeqType:
    """The SeqType of a sequence holding the tensors ``values`` (one rank, one dtype).

    Raises
    ------
    ShapeError
        Tensors of different dtypes, or a sequence among them.
    """
    if any(is_seq(v) for v in values):
        raise ShapeError(f"node {node.name!r} ({node.op_type}): its inputs must be tensors")
    dtypes = {np.dtype(v.dtype) for v in values}
    if len(dtypes) != 1:
        raise ShapeError(f"node {node.name!r} ({node.op_type}): tensors of dtypes "
                         f"{sorted(map(str, dtypes))}; a sequence holds one dtype")
    if all(is_static(v.shape) for v in values):
        return SeqType.of_shapes(kind, dtypes.pop(), [v.shape for v in values])
    return SeqType(kind, dtypes.pop(), len(values),
                   bound_shapes([max_shape(v.shape) for v in values]),
                   mixed=len({len(v.shape) for v in values}) > 1)


def put_tensors(ctx, out, values, start: str = "0") -> str:
    """C statements storing the tensors ``values`` as elements ``start``, ``start + 1``...
    of the sequence slot ``out``."""
    lines = []
    for k, v in enumerate(values):
        decl, shp = c_shape(ctx, v.shape)
        lines.append(f"  {{ {decl}\n    ml_seq_put({c_seq(ctx, out)}, {start} + {k}, "
                     f"{ctx.ptr(v)}, {shp}, {len(v.shape)}, {np.dtype(v.dtype).itemsize}); }}")
    return "\n".join(lines)


@register
class SequenceConstruct(OpDef):
    """ONNX ``SequenceConstruct``: a sequence of its input tensors, in order. Output
    capacity: the input count; element shapes known when every input's is static."""

    op_type, since_version = "SequenceConstruct", 11
    foldable = False

    def infer(self, node: Node):
        return [seq_output(node, 0, tensors_seq(node, node.inputs))]

    def reference(self, node: Node, inputs):
        return [[np.asarray(x) for x in inputs]]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        out = node.outputs[0]
        return (f"  *ml_seq_count({c_seq(ctx, out)}) = {len(node.inputs)};\n"
                + put_tensors(ctx, out, node.inputs))


@register
class SequenceEmpty(OpDef):
    """ONNX ``SequenceEmpty``: an empty sequence of ``dtype`` (default float32);
    capacity 0 (a Loop that inserts into it carries a larger one)."""

    op_type, since_version = "SequenceEmpty", 11
    foldable = False
    defaults = {"dtype": onnx.TensorProto.FLOAT}

    def infer(self, node: Node):
        dtype = onnx.helper.tensor_dtype_to_np_dtype(int(self.attr(node, "dtype")))
        return [seq_output(node, 0, SeqType("sequence", np.dtype(dtype), 0, (), ()))]

    def reference(self, node: Node, inputs):
        return [[]]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        return f"  *ml_seq_count({c_seq(ctx, node.outputs[0])}) = 0;"


def _type_seq(node: Node, tp) -> SeqType:
    """An empty optional of the ONNX TypeProto ``tp`` (``Optional``'s ``type``)."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        kind, tt = "optional_tensor", tp.tensor_type
    elif which == "sequence_type" and tp.sequence_type.elem_type.HasField("tensor_type"):
        kind, tt = "optional_sequence", tp.sequence_type.elem_type.tensor_type
    else:
        raise ShapeError(f"node {node.name!r} (Optional): type {which} is not a tensor or "
                         "a sequence of tensors")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
    rank = len(tt.shape.dim) if tt.HasField("shape") else 0
    return SeqType(kind, np.dtype(dtype), 0, (0,) * rank, (), False)


@register
class Optional(OpDef):
    """ONNX ``Optional``: an optional holding its input (a tensor or a sequence), or
    none of type ``type`` when the input is omitted."""

    op_type, since_version = "Optional", 15
    foldable = False
    defaults = {"type": None}

    def infer(self, node: Node):
        v = node.input(0)
        if v is None:
            tp = self.attr(node, "type")
            if tp is None:
                raise ShapeError(f"node {node.name!r} (Optional): no input and no type")
            return [seq_output(node, 0, _type_seq(node, tp))]
        if is_seq(v):
            if v.seq.kind != "sequence":
                raise ShapeError(f"node {node.name!r} (Optional): input is an optional")
            return [seq_output(node, 0, dataclasses.replace(v.seq, kind="optional_sequence",
                                                            present=True))]
        t = tensors_seq(node, [v], "optional_tensor")
        return [seq_output(node, 0, SeqType(t.kind, t.elem_dtype, 1, t.elem_max, t.shapes,
                                            True))]

    def reference(self, node: Node, inputs):
        """An optional is its value, or None (as ONNX Runtime returns it)."""
        return [inputs[0] if inputs else None]

    def emit(self, node: Node, ctx) -> str:
        ctx.include("sequence.h")
        v, out = node.input(0), node.outputs[0]
        if v is None:
            return f"  *ml_seq_count({c_seq(ctx, out)}) = -1;"
        if is_seq(v):
            itemsize = np.dtype(v.seq.elem_dtype).itemsize
            return f"  ml_seq_copy({c_seq(ctx, out)}, {c_seq(ctx, v)}, {itemsize});"
        return f"  *ml_seq_count({c_seq(ctx, out)}) = 1;\n" + put_tensors(ctx, out, [v])
