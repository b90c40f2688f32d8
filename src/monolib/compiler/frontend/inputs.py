"""Graph inputs of an ONNX model -> static-shaped :class:`~monolib.compiler.ir.Value`.

monolib compiles for ONE static shape per input. The shape comes from the model's
declared input type (``ValueInfoProto.type.tensor_type``) or, where a dim is dynamic,
from the user's ``shapes={"x": (1, 3, 48, 320)}``. A dim is dynamic when it is symbolic
(``dim_param``), absent, or a non-positive ``dim_value`` (PaddlePaddle exports declare
``-1``). ``constants={"sr": 16000}`` turns an input into a compile-time constant.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper

from ...errors import CompileError, ShapeError
from ..ir import Value
from ..passes.node_eval import make_const

__all__ = ["check_input_names", "declared_dims", "onnx_dtype", "resolve_inputs"]

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


def _static_shape(info: onnx.ValueInfoProto, given: Sequence[int] | None) -> tuple[int, ...]:
    """The static shape of input ``info``: the declared dims, with ``given`` (the
    user's shape) filling every dynamic dim and checked against every static one."""
    name = info.name
    dims = declared_dims(info)
    if given is not None:
        try:
            given = tuple(int(d) for d in given)
        except (TypeError, ValueError):
            raise ShapeError(f"input {name!r}: shape {given!r} is not a sequence of ints") from None
        if any(d < 0 for d in given):
            raise ShapeError(f"input {name!r}: shape {given} has a negative dim")
        if dims is not None:
            if len(dims) != len(given):
                raise ShapeError(
                    f"input {name!r}: shape {given} has rank {len(given)}, "
                    f"the model declares rank {len(dims)} ({_fmt(dims)})"
                )
            for i, (d, g) in enumerate(zip(dims, given)):
                if isinstance(d, int) and d != g:
                    raise ShapeError(
                        f"input {name!r}: dim {i} is {g} in the given shape {given}, "
                        f"but the model declares {d} ({_fmt(dims)})"
                    )
        return given
    if dims is None:
        raise ShapeError(
            f"input {name!r} has no declared shape; give it with shapes={{{name!r}: (...)}}"
        )
    for i, d in enumerate(dims):
        if not isinstance(d, int):
            sym = f" (symbolic {d!r})" if isinstance(d, str) else ""
            raise ShapeError(
                f"input {name!r}: dim {i}{sym} is dynamic ({_fmt(dims)}); "
                f"give the static shape with shapes={{{name!r}: (...)}}"
            )
    return tuple(dims)  # type: ignore[arg-type]


def _fmt(dims: Sequence[int | str | None]) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _constant_input(info: onnx.ValueInfoProto, value: Any, dtype: np.dtype) -> Value:
    """A constant Value for input ``info`` fed with ``value`` at compile time."""
    name = info.name
    try:
        arr = np.asarray(value)
        cast = arr.astype(dtype)
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


def resolve_inputs(
    graph: onnx.GraphProto,
    initializers: set[str],
    shapes: Mapping[str, Sequence[int]] | None,
    constants: Mapping[str, Any] | None,
) -> tuple[list[Value], list[Value]]:
    """Values of the graph inputs: ``(runtime inputs, inputs made constant)``.

    Inputs that are also initializers (IR < 4 style defaults) are left out: the
    initializer provides them.

    Raises
    ------
    ShapeError
        A dynamic dim with no value given (message names the input, the dim index and
        its symbol), or a given shape that contradicts the declared one.
    CompileError
        ``shapes``/``constants`` name something that is not an input, a non-tensor input.
    """
    shapes = dict(shapes or {})
    constants = dict(constants or {})
    check_input_names(graph, initializers, "shapes", shapes)
    check_input_names(graph, initializers, "constants", constants)
    runtime: list[Value] = []
    consts: list[Value] = []
    for info in graph.input:
        if info.name in initializers:
            continue
        if not info.type.HasField("tensor_type"):
            raise CompileError(f"input {info.name!r} is not a tensor; monolib takes tensors only")
        dtype = onnx_dtype(info.type.tensor_type.elem_type, f"input {info.name!r}")
        if info.name in constants:
            consts.append(_constant_input(info, constants[info.name], dtype))
            continue
        shape = _static_shape(info, shapes.get(info.name))
        runtime.append(Value(info.name, shape, dtype))
    return runtime, consts
