"""Graph passes: each ``call(graph) -> PassResult``; :class:`PassManager` runs a list
of them, optionally to a fixed point (the onnx-ir pass design).

``fuse_elementwise`` and ``plan_memory`` live in their own modules (imported there
directly); this package exports the graph-level passes that run before fusion.
"""

from .base import Pass, PassManager, PassResult
from .collapse_reshapes import CollapseReshapes
from .dce import DeadCodeElimination
from .fold_batchnorm import FoldBatchNorm
from .fold_constants import FoldConstants
from .remove_noops import RemoveNoOps

__all__ = [
    "CollapseReshapes",
    "DeadCodeElimination",
    "FoldBatchNorm",
    "FoldConstants",
    "Pass",
    "PassManager",
    "PassResult",
    "RemoveNoOps",
    "simplify",
]


def simplify(graph):
    """Run the pre-fusion passes to a fixed point: constant folding, BatchNormalization
    folding into convolutions, reshape-chain collapsing, no-op removal, dead code
    elimination.

    Parameters
    ----------
    graph : monolib.compiler.ir.Graph
        Modified in place.

    Returns
    -------
    PassResult
    """
    passes = [
        FoldConstants(),
        FoldBatchNorm(),
        CollapseReshapes(),
        RemoveNoOps(),
        DeadCodeElimination(),
    ]
    return PassManager(passes)(graph)
