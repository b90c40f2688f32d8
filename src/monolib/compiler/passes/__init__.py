"""Graph passes: each ``call(graph) -> PassResult``; :class:`PassManager` runs a list
of them, optionally to a fixed point (the onnx-ir pass design).

This package exports the graph-level passes that run before fusion, one per module:

* :class:`FoldConstants` -- compute nodes whose inputs are all constant (``fold_constants``)
* :class:`FoldBatchNorm` -- BatchNormalization and per-channel Mul/Add/Sub into the
  preceding Conv/ConvTranspose (``fold_batchnorm``)
* :class:`CollapseReshapes` -- chains of reshape-like nodes into one Reshape
  (``collapse_reshapes``)
* :class:`RemoveNoOps` -- identity-like nodes rewired away (``remove_noops``)
* :class:`OneHotMatMulToGather` -- one-hot embedding MatMul as a Gather (``onehot_gather``)
* :class:`TanhPlusOneToSigmoid` -- ``1 + tanh(u)`` as ``2 sigmoid(2u)`` (``tanh_sigmoid``)
* :class:`EinsumToMatMul` -- two-operand Einsum contractions as one batched MatMul
  (``einsum_matmul``)
* :class:`DeadCodeElimination` -- nodes that reach no graph output (``dce``)

:func:`simplify` runs them to a fixed point. ``fuse_elementwise`` and ``plan_memory``
live in their own modules (imported there directly).
"""

from .base import Pass, PassManager, PassResult
from .collapse_reshapes import CollapseReshapes
from .dce import DeadCodeElimination
from .einsum_matmul import EinsumToMatMul
from .fold_batchnorm import FoldBatchNorm
from .fold_constants import FoldConstants
from .onehot_gather import OneHotMatMulToGather
from .remove_noops import RemoveNoOps
from .tanh_sigmoid import TanhPlusOneToSigmoid

__all__ = [
    "CollapseReshapes",
    "DeadCodeElimination",
    "EinsumToMatMul",
    "FoldBatchNorm",
    "FoldConstants",
    "OneHotMatMulToGather",
    "Pass",
    "PassManager",
    "PassResult",
    "RemoveNoOps",
    "TanhPlusOneToSigmoid",
    "simplify",
]


def simplify(graph, onehot_gather: bool = True):
    """Run the pre-fusion passes to a fixed point: constant folding, BatchNormalization
    folding into convolutions, Einsum contractions as MatMul, reshape-chain collapsing,
    no-op removal, ``1 + tanh(u)`` as ``2 sigmoid(2u)``, dead code elimination.

    Parameters
    ----------
    graph : monolib.compiler.ir.Graph
        Modified in place.
    onehot_gather : bool
        Also rewrite one-hot MatMuls as Gathers (:class:`OneHotMatMulToGather`; the
        elementwise nodes after them are folded into the gathered table, and a MatMul
        whose result an unfoldable elementwise node reads is kept).

    Returns
    -------
    PassResult
    """
    passes = [
        FoldConstants(),
        FoldBatchNorm(),
        EinsumToMatMul(),
        CollapseReshapes(),
        RemoveNoOps(),
        TanhPlusOneToSigmoid(),
        DeadCodeElimination(),
    ]
    if onehot_gather:
        passes.insert(2, OneHotMatMulToGather())
    return PassManager(passes)(graph)
