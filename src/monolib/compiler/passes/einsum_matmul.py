"""Rewrite a two-operand ``Einsum`` as ``Transpose -> Reshape -> MatMul -> Reshape ->
Transpose`` (the contraction as one batched GEMM, as ``numpy.einsum(optimize=True)``
and ONNX Runtime's Einsum kernel do).

Every label of ``A,B->Y`` is one of: batch (in A, B and Y), M (A and Y), N (B and Y)
or K (A and B, summed). A is transposed to ``[batch, M, K]`` and B to ``[batch, K,
N]``, each group flattened to one axis, multiplied by MatMul (``[batch, M, N]``), and
the product unflattened and transposed to Y's label order; transposes and reshapes
that change nothing are left out. Attention's ``bhqd,bhkd->bhqk`` (8 x 256 x 64 per
head) ran 18 ms in the Einsum op's loop nest, a GEMM's work at the GEMM's speed here.

Left to the Einsum op: one operand or three, a label repeated in a term (a diagonal),
a label in one operand only and not in Y (a sum over that operand alone), a size-1
dimension broadcast against a larger one, sizes known only at run time, non-float
types.
"""

from __future__ import annotations

import logging

import numpy as np

from ...errors import MonolibError
from ..ir import Graph, Node
from ..ops.math.einsum import parse_einsum
from ..symbolic import is_dim
from .base import Pass, PassResult, splice_nodes
from .rewrite import NodeBuilder, graph_index, ops_available

__all__ = ["EinsumToMatMul", "contraction_groups"]

logger = logging.getLogger(__name__)


def contraction_groups(
    in_labels: list[list[int]], out_labels: list[int]
) -> tuple[list[int], list[int], list[int], list[int]] | None:
    """``(batch, M, N, K)`` labels of a two-operand contraction (batch, M and N in Y's
    order, K in A's), or None where it is not a plain batched matrix product: a label
    repeated in a term, or one in a single operand that Y does not keep."""
    la, lb = in_labels
    if len(set(la)) != len(la) or len(set(lb)) != len(lb) or len(set(out_labels)) != len(out_labels):
        return None
    sa, sb, so = set(la), set(lb), set(out_labels)
    if (sa - sb - so) or (sb - sa - so) or not so <= (sa | sb):
        return None
    batch = [x for x in out_labels if x in sa and x in sb]
    m = [x for x in out_labels if x in sa and x not in sb]
    n = [x for x in out_labels if x in sb and x not in sa]
    k = [x for x in la if x in sb and x not in so]
    return batch, m, n, k


def _size(sizes: dict[int, int], labels: list[int]) -> int:
    return int(np.prod([sizes[x] for x in labels], dtype=np.int64))


class EinsumToMatMul(Pass):
    """Two-operand float ``Einsum`` contractions as one batched MatMul (see the module
    doc)."""

    def call(self, graph: Graph) -> PassResult:
        _, _, _, names = graph_index(graph)
        replace: dict[int, list[Node]] = {}
        for node in graph.nodes:
            nodes = self._rewrite(node, names)
            if nodes is not None:
                replace[id(node)] = nodes
        if not replace:
            return PassResult(graph, False)
        splice_nodes(graph, replace, set())
        logger.info("rewrote %d Einsum contractions as MatMul", len(replace))
        return PassResult(graph, True)

    @staticmethod
    def _rewrite(node: Node, names: set[str]) -> list[Node] | None:
        if node.op_type != "Einsum" or node.domain != "" or len(node.inputs) != 2:
            return None
        a, b = node.inputs
        y = node.outputs[0]
        if a is None or b is None or y.dtype.kind != "f" or a.dtype != b.dtype:
            return None
        if any(is_dim(v) for v in (*a.shape, *b.shape, *y.shape)):
            return None
        if not ops_available(("Transpose", "Reshape", "MatMul"), node.opset):
            return None
        try:
            in_labels, out_labels, sizes = parse_einsum(
                str(node.attrs["equation"]), [tuple(a.shape), tuple(b.shape)])
        except MonolibError:  # the Einsum op reports a bad equation with its own error
            return None
        for labels, shape in zip(in_labels, (a.shape, b.shape)):
            if any(int(s) != sizes[x] for x, s in zip(labels, shape)):
                return None  # a broadcast size-1 dimension
        groups = contraction_groups(in_labels, out_labels)
        if groups is None:
            return None
        batch, m, n, k = groups
        bld = NodeBuilder(node.name, names, node.opset, y.dtype)

        def arrange(v, labels, order, flat):
            perm = [labels.index(x) for x in order]
            if perm != list(range(len(perm))):
                v = bld.add("Transpose", [v], {"perm": perm})
            want = [_size(sizes, g) for g in flat]
            if list(v.shape) != want:
                v = bld.add("Reshape", [v, bld.const("shape", np.array(want, np.int64))])
            return v

        a2 = arrange(a, in_labels[0], batch + m + k, [batch, m, k])
        b2 = arrange(b, in_labels[1], batch + k + n, [batch, k, n])
        natural = batch + m + n
        perm = [natural.index(x) for x in out_labels]
        dims = [sizes[x] for x in natural]
        prod = bld.add("MatMul", [a2, b2],
                       out=y if perm == list(range(len(perm))) and dims == [
                           _size(sizes, batch), _size(sizes, m), _size(sizes, n)] else None)
        if prod is y:
            return bld.nodes
        shaped = prod
        if list(prod.shape) != dims:
            last = perm == list(range(len(perm)))
            shaped = bld.add("Reshape", [prod, bld.const("shape", np.array(dims, np.int64))],
                             out=y if last else None)
        if shaped is not y:
            bld.add("Transpose", [shaped], {"perm": perm}, out=y)
        return bld.nodes
