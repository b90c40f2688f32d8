"""Graph inputs of an ONNX model -> :class:`~monolib.compiler.ir.Value` s.

The shape comes from the model's declared input type (``ValueInfoProto.type.tensor_type``)
or, where a dim is dynamic, from the user's ``shapes={"x": (1, 3, 48, 320)}``: a static
size, or bounds ``(lo, hi[, step])`` making it a run-time dim (:mod:`.dims`, with
``dims=`` binding ONNX ``dim_param`` names). A dim is dynamic when it is symbolic
(``dim_param``), absent, or a non-positive ``dim_value`` (PaddlePaddle exports declare
``-1``). ``constants={"sr": 16000}`` turns an input into a compile-time constant. A string
input's width (bytes of UTF-8 per element) is given as ``shapes={"x": {"shape": ...,
"width": 16}}`` (:mod:`.strings`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ...errors import CompileError, ShapeError
from ...runtime.strings import to_utf8
from ..ir import Value
from ..passes.node_eval import make_const
from ..symbolic import SymbolTable
from .dims import input_dims, parse_dims, specializations
from .strings import string_input

__all__ = ["ResolvedInputs", "check_input_names", "declared_dims", "onnx_dtype", "resolve_inputs"]

logger = logging.getLogger(__name__)


def onnx_dtype(elem_type: int, where: str) -> np.dtype:
    """NumPy dtype of an ONNX ``TensorProto.DataType`` code.

    Raises
    ------
    CompileError
        For an undefined element type or one NumPy cannot hold (strings).
    """
    if elem_type == onnx.TensorProto.UNDEFINED:
        raise CompileError(f"{where}: element type is undefined")
    try:
        dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        name = onnx.TensorProto.DataType.Name(elem_type)
        raise CompileError(f"{where}: element type {name} is not supported") from None
    if dt.kind in "OUS":
        raise CompileError(f"{where}: element type {dt} (strings) is not supported")
    return dt


def declared_dims(info: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """The declared dims of a tensor value: an int for a known dim, the symbol
    (``str``) for a symbolic one, ``None`` for an unknown one (absent or <= 0).
    ``None`` when the rank itself is unknown."""
    tt = info.type.tensor_type
    if not tt.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return dims


def _fmt(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _constant_input(info: onnx.ValueInfoProto, value: Any, dtype: np.dtype | None) -> Value:
    """A constant Value for input ``info`` fed with ``value`` at compile time (``dtype``
    None: a string input, encoded as UTF-8 as wide as its longest element)."""
    name = info.name
    try:
        arr = np.asarray(value)
        cast = arr.astype(dtype) if dtype is not None else to_utf8(value)  # None: strings
    except (TypeError, ValueError) as e:
        raise CompileError(f"constant for input {name!r} is not convertible to {dtype}: {e}") from e
    if arr.dtype.kind in "iub" and dtype.kind in "iu" and not np.array_equal(cast, arr):
        raise CompileError(f"constant for input {name!r}: {value!r} does not fit in {dtype}")
    dims = declared_dims(info)
    mismatch = dims is not None and (
        len(dims) != cast.ndim
        or any(isinstance(d, int) and d != s for d, s in zip(dims, cast.shape))
    )
    if mismatch:
        raise ShapeError(
            f"constant for input {name!r} has shape {list(cast.shape)}, "
            f"the model declares {_fmt(dims)}"
        )
    return make_const(name, cast)


def check_input_names(
    graph: onnx.GraphProto, initializers: set[str], what: str, names: Mapping[str, Any]
) -> None:
    """Raise CompileError when ``names`` (keys of ``shapes=`` or ``constants=``)
    holds a name that is not a graph input."""
    valid = [i.name for i in graph.input if i.name not in initializers]
    for n in names:
        if n not in valid:
            raise CompileError(f"{what}: {n!r} is not an input of the model (inputs: {valid})")


@dataclass
class ResolvedInputs:
    """What :func:`resolve_inputs` found: the runtime inputs, the inputs made constant,
    the run-time symbols and the specializations (``{symbol: value}`` each)."""

    runtime: list[Value]
    consts: list[Value]
    symbols: SymbolTable = field(default_factory=SymbolTable)
    specializations: list[dict[str, int]] = field(default_factory=list)


def resolve_inputs(
    graph: onnx.GraphProto,
    initializers: set[str],
    shapes: Mapping[str, Sequence[Any]] | None,
    constants: Mapping[str, Any] | None,
    dims: Mapping[str, Any] | None = None,
    opt_shapes: Mapping[str, Sequence[Sequence[int]]] | None = None,
) -> ResolvedInputs:
    """Values of the graph inputs, with run-time dims where bounds are given.

    Inputs that are also initializers (IR < 4 style defaults) are left out: the
    initializer provides them.

    Raises
    ------
    ShapeError
        A dynamic dim with neither value nor bounds (message names the input, the axis
        and its symbol), a given shape or bound that contradicts the declared one, a
        malformed bound, ``dims``/``opt_shapes`` entries that do not fit.
    CompileError
        ``shapes``/``constants`` name something that is not an input, a non-tensor input;
        ``dims`` names no ``dim_param`` of the inputs.
    """
    shapes = dict(shapes or {})
    constants = dict(constants or {})
    check_input_names(graph, initializers, "shapes", shapes)
    check_input_names(graph, initializers, "constants", constants)
    bound = parse_dims(dims)
    params = {d for i in graph.input for d in (declared_dims(i) or []) if isinstance(d, str)}
    unknown = sorted(set(bound) - params)
    if unknown:
        raise CompileError(
            f"dims: {unknown} name no dim of the model's inputs (their dim_params: "
            f"{sorted(params)})"
        )
    out = ResolvedInputs([], [])
    for info in graph.input:
        if info.name in initializers:
            continue
        if not info.type.HasField("tensor_type"):  # a sequence or an optional
            from .sequence_inputs import sequence_input

            out.runtime.append(sequence_input(info, shapes.get(info.name), onnx_dtype))
            continue
        given = shapes.get(info.name)
        if info.type.tensor_type.elem_type == onnx.TensorProto.STRING:
            if info.name in constants:
                out.consts.append(_constant_input(info, constants[info.name], None))
                continue
            given, dtype = string_input(info.name, given)
        else:
            dtype = onnx_dtype(info.type.tensor_type.elem_type, f"input {info.name!r}")
        if info.name in constants:
            out.consts.append(_constant_input(info, constants[info.name], dtype))
            continue
        shape = input_dims(info.name, declared_dims(info), given, bound, out.symbols)
        out.runtime.append(Value(info.name, shape, dtype))
    out.specializations = specializations(
        opt_shapes, {v.name: v.shape for v in out.runtime}, out.symbols
    )
    if out.symbols:
        logger.info("run-time dims: %s", ", ".join(s.describe() for s in out.symbols))
    return out
