"""Nodes imported as their ONNX function body (``OpSchema.get_context_dependent_function``).

The body is the op's definition in ONNX's own terms (the expansion ONNX's
``*_expanded`` node tests run). The frontend imports it instead of the node where the
fused op class does not cover the node:

* ``FlexAttention`` (``ai.onnx.preview``) with a ``score_mod`` or ``prob_mod`` subgraph:
  the body applies the modifier to the whole ``[B, H, L, S]`` score (probability)
  tensor between its MatMul, Softmax and MatMul nodes, each compiled as usual;
* a bfloat16 ``Attention`` (``rounding.py``), so that each step rounds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import onnx
import onnx.defs
from onnx import helper

from ..ir import Value

__all__ = ["function_body", "modifier_import"]

logger = logging.getLogger(__name__)


def _type_proto(v: Value) -> onnx.TypeProto:
    if v.seq is not None:  # a sequence / optional: its elements' type (ops/sequence)
        elem = helper.make_tensor_type_proto(
            helper.np_dtype_to_tensor_dtype(v.seq.elem_dtype), [None] * v.seq.rank)
        if v.seq.kind == "optional_tensor":
            return helper.make_optional_type_proto(elem)
        seq = helper.make_sequence_type_proto(elem)
        return seq if v.seq.kind == "sequence" else helper.make_optional_type_proto(seq)
    dims = [d if isinstance(d, int) else None for d in v.shape]
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(v.dtype), dims)


def _rename_outer(g: onnx.GraphProto, names: dict, prefix: str, local: set) -> None:
    """Rename, in place, the names subgraph ``g`` reads from the function body (those it
    does not define itself) as :func:`function_body` renames the body's."""
    local = local | {i.name for i in g.input} | {t.name for t in g.initializer}
    local |= {o for n in g.node for o in n.output}
    for n in g.node:
        n.input[:] = [x if x in local else names.get(x, f"{prefix}{x}") for x in n.input]
        for a in n.attribute:
            for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_outer(sub, names, prefix, local)
    for o in g.output:
        if o.name not in local:
            o.name = names.get(o.name, f"{prefix}{o.name}")


def function_body(p: onnx.NodeProto, domain: str, opset: int, inputs: Sequence[Value | None],
                  prefix: str) -> list[onnx.NodeProto] | None:
    """The nodes of ``p``'s ONNX function body, its formal inputs and outputs bound to
    ``p``'s and every other name prefixed with ``prefix``.

    Parameters
    ----------
    p : onnx.NodeProto
        The node (its attributes, subgraphs included, shape the body).
    domain, opset : str, int
        Its domain and the model's opset of that domain (the schema looked up).
    inputs : list of Value or None
        Its imported inputs: their element types and shapes are the body's input types.
    prefix : str
        Prefix of the body's internal value and node names (unique per node).

    Returns
    -------
    list of onnx.NodeProto or None
        ``None`` when the schema has no context-dependent function.
    """
    schema = onnx.defs.get_schema(p.op_type, opset, domain)
    if not schema.has_context_dependent_function:
        return None
    types = [_type_proto(v).SerializeToString() for v in inputs if v is not None]
    body = onnx.FunctionProto()
    body.ParseFromString(schema.get_context_dependent_function(p.SerializeToString(), types))
    names = {f: (p.input[i] if i < len(p.input) else "") for i, f in enumerate(body.input)}
    names.update({f: (p.output[i] if i < len(p.output) and p.output[i] else f"{prefix}{f}")
                  for i, f in enumerate(body.output)})
    names[""] = ""
    out = []
    for q in body.node:
        r = onnx.NodeProto()
        r.CopyFrom(q)
        r.name = f"{prefix}{q.name or q.op_type}_{len(out)}"
        r.input[:] = [names.get(n, f"{prefix}{n}") for n in q.input]
        r.output[:] = [names.get(n, f"{prefix}{n}") for n in q.output]
        for a in r.attribute:  # a subgraph's reads of the body's values
            for g in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                _rename_outer(g, names, prefix, set())
        out.append(r)
    logger.debug("%s imported as its function body (%d nodes)", p.op_type, len(out))
    return out


def modifier_import(p: onnx.NodeProto, domain: str, opset: int,
                    inputs: Sequence[Value | None], name: str) -> list[onnx.NodeProto] | None:
    """The nodes to import instead of ``p`` when it is a ``FlexAttention`` with a
    ``score_mod``/``prob_mod`` subgraph (its function body), else ``None``."""
    if domain != "ai.onnx.preview" or p.op_type != "FlexAttention":
        return None
    if not any(a.name in ("score_mod", "prob_mod") and a.type == onnx.AttributeProto.GRAPH
               for a in p.attribute):
        return None
    return function_body(p, domain, opset, inputs, f"{name}/")
