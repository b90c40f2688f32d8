"""Graph passes: each ``call(graph) -> PassResult``; :class:`PassManager` runs a list
of them, optionally to a fixed point (the onnx-ir pass design).

``fuse_elementwise`` and ``plan_memory`` live in their own modules (imported there
directly); this package exports the graph-level passes that run before fusion.
"""

from .base import Pass, PassManager, PassResult
from .dce import DeadCodeElimination
from .fold_batchnorm import FoldBatchNorm
from .fold_constants import FoldConstants

__all__ = [
    "Pass",
    "PassResult",
    "PassManager",
    "FoldConstants",
    "FoldBatchNorm",
    "DeadCodeElimination",
    "simplify",
]


def simplify(graph):
    """Run the pre-fusion passes to a fixed point: constant folding, BatchNormalization
    folding into convolutions, dead code elimination.

    Parameters
    ----------
    graph : monolib.compiler.ir.Graph
        Modified in place.

    Returns
    -------
    PassResult
    """
    return PassManager([FoldConstants(), FoldBatchNorm(), DeadCodeElimination()])(graph)
