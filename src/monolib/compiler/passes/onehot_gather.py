"""Rewrite a one-hot MatMul (an embedding lookup written as algebra) as a Gather.

Exporters from JAX/TF write ``embedding[idx]`` as
``MatMul(Cast(Equal(idx[..., None], arange(K))), W)``: a ``[..., N, K]`` one-hot
tensor times the ``[K, D]`` table, ``N * K * D`` multiply-adds to pick ``N`` rows
(Magika: 2048 x 257 x 64, ~1.4 ms of its run). ``Gather(W, idx)`` gives the same
rows with no arithmetic. An index outside ``[0, K)`` matches no column, so its
one-hot row is zero and so is its MatMul row: the rewrite keeps that by appending a
zero row ``K`` to the table and sending such indices there:

``idx' = Where(Or(Less(idx, 0), Greater(idx, K - 1)), K, idx)``;
``y = Gather(concat(W, 0), Reshape(idx', y.shape[:-1]), axis=0)``.

The index may reach the ``Equal`` through ``Expand`` (JAX's ``BroadcastTo``, as in
Magika): ``Equal(Expand(x, s), arange)`` equals ``Equal(x, arange)`` whenever the
latter already has the full one-hot shape, so the Expand is looked through.

Elementwise nodes after the MatMul whose other inputs are constants that vary only
along the last (``D``) axis (a bias, the tanh-GELU constants) commute with the
Gather: ``f(W[idx] + b) = (f(W + b))[idx]`` row by row. They are evaluated on the
table at compile time, so the Gather yields their result directly (Magika's
``Dense_0`` bias and GELU vanish from the run). The zero row becomes ``f(0 + b)``,
what the MatMul path computes for an out-of-range index.

The rewrite is exact for a finite table (each output row is one table row or the
zero row, then the same float32 elementwise ops): a table holding inf or NaN is left
alone, since ``0 * inf`` makes the MatMul's whole row NaN. It is also skipped when
an elementwise node outside the folded set reads the result (it would fuse into the
Gather as a per-element epilogue, slower than the MatMul it replaces).
"""

from __future__ import annotations

import logging

import numpy as np

from ...errors import UnsupportedOpError
from ..ir import Graph, Node, Value, shape_array
from ..ops.base import op_of
from .base import Pass, PassResult, splice_nodes
from .node_eval import run_infer, run_reference
from .rewrite import NodeBuilder, graph_index, ops_available

__all__ = ["OneHotMatMulToGather", "fold_into_table", "match_onehot_matmul"]

logger = logging.getLogger(__name__)

_NEEDED = ("Gather", "Where", "Less", "Greater", "Or", "Reshape", "Cast")


def _arange_len(c: np.ndarray | None) -> int | None:
    """K when ``c`` is ``arange(K)`` shaped ``[1, ..., 1, K]``, else None."""
    if c is None or c.ndim == 0 or c.dtype.kind not in "iu" or c.size != c.shape[-1]:
        return None
    k = c.shape[-1]
    return k if np.array_equal(c.reshape(-1), np.arange(k)) else None


def _is_index_for(v: Value, eq_shape: tuple[int, ...]) -> bool:
    """True when ``v`` (an integer ``[..., N, 1]`` tensor) compared with ``arange(K)``
    gives the one-hot shape ``eq_shape = [..., N, K]`` by itself."""
    if v.is_const or v.dtype.kind not in "iu" or not v.shape or len(v.shape) > len(eq_shape):
        return False
    padded = (1,) * (len(eq_shape) - len(v.shape)) + v.shape
    return padded[-1] == 1 and padded[:-1] == eq_shape[:-1]


def _index_source(idx: Value, eq_shape: tuple[int, ...], producers: dict[int, Node]):
    """The earliest value along a chain of ``Expand`` nodes ending at ``idx`` that can
    stand for ``idx`` in the ``Equal`` (:func:`_is_index_for`); None if there is none."""
    best = idx if _is_index_for(idx, eq_shape) else None
    v = idx
    while True:
        node = producers.get(v.uid)
        if node is None or node.op_type != "Expand" or node.domain != "":
            return best
        v = node.inputs[0]
        if _is_index_for(v, eq_shape):
            best = v


def match_onehot_matmul(
    mm: Node, producers: dict[int, Node], readers: dict[int, list[Node]], outputs: set[int]
) -> tuple[Value, np.ndarray] | None:
    """``(idx, W)`` when ``mm`` is ``MatMul(Cast(Equal(idx, arange(K))), W)`` with an
    integer ``idx`` (``[..., N, 1]``, or any ``Expand`` of such an ``x`` that
    :func:`_index_source` can look through; ``idx`` is then ``x``) and a constant finite
    ``[K, D]`` ``W``, the one-hot intermediates read by nothing else; None otherwise."""
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
    if k is None or idx.is_const or w.shape[0] != k or eq_out.shape[-1:] != (k,):
        return None
    src = _index_source(idx, eq_out.shape, producers)
    if src is None or not np.all(np.isfinite(w.const)):
        return None
    return src, w.const


def _row_invariant(v: Value, rank: int) -> bool:
    """A constant that, broadcast to rank ``rank``, varies at most along the last axis."""
    if not v.is_const or len(v.shape) > rank:
        return False
    return all(d == 1 for d in v.shape[:-1])


def fold_into_table(
    graph: Graph, mm: Node, table: np.ndarray, readers: dict[int, list[Node]], outputs: set[int]
) -> list[tuple[Value, np.ndarray, list[Node]]] | None:
    """The elementwise nodes after ``mm`` that commute with a row gather, evaluated on
    ``table`` (``[R, D]``, the rows the Gather will pick from).

    Collects, in graph order, every single-output elementwise node whose inputs are the
    MatMul output, outputs of nodes already collected, or constants varying only along
    the last axis, and whose output has the MatMul output's shape. The *frontier* is
    each collected value (the MatMul output included) read by an uncollected node or
    that is a graph output.

    Returns
    -------
    list of (Value, numpy.ndarray, list of Node) or None
        Per frontier value: the value, its ``[R, D]`` table, and (in the first entry
        only) the collected nodes, which the caller drops. None when an elementwise
        node outside the set reads a frontier value (it would become the Gather's
        per-element epilogue).
    """
    y = mm.outputs[0]
    rank = len(y.shape)
    # the table as the MatMul output would see it: [1, ..., 1, R, D]
    shaped = table.reshape((1,) * (rank - 2) + table.shape)
    arrays = {y.uid: shaped}
    start = graph.nodes.index(mm) + 1
    collected: list[Node] = []
    for node in graph.nodes[start:]:
        ins = [v for v in node.inputs if v is not None]
        if (
            node.domain != ""
            or len(node.outputs) != 1
            or node.outputs[0].shape != y.shape
            or not any(v.uid in arrays for v in ins)
            or not all(v.uid in arrays or _row_invariant(v, rank) for v in ins)
        ):
            continue
        try:
            op = op_of(node)
        except UnsupportedOpError:
            continue
        if not op.elementwise or not op.foldable:
            continue
        out = node.outputs[0]
        shadow = Node(
            node.op_type,
            node.name,
            [None if v is None else _shadow(v, arrays) for v in node.inputs],
            [Value(out.name, (), out.dtype)],
            node.attrs,
            node.domain,
            node.opset,
        )
        run_infer(shadow, op)
        arrays[out.uid] = run_reference(shadow, [_arr(v, arrays) for v in node.inputs], op)[0]
        collected.append(node)
    inside = {id(n) for n in collected}
    values = {y.uid: y, **{n.outputs[0].uid: n.outputs[0] for n in collected}}
    frontier: list[Value] = []
    for uid, v in values.items():
        outside = [n for n in readers.get(uid, []) if id(n) not in inside]
        if any(_elementwise(n) for n in outside):
            return None
        if outside or uid in outputs:
            frontier.append(v)
    if not frontier:
        return None
    rows = table.shape
    return [
        (v, arrays[v.uid].reshape(rows), collected if i == 0 else [])
        for i, v in enumerate(frontier)
    ]


def _elementwise(node: Node) -> bool:
    try:
        return op_of(node).elementwise
    except UnsupportedOpError:
        return False


def _shadow(v: Value, arrays: dict[int, np.ndarray]) -> Value:
    """A stand-in for ``v`` while evaluating on the table: its table-shaped array, or
    the constant itself."""
    if v.uid in arrays:
        a = arrays[v.uid]
        return Value(v.name, a.shape, a.dtype)
    return v


def _arr(v: Value | None, arrays: dict[int, np.ndarray]) -> np.ndarray | None:
    if v is None:
        return None
    return arrays.get(v.uid, v.const)


class OneHotMatMulToGather(Pass):
    """Replace each one-hot MatMul by a Gather from the table, folding the elementwise
    nodes after it into the table (see the module doc)."""

    def call(self, graph: Graph) -> PassResult:
        producers, readers, outputs, names = graph_index(graph)
        replace: dict[int, list[Node]] = {}
        dropped: set[int] = set()
        for node in graph.nodes:
            if id(node) in dropped:
                continue
            match = match_onehot_matmul(node, producers, readers, outputs)
            if match is None or not ops_available(_NEEDED, node.opset):
                continue
            idx, w = match
            table = np.concatenate([w, np.zeros((1, w.shape[1]), w.dtype)])
            folded = fold_into_table(graph, node, table, readers, outputs)
            if folded is None:
                logger.info("one-hot MatMul %r kept: an elementwise node reads it", node.name)
                continue
            replace[id(node)] = _gather_nodes(node, idx, folded, names)
            for _, _, gone in folded:
                dropped.update(id(n) for n in gone)
        if not replace:
            return PassResult(graph, False)
        splice_nodes(graph, replace, dropped)
        logger.info(
            "rewrote %d one-hot MatMuls as Gathers (%d elementwise nodes folded into tables)",
            len(replace),
            len(dropped),
        )
        return PassResult(graph, True)


def _gather_nodes(
    mm: Node, idx: Value, folded: list[tuple[Value, np.ndarray, list[Node]]], names: set[str]
) -> list[Node]:
    """The nodes computing each frontier value with a Gather from its table."""
    k = folded[0][1].shape[0] - 1  # the last row is the out-of-range one
    b = NodeBuilder(mm.name, names, mm.opset, np.float32)
    add, const = b.add, b.const
    lead = mm.outputs[0].shape[:-1]
    flat = add("Reshape", [idx, const("idx_shape", shape_array(lead))])
    if np.iinfo(flat.dtype).max < k:  # the zero row's index does not fit (uint8, K = 256)
        flat = add("Cast", [flat], {"to": 7})  # 7: INT64
    low = add("Less", [flat, const("zero", np.zeros((), flat.dtype))])
    high = add("Greater", [flat, const("last", np.array(k - 1, flat.dtype))])
    bad = add("Or", [low, high])
    safe = add("Where", [bad, const("zero_row", np.array(k, flat.dtype)), flat])
    for value, table, _ in folded:
        add("Gather", [const("table", table), safe], {"axis": 0}, out=value)
    return b.nodes
