"""The target-independent steps of ``compile``: import, simplify, fuse, plan memory.

Every backend (``compiler/backends``) starts from what :func:`prepare` returns; the
steps are announced to the caller's ``progress`` by :func:`step`, so the command line
shows where a long compile is.

A graph with run-time dims and ``opt_shapes`` also gets one fully static
:class:`Specialized` graph per specialization (``Graph.specialized``): the model
imported again at that exact shape, as a static compile would, for a backend that
puts both paths in one library.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .ir import Graph
from .symbolic import evaluate

__all__ = ["Progress", "Specialized", "jsonable", "prepare", "step"]

logger = logging.getLogger(__name__)

#: ``progress(step_name)``, called at the start of each step (or ``None``)
Progress = Callable[[str], Any] | None


def step(progress: Progress, name: str) -> None:
    """Announce step ``name`` (log, and ``progress(name)`` when given)."""
    logger.debug("step: %s", name)
    if progress is not None:
        progress(name)


@dataclass
class Specialized:
    """One ``opt_shapes`` entry compiled statically: the symbol values it stands for and
    its own graph, fusion and memory plan (``Graph.specialized`` of the generic graph)."""

    values: dict[str, int]
    graph: Graph
    fusion: Any
    plan: Any


def prepare(
    model: Any,
    shapes=None,
    constants=None,
    progress: Progress = None,
    dims=None,
    opt_shapes=None,
    max_trip_count=None,
    max_sizes=None,
):
    """Import (unless ``model`` is already a :class:`~.ir.Graph`), simplify, fuse
    elementwise chains, plan the arena; each step announced to ``progress``.

    Parameters
    ----------
    model : str, bytes, onnx.ModelProto or Graph
    shapes : dict, optional
        Input name -> shape (ints; ``(lo, hi[, step])`` for a run-time dim).
    constants : dict, optional
        Input name -> value frozen at compile time.
    progress : callable, optional
    dims : dict, optional
        ONNX ``dim_param`` -> ``(lo, hi[, step])``.
    opt_shapes : dict, optional
        Input name -> shapes to specialize.
    max_trip_count : dict, optional
        ``Loop`` node name -> bound on its trip count (``ops/control/loop.py``).
    max_sizes : dict, optional
        Node name -> bound on its data-dependent output sizes (``import_model``).

    Returns
    -------
    (Graph, Fusion, MemoryPlan)
        For a backend's ``generate``.

    Raises
    ------
    CompileError
        From the frontend and passes (``UnsupportedOpError``, ``ShapeError``...).
    """
    from .frontend.onnx import import_model
    from .passes import simplify
    from .passes.computed_symbols import register_computed
    from .passes.fuse_elementwise import fuse_elementwise
    from .passes.plan_memory import plan_memory

    step(progress, "import")
    if isinstance(model, Graph):
        graph = model
    else:
        graph = import_model(model, shapes, constants, dims, opt_shapes, max_trip_count,
                             max_sizes, progress=progress)
    step(progress, "optimize")
    graph = register_computed(simplify(graph).graph)
    step(progress, "fuse")
    fusion = fuse_elementwise(graph)
    step(progress, "plan memory")
    plan = plan_memory(fusion)
    if graph.specializations and not isinstance(model, Graph):
        step(progress, "specialize")
        for values in graph.specializations:
            static = {v.name: tuple(evaluate(d, values) for d in v.shape) for v in graph.inputs}
            static.update({v.name: {"shape": static[v.name], "width": v.dtype.itemsize}
                           for v in graph.inputs if v.dtype.kind == "S"})  # string widths
            g = simplify(import_model(model, static, constants,
                                      max_trip_count=max_trip_count,
                                      max_sizes=max_sizes)).graph
            if not _computed_match(graph, register_computed(g)):
                logger.warning("opt_shapes %s ignored: its data-dependent dims do not match "
                               "the generic graph's", values)
                continue
            f = fuse_elementwise(g)
            graph.specialized.append(Specialized(dict(values), g, f, plan_memory(f)))
            logger.info("specialized for %s: %d fused ops", values, len(f.ops))
    return graph, fusion, plan


def _computed_match(generic: Graph, spec: Graph) -> bool:
    """Whether every computed dim of a specialization (issue 13) is the same size (node,
    output, axis) as one of the generic graph's: ``monolib_run`` copies its value there
    after the static path (``backends/c/specialize.computed_copies``)."""
    from .computed_bounds import origin

    mine = {origin(s.name) for s in generic.symbols if s.computed}
    return all(origin(s.name) in mine - {None} for s in spec.symbols if s.computed)


def jsonable(constants: dict[str, Any] | None) -> dict[str, Any]:
    """``constants`` with NumPy arrays and scalars as JSON values (lists, numbers), as
    the graph JSON records them."""
    out = {}
    for k, v in (constants or {}).items():
        out[k] = (
            v.tolist()
            if isinstance(v, np.ndarray)
            else (v.item() if isinstance(v, np.generic) else v)
        )
    return out
