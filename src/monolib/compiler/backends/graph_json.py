"""The graph JSON of a compiled graph, shared by every backend's generator.

Turns the compiler's objects (the graph, its :class:`~..passes.fuse_elementwise.Fusion`
and :class:`~..passes.plan_memory.MemoryPlan`) into the entries of the one writer,
:mod:`monolib.abi.graph_spec` (docs/ARCHITECTURE.md, "The graph JSON"): the C and the
device generators call these, never each other's helpers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ...abi import graph_spec
from ...abi.sequences import SeqSpec, spec_entry
from ..ir import Graph, Value, is_static, nbytes_at_bounds
from ..passes.fuse_elementwise import FusedOp, Fusion
from ..passes.plan_memory import ALIGN, MemoryPlan, align

__all__ = ["graph_json_of", "io_json", "json_shape", "node_json"]

logger = logging.getLogger(__name__)


def json_shape(shape) -> list[int | str]:
    """A shape as the graph JSON writes it: ints, and each run-time dim as its display
    text (an input's: the symbol's name; elsewhere a dim expression, version 2)."""
    return [d if isinstance(d, int) else d.display() for d in shape]


def node_json(fused: FusedOp, plan: MemoryPlan) -> dict[str, Any]:
    """The ``nodes`` entry of fused op ``fused`` (:func:`~monolib.abi.graph_spec.node_entry`):
    its output 0's arena offset comes from ``plan``."""
    return graph_spec.node_entry(
        fused.name, fused.op_type, fused.fused_types, (v.name for v in fused.reads()),
        (v.name for v in fused.writes()), json_shape(fused.out.shape), fused.out.dtype,
        plan.offset(fused.out),
    )


def io_json(values: Sequence[Value], plan: MemoryPlan) -> list[dict[str, Any]]:
    """The ``inputs``/``outputs`` entries of ``values`` at their planned arena offsets
    (``max_nbytes``, the bytes at the upper bounds, for a shape with run-time dims)."""
    return [
        graph_spec.tensor_entry(
            v.name, json_shape(v.shape), v.dtype, plan.offset(v),
            None if is_static(v.shape) else nbytes_at_bounds(v),
            None if v.seq is None else spec_entry(
                SeqSpec(v.seq.kind, v.seq.elem_dtype, v.seq.layout, v.seq.shapes)),
        )
        for v in values
    ]


def graph_json_of(
    graph: Graph,
    fusion: Fusion,
    plan: MemoryPlan,
    nodes: list[dict[str, Any]],
    params: Any,
    blob: np.ndarray,
    constants: Mapping[str, Any] | None,
    *,
    arena_bytes: int,
    device: str | None = None,
    specializations: Sequence[Mapping[str, int]] = (),
) -> dict[str, Any]:
    """The graph JSON (:func:`~monolib.abi.graph_spec.graph_document`) of a generated
    library.

    Parameters
    ----------
    graph, fusion, plan
        The compiled graph, its fused ops and its memory plan.
    nodes : list of dict
        :func:`node_json` of each fused op that has code, in run order.
    params : ParamsBuilder
        The params table (``entries``) of the blob.
    blob : np.ndarray of uint8
        The params blob.
    constants : Mapping, optional
        Model constants recorded for the user.
    arena_bytes : int
        The arena the code needs (rounded up to 64 bytes here).
    device : str, optional
        The device kind (``"opencl"``, ``"cuda"``) when the kernels run on one.
    specializations : list of dict, optional
        The symbol values of each static path the library has (version 2).
    """
    return graph_spec.graph_document(
        graph.name,
        arena_bytes=align(arena_bytes, ALIGN),
        params_bytes=int(blob.nbytes),
        inputs=io_json(fusion.inputs, plan),
        outputs=io_json(fusion.outputs, plan),
        nodes=nodes,
        params=params.entries,
        aliases={f.out.name: f.src.name for f in fusion.ops if f.kind == "alias"},
        constants=constants,
        metadata=graph.metadata,
        device=device,
        **_dynamic_fields(fusion, plan, specializations),
    )


def _dynamic_fields(fusion: Fusion, plan: MemoryPlan, specializations) -> dict[str, Any]:
    """``symbols``, ``sym_offset``, ``shape_offset`` and ``specializations`` of a graph
    with run-time dims (version 2), else nothing."""
    if not len(fusion.symbols):
        return {}
    return {
        "symbols": fusion.symbols.as_json(),
        "sym_offset": plan.sym_offset,
        "shape_offset": plan.shape_offset,
        "specializations": [dict(v) for v in specializations],
    }
