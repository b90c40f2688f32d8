"""The flat epilogue view: output 0 seen as ``[1, prod(dims[:-1]), last]``.

Ops that write their output in plain row-major order (the reductions, Softmax, the row
normalizations, CumSum, ArgMax, Gather, Pad...) accept a fused elementwise epilogue
over this view. It is defined once here (:func:`flat_groups`) and declared by
inheriting :class:`FlatEpilogueOp` (see ``OpDef.epilogue_groups`` in ``ops/base.py``
for what the groups mean).
"""

from __future__ import annotations

import logging

from ...ir import Node
from ..base import OpDef

__all__ = ["FlatEpilogueOp", "flat_groups"]

logger = logging.getLogger(__name__)


def flat_groups(rank: int) -> list[list[int]]:
    """Epilogue groups viewing a rank-``rank`` output as ``[1, prod(dims[:-1]), last]``.

    Parameters
    ----------
    rank : int
        The output's rank; 0 gives three empty groups (a scalar is ``[1, 1, 1]``).

    Returns
    -------
    list of list of int
        ``[[], [0 .. rank - 2], [rank - 1]]``.
    """
    if rank == 0:
        return [[], [], []]
    return [[], list(range(rank - 1)), [rank - 1]]


class FlatEpilogueOp(OpDef):
    """An op that takes a fused epilogue over its output 0 in the flat view
    (:func:`flat_groups`)."""

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        return flat_groups(len(node.outputs[0].shape))
