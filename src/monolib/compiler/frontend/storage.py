"""Storage types in the frontend: operators compute float16, bfloat16, float8, float4 and
int4/int2 tensors in float32 (int32 for the small ints): convert, compute, convert.

Every node of an ONNX domain (:data:`WIDENED_DOMAINS`) reading a storage type (``ops.base.is_storage``), other than
the conversions themselves (:data:`KEEP_STORAGE`), is imported as
``Cast(to compute type)`` on each such input, the node on the widened values, then
``Cast(back)`` on each output of the compute type. Widening is exact (every float16,
bfloat16, float8 or int4 value is a float32 / int32), so only the final rounding
differs from computing in the narrow type: ONNX Runtime computes most float16 CPU
kernels the same way. Constant inputs are widened at compile time (the Casts fold).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import numpy as np
import onnx.helper

from ..ir import Node, Value
from ..ops.base import compute_dtype, is_storage, lookup
from ..passes.node_eval import fold_node, run_infer

__all__ = [
    "KEEP_STORAGE",
    "WIDENED_DOMAINS",
    "insert_node",
    "narrow_outputs",
    "storage_type",
    "widen_inputs",
]

logger = logging.getLogger(__name__)

#: Ops that read and write storage types themselves (their own conversions).
KEEP_STORAGE = frozenset({"Cast", "CastLike", "QuantizeLinear", "DequantizeLinear"})

#: Domains whose ops compute as ONNX's (widening keeps their meaning; ONNX Runtime's
#: ``com.microsoft`` contrib ops are formulas over float tensors too, e.g. a float16
#: model from its transformer optimizer); ops of other domains (custom kernels) get
#: their inputs' types as they are.
WIDENED_DOMAINS = frozenset({"", "ai.onnx.preview", "ai.onnx.ml", "com.microsoft"})

# the opset the inserted Casts are looked up at (Cast 21 reads every storage type)
_CAST_OPSET = 21


def storage_type(op_type: str, domain: str, inputs: Sequence[Value | None]) -> np.dtype | None:
    """The storage type the node computes around (its first storage-typed input), or
    ``None`` when it is imported as it is."""
    if domain not in WIDENED_DOMAINS or op_type in KEEP_STORAGE:
        return None
    for v in inputs:
        if v is not None and is_storage(v.dtype):
            return v.dtype
    return None


def _cast(value: Value, dtype: np.dtype, node_name: str, out: Value, emit: Callable) -> Value:
    """``Cast(value) -> out`` of ``dtype``, folded when ``value`` is constant."""
    node = Node("Cast", node_name, [value], [out],
                {"to": int(onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))), "saturate": 1},
                "", _CAST_OPSET)
    return insert_node(node, emit)


def insert_node(node: Node, emit: Callable[[Node], None]) -> Value:
    """A node the importer adds itself (a conversion): typed by its op (looked up at the
    node's domain and opset), folded when it can be, else handed to ``emit``.

    Returns
    -------
    Value
        The node's first output (constant when folded).

    Raises
    ------
    UnsupportedOpError
        No implementation of the op (``ops.base.lookup``).
    CompileError, ShapeError
        From the op's type inference (``passes.node_eval.run_infer``).
    """
    op = lookup(node.op_type, node.opset, node.domain, node.name)
    run_infer(node, op)
    if not fold_node(node, op):
        emit(node)
    return node.outputs[0]


def widen_inputs(
    inputs: Sequence[Value | None],
    name: str,
    new_value: Callable[[str], Value],
    new_node_name: Callable[[str], str],
    emit: Callable[[Node], None],
) -> list[Value | None]:
    """``inputs`` with each storage-typed one replaced by its Cast to the compute type.

    Parameters
    ----------
    inputs : list of Value or None
        The node's inputs.
    name : str
        The node's name (the Casts are named after it).
    new_value, new_node_name, emit : callable
        The importer's fresh value, fresh node name, and append-node functions.
    """
    out: list[Value | None] = []
    for i, v in enumerate(inputs):
        if v is None or not is_storage(v.dtype):
            out.append(v)
            continue
        wide = compute_dtype(v.dtype)
        out.append(_cast(v, wide, new_node_name(f"{name}/widen{i}"),
                         new_value(f"{v.name}/{wide.name}"), emit))
    return out


def narrow_outputs(
    outputs: Sequence[Value],
    dtype: np.dtype,
    names: Sequence[str],
    new_value: Callable[[str], Value],
    new_node_name: Callable[[str], str],
    emit: Callable[[Node], None],
) -> list[Value]:
    """Each output of the compute type of ``dtype`` cast back to ``dtype`` (named
    ``names[i]``, the ONNX output name); other outputs (indices, masks) as they are."""
    wide = compute_dtype(dtype)
    out = []
    for v, onnx_name in zip(outputs, names):
        if v.dtype != wide or not onnx_name:
            out.append(v)
            continue
        out.append(_cast(v, dtype, new_node_name(f"{onnx_name}/narrow"), new_value(onnx_name),
                         emit))
    return out
