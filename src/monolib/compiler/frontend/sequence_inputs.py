"""Graph inputs of ONNX ``sequence`` and ``optional`` type: a :class:`~..ir.Value` with
``seq`` set, its slot sized from ``shapes=``.

``shapes={"x": [(2, 3), (4, 3)]}`` fixes a sequence input's element count and shapes
at compile time (as a tensor's ``shapes=`` entry does its shape: ``set_input`` then
takes exactly such a list, and ops like SequenceMap unroll over it);
``shapes={"x": {"capacity": 8, "max_shape": (4, 3)}}`` bounds them instead (any list of
at most 8 elements, each dim within its bound; the count and shapes are read at run
time). An optional tensor takes one shape (``(4,)``), an optional sequence either form.
Without ``shapes=`` an optional tensor whose declared shape is static takes it;
anything else is refused with the entry to pass.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import numpy as np
import onnx

from ...errors import CompileError
from ..ir import SeqType, Value

__all__ = ["sequence_input"]

logger = logging.getLogger(__name__)


def _tensor_of(info: onnx.ValueInfoProto) -> tuple[str, onnx.TypeProto.Tensor]:
    """``(kind, tensor type of the elements)``, kind as ``abi.sequences.KINDS``."""
    tp = info.type
    which = tp.WhichOneof("value")
    if which == "sequence_type" and tp.sequence_type.elem_type.HasField("tensor_type"):
        return "sequence", tp.sequence_type.elem_type.tensor_type
    if which == "optional_type":
        inner = tp.optional_type.elem_type
        if inner.HasField("tensor_type"):
            return "optional_tensor", inner.tensor_type
        if inner.HasField("sequence_type") and \
                inner.sequence_type.elem_type.HasField("tensor_type"):
            return "optional_sequence", inner.sequence_type.elem_type.tensor_type
    raise CompileError(f"input {info.name!r}: type {which} holds no tensors; monolib takes "
                       "tensors, sequences of tensors and optionals of those")


def _declared(tt: onnx.TypeProto.Tensor) -> tuple[int, ...] | None:
    if not tt.HasField("shape"):
        return None
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
    return None if None in dims else tuple(dims)


def sequence_input(info: onnx.ValueInfoProto, given: Any,
                   onnx_dtype: Callable[[int, str], np.dtype]) -> Value:
    """The Value of a sequence/optional graph input.

    Parameters
    ----------
    info : onnx.ValueInfoProto
        The input's declaration.
    given : list of shapes, dict, a shape, or None
        Its ``shapes=`` entry (see the module docstring).
    onnx_dtype : callable
        ``inputs.onnx_dtype``: the element type's dtype, refusing what monolib lacks.

    Raises
    ------
    CompileError
        A type holding no tensors, or no element shapes where they are needed (the
        message shows the ``shapes=`` entry to pass).
    ShapeError
        Element shapes of different ranks.
    """
    kind, tt = _tensor_of(info)
    dtype = np.dtype(onnx_dtype(tt.elem_type, f"input {info.name!r}"))
    if kind == "optional_tensor":
        shape = tuple(given) if given is not None else _declared(tt)
        if shape is None:
            raise CompileError(f"input {info.name!r} (an optional tensor) needs its shape: "
                               f"shapes={{{info.name!r}: (d0, d1, ...)}}")
        t = SeqType.of_shapes(kind, dtype, [shape], capacity=1)
    elif isinstance(given, dict):
        try:
            cap, top = int(given["capacity"]), tuple(int(d) for d in given["max_shape"])
        except (KeyError, TypeError, ValueError):
            raise CompileError(f"input {info.name!r}: a bound is {{'capacity': n, "
                               f"'max_shape': (d0, ...)}}, not {given!r:.80}") from None
        if cap < 0 or min(top, default=0) < 0:
            raise CompileError(f"input {info.name!r}: negative bound {given!r:.80}")
        t = SeqType(kind, dtype, cap, top)
    else:
        if given is None or not isinstance(given, (list, tuple)) or \
                not all(isinstance(s, (list, tuple)) for s in given):
            raise CompileError(
                f"input {info.name!r} (a {kind.replace('_', ' ')}) needs its element shapes: "
                f"shapes={{{info.name!r}: [(d0, ...), ...]}} (exact) or "
                f"{{{info.name!r}: {{'capacity': n, 'max_shape': (d0, ...)}}}} (bounds)")
        try:
            t = SeqType.of_shapes(kind, dtype, given)
        except ValueError as exc:
            raise CompileError(f"input {info.name!r}: {exc}") from None
    shape, slot_dtype = t.slot()
    logger.debug("input %s: %s of %s, capacity %d, elements up to %s", info.name, kind,
                  dtype, t.capacity, list(t.elem_max))
    return Value(info.name, shape, slot_dtype, seq=t)
