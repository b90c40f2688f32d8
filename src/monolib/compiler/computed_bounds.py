"""Joint upper bounds of computed dims (issue 13): the dims of a Reshape to a run-time
shape are separate computed symbols, each at most the element count ``N``, but their
product is at most ``N`` too. Interval arithmetic alone would plan ``N**rank`` elements;
:func:`bound_jointly` records the joint cap and :func:`numel_hi` applies it when the
memory plan sizes a value (``ir.nbytes_at_bounds``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .symbolic import Dim, DimLike, is_computed

__all__ = ["bound_jointly", "numel_hi", "origin", "record_origin"]

logger = logging.getLogger(__name__)

#: computed symbol name -> (the names of its group, the most their product can be)
_JOINT: dict[str, tuple[frozenset[str], int]] = {}
#: computed symbol name -> (node name, output, axis) of the size it is
_ORIGIN: dict[str, tuple[str, int, int]] = {}


def record_origin(name: str, node: str, out: int, axis: int) -> None:
    """Record which size computed symbol ``name`` is: dim ``axis`` of output ``out`` of
    node ``node``. The same model imported again (an ``opt_shapes`` specialization) makes
    a symbol of the same origin, so the two can be matched (:func:`origin`)."""
    _ORIGIN[name] = (node, int(out), int(axis))


def origin(name: str) -> tuple[str, int, int] | None:
    """``(node, output, axis)`` recorded for computed symbol ``name``, or None."""
    return _ORIGIN.get(name)


def bound_jointly(dims: Iterable[DimLike], cap: int) -> None:
    """Record that the product of the computed symbols among ``dims`` is at most ``cap``.

    Parameters
    ----------
    dims : iterable of int or Dim
        Dims of one value; those that are a computed symbol form the group (two or
        more: one alone is already bounded by its own ``hi``).
    cap : int
        The most elements their product can be (a Reshape's element count).
    """
    names = frozenset(d.symbols()[0].name for d in dims if isinstance(d, Dim) and is_computed(d))
    if len(names) > 1:
        for n in names:
            _JOINT[n] = (names, int(cap))


def numel_hi(shape: Iterable[DimLike]) -> int:
    """Elements of ``shape`` at the upper bounds of its dims, each group of jointly
    bounded computed dims (:func:`bound_jointly`) counted at its cap.

    Parameters
    ----------
    shape : iterable of int or Dim

    Returns
    -------
    int
        An upper bound of the element count (the memory plan's slot size / itemsize).
    """
    total, groups = 1, {}
    for d in shape:
        name = d.symbols()[0].name if isinstance(d, Dim) and is_computed(d) else None
        if name in _JOINT:
            names, cap = _JOINT[name]
            prod, _ = groups.get(names, (1, cap))
            groups[names] = (prod * d.hi, cap)
        else:
            total *= d.hi if isinstance(d, Dim) else int(d)
    for prod, cap in groups.values():
        total *= min(prod, cap)
    return total
