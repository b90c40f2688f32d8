"""Shared pieces of the ops whose output size depends on run-time data (issue 13):
the computed dim of an output (:func:`count_dim`) and the C that loops over a tensor
of any (run-time) shape.
"""

from __future__ import annotations

import logging

from ...computed_bounds import record_origin
from ...ir import Node, Value, shape_size
from ...symbolic import Dim, DimLike, computed_symbol, is_computed

__all__ = ["count_dim", "is_runtime", "numel_hi", "upper"]

logger = logging.getLogger(__name__)


def is_runtime(v: Value | None) -> bool:
    """Whether ``v`` is present and not a compile-time constant (symbolic constants,
    computed from run-time dims, count as constants: they fold)."""
    return v is not None and v.const is None


def upper(d: DimLike) -> int:
    """The upper bound of a dim (an int as is)."""
    return d.hi if isinstance(d, Dim) else int(d)


def count_dim(node: Node, out: int, axis: int, what: str, hi: DimLike) -> DimLike:
    """The data-dependent dim ``axis`` of output ``out`` (issue 13 contract).

    Parameters
    ----------
    node : Node
        The op whose ``infer`` asks (its name seeds the symbol's name).
    out, axis : int
        Which output and dim the size is.
    what : str
        A word for the symbol's name (``"count"``, ``"selected"``).
    hi : int or Dim
        The most the size can be (a Dim counts at its upper bound).

    Returns
    -------
    Dim or int
        A fresh computed symbol ``0..hi`` as a Dim, or the one an earlier ``infer`` of
        this node put there (so inferring twice keeps one symbol); the int 0 when
        ``hi`` is 0 (nothing can be selected).
    """
    bound = upper(hi)
    if bound <= 0:
        return 0
    v = node.outputs[out] if out < len(node.outputs) else None
    old = v.shape[axis] if v is not None and len(v.shape) > axis else None
    if isinstance(old, Dim) and is_computed(old) and old.hi == bound:
        return old
    sym = computed_symbol(f"{node.name or node.op_type}_{what}", hi=bound)
    record_origin(sym.name, node.name, out, axis)
    return Dim.of(sym)


def numel_hi(v: Value) -> int:
    """Elements of ``v`` at the upper bounds of its dims."""
    return upper(shape_size(v.shape))

