"""String tensors in the frontend: the width of a string input, string constants.

monolib stores a string tensor as NumPy's fixed-width bytes type ``S<n>`` (``n`` bytes
of UTF-8 per element, NUL padded; :mod:`monolib.runtime.strings`), so every size is
known at compile time. A graph input's width ``n`` is given with its shape::

    monolib.compile(model, shapes={"text": {"shape": (4,), "width": 32}})

(``"shape"`` may be left out where the model declares it). Constants and initializers
are as wide as their longest element; each op derives its outputs' widths in
``infer`` (``compiler/ops/text/``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...errors import CompileError, UnsupportedOpError
from ..ir import Node, Value
from ..ops.text._common import TEXT_DOMAIN, string_dtype
from .storage import insert_node

__all__ = ["same_widths", "string_dtype", "string_input", "string_node"]

logger = logging.getLogger(__name__)


#: Default-domain ops whose string form is another op: Equal on strings compares
#: UTF-8 slots, not numbers (the elementwise Equal would compare C structs).
_STRING_FORMS = {"Equal": "StringEqual"}
#: Default-domain ops that would parse or order strings: refused. (Ops that only move
#: elements, Identity, Reshape, Transpose, Gather, Concat, Slice, Where, Expand...,
#: move ``ml_str<n>`` structs and need nothing here.)
_REFUSED = frozenset({"Cast", "CastLike", "Unique"})


def string_node(node: Node) -> Node:
    """``node``, or its string form (:data:`_STRING_FORMS`, domain
    ``monolib.text``) when it is a default-domain op reading a string tensor.

    Raises
    ------
    UnsupportedOpError
        Cast/CastLike/Unique of a string tensor (the node named).
    """
    reads = any(v is not None and v.dtype.kind == "S" for v in node.inputs)
    if reads and node.domain == "" and node.op_type in _REFUSED:
        raise UnsupportedOpError(
            f"node {node.name!r} ({node.op_type}): {node.op_type} of a string tensor "
            "(parsing or ordering strings) is not supported by monolib")
    form = _STRING_FORMS.get(node.op_type) if node.domain == "" else None
    if form is None or not reads:
        return node
    return Node(form, node.name, node.inputs, node.outputs, node.attrs, TEXT_DOMAIN, node.opset)


#: Default-domain ops whose string inputs may differ in width (they read each string
#: as it is); every other op gets its string inputs widened to the widest.
_ANY_WIDTHS = frozenset({"StringConcat", "Equal"})


def same_widths(
    op_type: str,
    domain: str,
    inputs: Sequence[Value | None],
    name: str,
    new_value: Callable[[str], Value],
    new_node_name: Callable[[str], str],
    emit: Callable[[Node], None],
) -> list[Value | None]:
    """``inputs`` with each string input narrower than the widest one widened
    (``monolib.text::StringWiden``, folded for a constant), for an ONNX op whose
    string inputs share one type (Where, Concat...).

    Parameters
    ----------
    op_type, domain : str
        The node's op and domain.
    inputs : list of Value or None
        The node's inputs.
    name : str
        The node's name (the widening nodes are named after it).
    new_value, new_node_name, emit : callable
        The importer's fresh value, fresh node name, and append-node functions.
    """
    strings = [v for v in inputs if v is not None and v.dtype.kind == "S"]
    if domain != "" or op_type in _ANY_WIDTHS or len({v.dtype for v in strings}) < 2:
        return list(inputs)
    wide = max(v.dtype.itemsize for v in strings)
    out: list[Value | None] = []
    for i, v in enumerate(inputs):
        if v is None or v.dtype.kind != "S" or v.dtype.itemsize == wide:
            out.append(v)
            continue
        node = Node("StringWiden", new_node_name(f"{name}/widen{i}"), [v],
                    [new_value(f"{v.name}/S{wide}")], {"width": wide}, TEXT_DOMAIN, 1)
        out.append(insert_node(node, emit))
    return out


def string_input(name: str, given: Any) -> tuple[Any, np.dtype]:
    """The shape entry and dtype of string input ``name`` from its ``shapes=`` entry.

    Parameters
    ----------
    name : str
        The input's name (for messages).
    given : dict or None
        ``{"shape": <as for any input, optional>, "width": n}``.

    Returns
    -------
    (shape entry or None, numpy.dtype)
        What ``shapes=`` would hold for a numeric input, and ``S<n>``.

    Raises
    ------
    CompileError
        No width given, or one that is not a positive int, or other keys.
    """
    hint = (f"give its width (bytes of UTF-8 per element) with its shape: "
            f"shapes={{{name!r}: {{'shape': (...), 'width': 32}}}}")
    if not isinstance(given, Mapping):
        raise CompileError(f"input {name!r} is a string tensor: {hint}")
    extra = sorted(set(given) - {"shape", "width"})
    width = given.get("width")
    if extra or type(width) is not int or width < 1:
        raise CompileError(
            f"input {name!r} is a string tensor: its shapes= entry {dict(given)!r:.120} "
            f"needs 'width', an int >= 1, and at most 'shape'; {hint}"
        )
    return given.get("shape"), string_dtype(width)
