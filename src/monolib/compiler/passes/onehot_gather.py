"""Rewrite a one-hot MatMul (an embedding lookup written as algebra) as a Gather.

Exporters from JAX/TF write ``embedding[idx]`` as
``MatMul(Cast(Equal(idx[..., None], arange(K))), W)``: a ``[..., N, K]`` one-hot
tensor times the ``[K, D]`` table, ``N * K * D`` multiply-adds to pick ``N`` rows
(Magika: 2048 x 257 x 64, ~1.4 ms of its run). ``Gather(W, idx)`` gives the same
rows with no arithmetic. An index outside ``[0, K)`` matches no column, so its
one-hot row is zero and so is its MatMul row: the rewrite keeps that by appending a
zero row ``K`` to the table and sending such indices there:

``idx' = Where(Or(Less(idx, 0), Greater(idx, K - 1)), K, idx)``;
``y = Gather(concat(W, 0), Reshape(idx', idx.shape[:-1]), axis=0)``.

The result is exact (each output is one table entry, or 0, as in the MatMul).
"""

from __future__ import annotations

import logging

import numpy as np

from ...runtime.errors import UnsupportedOpError
from ..ir import Graph, Node, Value
from ..ops.base import lookup
from .base import Pass, PassResult
from .node_eval import make_const, run_infer

__all__ = ["OneHotMatMulToGather", "match_onehot_matmul"]

logger = logging.getLogger(__name__)

_NEEDED = ("Gather", "Where", "Less", "Greater", "Or", "Reshape")


def _arange_len(c: np.ndarray | None) -> int | None:
    """K when ``c`` is ``arange(K)`` shaped ``[1, ..., 1, K]``, else None."""
    if c is None or c.ndim == 0 or c.dtype.kind not in "iu" or c.size != c.shape[-1]:
        return None
    k = c.shape[-1]
    return k if np.array_equal(c.reshape(-1), np.arange(k)) else None


def match_onehot_matmul(
    mm: Node, producers: dict[int, Node], readers: dict[int, list[Node]], outputs: set[int]
) -> tuple[Value, np.ndarray] | None:
    """``(idx, W)`` when ``mm`` is ``MatMul(Cast(Equal(idx, arange(K))), W)`` with a
    ``[..., N, 1]`` integer ``idx`` and a constant ``[K, D]`` ``W``, the one-hot
    intermediates read by nothing else; None otherwise."""
    if mm.op_type != "MatMul" or mm.domain != "" or len(mm.inputs) != 2:
        return None
    oh, w = mm.inputs
    if oh is None or w is None or not w.is_const or len(w.shape) != 2:
        return None
    cast = producers.get(oh.uid)
    if cast is None or cast.op_type != "Cast" or oh.dtype != w.dtype:
        return None
    eq_out = cast.inputs[0]
    eq = producers.get(eq_out.uid)
    if eq is None or eq.op_type != "Equal":
        return None
    for v in (oh, eq_out):
        if v.uid in outputs or len(readers.get(v.uid, [])) != 1:
            return None
    a, b = eq.inputs
    idx, k = (a, _arange_len(b.const)) if not a.is_const else (b, _arange_len(a.const))
    if k is None or idx.is_const or idx.dtype.kind not in "iu" or not idx.shape:
        return None
    if idx.shape[-1] != 1 or eq_out.shape != idx.shape[:-1] + (k,) or w.shape[0] != k:
        return None
    return idx, w.const


def _supported(opset: int) -> bool:
    try:
        for op in _NEEDED:
            lookup(op, opset)
    except UnsupportedOpError:
        return False
    return True


class OneHotMatMulToGather(Pass):
    """Replace each one-hot MatMul by a Gather from the table (see the module doc)."""

    def call(self, graph: Graph) -> PassResult:
        producers = graph.producers()
        readers = graph.consumers()
        outputs = {v.uid for v in graph.outputs}
        names = {v.name for v in graph.values()}
        new_nodes: list[Node] = []
        changed = 0
        for node in graph.nodes:
            match = match_onehot_matmul(node, producers, readers, outputs)
            if match is None or not _supported(node.opset):
                new_nodes.append(node)
                continue
            new_nodes.extend(_gather_nodes(node, *match, names))
            changed += 1
        if changed:
            graph.nodes = new_nodes
            logger.info("rewrote %d one-hot MatMuls as Gathers", changed)
        return PassResult(graph, changed > 0)


def _gather_nodes(mm: Node, idx: Value, w: np.ndarray, names: set[str]) -> list[Node]:
    """The nodes computing ``mm``'s output (same Value) with a Gather."""
    k = w.shape[0]
    nodes: list[Node] = []

    def fresh(suffix: str) -> str:
        name, n = f"{mm.name}/{suffix}", 0
        while name in names:
            n += 1
            name = f"{mm.name}/{suffix}.{n}"
        names.add(name)
        return name

    def const(suffix: str, array) -> Value:
        return make_const(fresh(suffix), np.asarray(array))

    def add(op: str, inputs: list[Value], attrs: dict | None = None, out: Value | None = None):
        out = out or Value(fresh(op.lower()), (), np.float32)
        node = Node(op, fresh(op), inputs, [out], attrs or {}, "", mm.opset)
        run_infer(node)
        nodes.append(node)
        return out

    flat = add("Reshape", [idx, const("idx_shape", np.array(idx.shape[:-1], np.int64))])
    low = add("Less", [flat, const("zero", np.zeros((), idx.dtype))])
    high = add("Greater", [flat, const("last", np.array(k - 1, idx.dtype))])
    bad = add("Or", [low, high])
    safe = add("Where", [bad, const("zero_row", np.array(k, idx.dtype)), flat])
    table = const("table", np.concatenate([w, np.zeros((1, w.shape[1]), w.dtype)]))
    add("Gather", [table, safe], {"axis": 0}, out=mm.outputs[0])
    return nodes
