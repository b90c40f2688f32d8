"""Calling an op's ``infer`` and ``reference`` on one node, with errors that name it.

Shared by the frontend (typing and folding while importing), :mod:`.fold_constants`
and :mod:`monolib.compiler.reference_eval`. An exception escaping an op
implementation is re-raised as a :class:`~monolib.errors.MonolibError` whose
message starts with the node's name and op type, so a failure deep in a 900-node model
says where it happened.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import numpy as np

from ...errors import CompileError, MonolibError
from ..ir import Node, Value, is_static, normalize_shape
from ..ops.base import OpDef, op_of
from ..symbolic import Dim

__all__ = [
    "MAX_FOLD_BYTES",
    "fold_node",
    "foldable",
    "has_dims",
    "make_const",
    "node_context",
    "run_infer",
    "run_reference",
    "set_type",
]

logger = logging.getLogger(__name__)


def _where(node: Node) -> str:
    return f"node {node.name!r} ({node.op_type})"


@contextlib.contextmanager
def node_context(node: Node, what: str) -> Iterator[None]:
    """Re-raise any exception inside the block with ``node`` named in the message.

    A :class:`MonolibError` keeps its class; anything else (a bug, a NumPy error)
    becomes a :class:`CompileError` chained to the original.
    """
    try:
        yield
    except MonolibError as e:
        msg = str(e)
        if node.name and repr(node.name) in msg:
            raise
        try:
            new = type(e)(f"{_where(node)}: {msg}")
        except TypeError:
            raise e from None
        raise new from e
    except Exception as e:
        raise CompileError(f"{_where(node)}: {what} failed: {type(e).__name__}: {e}") from e


def make_const(name: str, array: np.ndarray) -> Value:
    """A constant Value holding ``array`` as a C-contiguous array.

    Unlike ``np.ascontiguousarray`` (used by ``Value.constant``), this keeps 0-d
    arrays 0-d: ONNX scalars must stay scalars (shape ``()``). An ``object`` array (a
    shape computed from run-time dims) stays one, typed ``int64``, while it holds a
    :class:`~..symbolic.Dim`; without one it becomes a plain ``int64`` array.
    """
    arr = np.asarray(array, order="C")
    if arr.dtype == object:
        if not has_dims(arr):
            arr = arr.astype(np.int64)
        else:
            return Value(name, arr.shape, np.int64, arr)
    return Value(name, arr.shape, arr.dtype, arr)


def has_dims(array: np.ndarray) -> bool:
    """True when ``array`` (an ``object`` array) holds a run-time Dim."""
    return array.dtype == object and any(isinstance(x, Dim) for x in array.reshape(-1))


def set_type(value: Value, shape: tuple, dtype: np.dtype) -> None:
    """Give ``value`` a shape (ints and run-time Dims) and dtype, normalized like
    ``Value`` does."""
    value.shape = normalize_shape(shape)
    value.dtype = np.dtype(dtype)


def run_infer(node: Node, op: OpDef | None = None) -> None:
    """Type ``node``'s outputs with ``op.infer`` (in place).

    Raises
    ------
    CompileError
        When infer fails or returns fewer types than the node has outputs.
    ShapeError
        Propagated (with the node named) from the op.
    """
    op = op or op_of(node)
    with node_context(node, "shape inference"):
        types = op.infer(node)
    if len(types) < len(node.outputs):
        raise CompileError(
            f"{_where(node)}: infer gave {len(types)} output types for {len(node.outputs)} outputs"
        )
    for v, (shape, dtype) in zip(node.outputs, types):
        set_type(v, shape, dtype)


def run_reference(
    node: Node, inputs: list[np.ndarray | None], op: OpDef | None = None
) -> list[np.ndarray]:
    """Run ``op.reference`` on ``inputs``; check and normalize the results against
    the outputs' types (cast to the output dtype, same shape required).

    Raises
    ------
    CompileError
        On failure, too few results, or a result whose shape differs from the output's.
    """
    op = op or op_of(node)
    with node_context(node, "reference"):
        results = op.reference(node, inputs)
    if len(results) < len(node.outputs):
        raise CompileError(
            f"{_where(node)}: reference gave {len(results)} results for {len(node.outputs)} outputs"
        )
    out = []
    for i, (v, r) in enumerate(zip(node.outputs, results)):
        if v.seq is not None:  # a sequence (a list) or optional (a value or None)
            out.append(r)
            continue
        r = np.asarray(r)
        if v.shape == () and r.shape == (1,):
            # np.ascontiguousarray turns 0-d arrays into 1-d ones: a common slip in
            # references, harmless here, so the scalar shape of infer wins
            r = r.reshape(())
        if r.shape != v.shape:
            raise CompileError(
                f"{_where(node)}: reference output {i} has shape {list(r.shape)} "
                f"but infer gave {list(v.shape)}"
            )
        if r.dtype == object and has_dims(r):  # a shape computed from run-time dims
            out.append(np.asarray(r, order="C"))
            continue
        out.append(np.asarray(r, dtype=v.dtype, order="C"))
    return out


#: A node whose constant outputs would exceed this many bytes AND be more than
#: ``GROWTH_LIMIT`` times its inputs is left to run at run time (an ``Expand`` or
#: ``ConstantOfShape`` could otherwise bloat the library by gigabytes).
MAX_FOLD_BYTES = 64 << 20
GROWTH_LIMIT = 4


def foldable(node: Node, op: OpDef) -> bool:
    """True when ``node`` can be computed at compile time: ``op.foldable``, at least
    one input, every given input constant, and outputs of reasonable size (see
    :data:`MAX_FOLD_BYTES`). Outputs must already be typed."""
    given = [v for v in node.inputs if v is not None]
    if not (op.foldable and given and all(v.is_const for v in given)):
        return False
    if not all(is_static(v.shape) for v in node.outputs):
        return False  # data of a run-time size: computed at run time
    out_bytes = sum(v.nbytes for v in node.outputs)
    if out_bytes > MAX_FOLD_BYTES and out_bytes > GROWTH_LIMIT * sum(v.nbytes for v in given):
        logger.info("not folding %s %r: %d bytes of constants", node.op_type, node.name, out_bytes)
        return False
    return True


def fold_node(node: Node, op: OpDef | None = None) -> bool:
    """If ``node`` is foldable, compute its outputs with the reference and make each
    output ``Value`` constant in place (uses keep pointing at the same objects).

    Returns
    -------
    bool
        True when the node was folded (the caller drops it from the graph).
    """
    op = op or op_of(node)
    if not foldable(node, op):
        return False
    inputs = [v.const if v is not None else None for v in node.inputs]
    if not any(x is not None and x.dtype == object for x in inputs):
        arrays = run_reference(node, inputs, op)
    else:
        # a shape computation over run-time dims folds symbolically where the reference
        # takes object arrays of Dims; where it cannot (int(), range(), a cast, a
        # comparison with no one answer) the node stays and runs at run time
        try:
            arrays = run_reference(node, inputs, op)
        except CompileError as e:
            logger.debug("%s %r stays (run-time dims): %s", node.op_type, node.name, e)
            return False
    for v, a in zip(node.outputs, arrays):
        v.const = a
    return True
