"""``SequenceMap`` (ONNX operator spec, opset 17) unrolled at import: its body imported
once per element, each copy reading ``SequenceAt(seq, i)`` (a constant ``i``, so every
element keeps its own static shape) for the sequence inputs and the tensor inputs as
they are; each body output gathered by a ``SequenceConstruct``. The body's ops then
compile like any other (fused, planned, native C). That needs the element count at
compile time (``SeqType.count``); a sequence whose count is known only at run time
takes ONNX's function body instead (a ``Loop`` of ``SequenceAt``/``SequenceInsert``,
``function_bodies.py``), its trip count bounded by the sequence's capacity.
"""

from __future__ import annotations

import logging

import numpy as np

from ...errors import CompileError
from ..ir import Node
from ..ops.base import lookup
from ..passes.node_eval import make_const, run_infer
from .function_bodies import function_body

__all__ = ["unroll_sequence_map"]

logger = logging.getLogger(__name__)


def _count(name: str, inputs) -> int | None:
    seqs = [v for v in inputs if v is not None and v.seq is not None]
    if not seqs or inputs[0].seq is None or inputs[0].seq.kind != "sequence":
        raise CompileError(f"node {name!r} (SequenceMap): input 0 must be a sequence")
    counts = {v.seq.count for v in seqs}
    if None in counts:
        return None
    if len(counts) > 1:
        raise CompileError(f"node {name!r} (SequenceMap): input sequences of lengths "
                           f"{sorted(counts)}; they must be equal")
    return counts.pop()


def unroll_sequence_map(imp, p, name: str, inputs, opset: int, scope, scope_cls) -> None:
    """Import SequenceMap node ``p`` unrolled (see the module docstring) into ``imp``
    (the frontend's ``_Importer``), binding its outputs in ``scope``.

    Raises
    ------
    CompileError
        Input 0 not a sequence, sequences of different known lengths, a body whose
        input/output counts do not match the node's.
    """
    body = next((a.g for a in p.attribute if a.name == "body"), None)
    if body is None or len(body.input) != len(inputs) or len(body.output) != len(p.output):
        raise CompileError(f"node {name!r} (SequenceMap): its body does not match its "
                           "inputs and outputs")
    count = _count(name, inputs)
    if count is None:  # known at run time: ONNX's function body, a Loop
        nodes = function_body(p, "", opset, inputs, f"{name}/")
        bound = min(v.seq.capacity for v in inputs if v is not None and v.seq is not None)
        for q in nodes:
            if q.op_type == "Loop":
                imp.max_trips.setdefault(q.name, bound)
        for q in nodes:
            imp._import_node(q, scope)
        logger.debug("SequenceMap %r: a Loop over at most %d elements", name, bound)
        return
    at_op, construct = lookup("SequenceAt", 11, "", name), lookup("SequenceConstruct", 11, "",
                                                                    name)
    gathered: list[list] = [[] for _ in body.output]
    for i in range(count):
        sub = scope_cls(scope)
        imp._add_initializers(body, sub)
        index = make_const(imp._unique(f"{name}/i{i}", imp.value_names), np.array(i, np.int64))
        for info, v in zip(body.input, inputs):
            if v.seq is None:
                sub.values[info.name] = v
                continue
            out = imp._new_value(f"{name}/{info.name}_{i}")
            node = Node("SequenceAt", imp._node_name(f"{name}/at{i}"), [v, index], [out], {},
                        "", opset)
            run_infer(node, at_op)
            imp.nodes.append(node)
            sub.values[info.name] = out
        imp._import_nodes(body.node, sub)
        for j, o in enumerate(body.output):
            gathered[j].append(imp._lookup(o.name, sub, f"node {name!r} (SequenceMap) body"))
    for j, o in enumerate(p.output):
        out = imp._new_value(o or f"{name}/unused{j}")
        node = Node("SequenceConstruct", imp._node_name(f"{name}/out{j}"), gathered[j], [out],
                    {}, "", opset)
        run_infer(node, construct)
        imp.nodes.append(node)
        if o:
            scope.values[o] = out
    logger.debug("SequenceMap %r unrolled over %d elements", name, count)
