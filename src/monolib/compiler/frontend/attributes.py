"""ONNX attributes -> plain Python values, with schema defaults filled in.

Follows the ONNX IR spec (``AttributeProto``) and the operator schemas of
``onnx.defs``: every attribute the schema gives a default for appears in the node's
``attrs`` even when the model leaves it out, so an op reads ``node.attrs[name]`` and
never types a default twice.

Conversion table (ONNX ``AttributeProto.type`` -> Python):

=========  ====================================================
FLOAT      ``float``
INT        ``int``
STRING     ``str`` (bytes decoded as UTF-8)
TENSOR     ``np.ndarray`` (``onnx.numpy_helper.to_array``; strings as ``S<n>``)
GRAPH      whatever ``convert_graph`` returns (the frontend passes a function
           that imports the subgraph as an :class:`~monolib.compiler.ir.Graph`)
FLOATS...  lists of the above
=========  ====================================================
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from ...errors import CompileError
from ...runtime.strings import to_utf8

__all__ = [
    "convert_attribute",
    "node_attributes",
    "schema_defaults",
    "schema_of",
    "tensor_to_array",
]

logger = logging.getLogger(__name__)

GraphConverter = Callable[[onnx.GraphProto], Any]


@functools.cache
def schema_of(op_type: str, opset: int, domain: str = "") -> onnx.defs.OpSchema | None:
    """The ONNX schema of ``op_type`` in force at ``opset`` of ``domain``, or ``None``
    when onnx has no schema for it (custom domains)."""
    try:
        return onnx.defs.get_schema(op_type, opset, domain)
    except onnx.defs.SchemaError:
        return None


@functools.cache
def _defaults(op_type: str, opset: int, domain: str) -> tuple[tuple[str, Any], ...]:
    schema = schema_of(op_type, opset, domain)
    if schema is None:
        return ()
    out = []
    for name, attr in schema.attributes.items():
        proto = attr.default_value
        if proto is not None and proto.type != AttributeProto.UNDEFINED:
            out.append((name, convert_attribute(proto)))
    return tuple(out)


def schema_defaults(op_type: str, opset: int, domain: str = "") -> dict[str, Any]:
    """Every attribute default of the schema of ``op_type`` at ``opset``.

    Returns a fresh dict (list values are copied, so callers may modify them).
    """
    return {
        k: (list(v) if isinstance(v, list) else v) for k, v in _defaults(op_type, opset, domain)
    }


def tensor_to_array(tensor: onnx.TensorProto, where: str) -> np.ndarray:
    """``tensor`` as a NumPy array (``onnx.numpy_helper.to_array``).

    Raises
    ------
    CompileError
        When the data is stored outside the model (external data).
    """
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        raise CompileError(
            f"{where}: tensor {tensor.name!r} is stored as external data; monolib reads "
            "self-contained models only (save the model without external data)"
        )
    if tensor.data_type == onnx.TensorProto.STRING:  # bytes objects -> fixed-width UTF-8
        return to_utf8(numpy_helper.to_array(tensor))
    return numpy_helper.to_array(tensor)


def convert_attribute(
    attr: AttributeProto, convert_graph: GraphConverter | None = None, where: str = ""
) -> Any:
    """The Python value of one ONNX attribute (see the module docstring for the table).

    Parameters
    ----------
    attr : onnx.AttributeProto
    convert_graph : callable, optional
        Converts a GRAPH attribute's ``GraphProto``; when ``None`` the proto is kept.
    where : str
        Where the attribute is (node name), for error messages.

    Raises
    ------
    CompileError
        For a sparse tensor, external data, or an unknown attribute type.
    """
    t = attr.type
    A = AttributeProto
    if t == A.FLOAT:
        return float(attr.f)
    if t == A.INT:
        return int(attr.i)
    if t == A.STRING:
        return attr.s.decode("utf-8")
    if t == A.TENSOR:
        return tensor_to_array(attr.t, where)
    if t == A.GRAPH:
        return convert_graph(attr.g) if convert_graph else attr.g
    if t == A.FLOATS:
        return [float(x) for x in attr.floats]
    if t == A.INTS:
        return [int(x) for x in attr.ints]
    if t == A.STRINGS:
        return [s.decode("utf-8") for s in attr.strings]
    if t == A.TENSORS:
        return [tensor_to_array(x, where) for x in attr.tensors]
    if t == A.GRAPHS:
        return [convert_graph(g) if convert_graph else g for g in attr.graphs]
    if t == A.TYPE_PROTO:
        return attr.tp
    if t == A.TYPE_PROTOS:
        return list(attr.type_protos)
    raise CompileError(
        f"{where}: attribute {attr.name!r} has type "
        f"{A.AttributeType.Name(t)}, which monolib does not read"
    )


def node_attributes(
    node: onnx.NodeProto, opset: int, convert_graph: GraphConverter | None = None
) -> dict[str, Any]:
    """The attributes of ``node``: the schema defaults overridden by the node's own.

    Parameters
    ----------
    node : onnx.NodeProto
    opset : int
        The model's opset for the node's domain (picks the schema version).
    convert_graph : callable, optional
        Applied to GRAPH attributes (see :func:`convert_attribute`).
    """
    domain = "" if node.domain == "ai.onnx" else node.domain
    attrs = schema_defaults(node.op_type, opset, domain)
    where = f"node {node.name!r} ({node.op_type})"
    for a in node.attribute:
        attrs[a.name] = convert_attribute(a, convert_graph, where)
    return attrs
