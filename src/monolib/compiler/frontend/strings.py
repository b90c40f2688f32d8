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
from collections.abc import Mapping
from typing import Any

import numpy as np

from ...errors import CompileError
from ..ir import Node
from ..ops.text._common import TEXT_DOMAIN, string_dtype

__all__ = ["string_dtype", "string_input", "string_node"]

logger = logging.getLogger(__name__)


#: Default-domain ops whose string form is another op: Equal on strings compares
#: UTF-8 slots, not numbers (the elementwise Equal would compare C structs).
_STRING_FORMS = {"Equal": "StringEqual"}


def string_node(node: Node) -> Node:
    """``node``, or its string form (:data:`_STRING_FORMS`, domain
    ``monolib.text``) when it is a default-domain op reading a string tensor."""
    form = _STRING_FORMS.get(node.op_type) if node.domain == "" else None
    if form is None or not any(v is not None and v.dtype.kind == "S" for v in node.inputs):
        return node
    return Node(form, node.name, node.inputs, node.outputs, node.attrs, TEXT_DOMAIN, node.opset)


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
