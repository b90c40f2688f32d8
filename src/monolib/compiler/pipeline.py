"""The target-independent steps of ``compile``: import, simplify, fuse, plan memory.

Every backend (``compiler/backends``) starts from what :func:`prepare` returns; the
steps are announced to the caller's ``progress`` by :func:`step`, so the command line
shows where a long compile is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numpy as np

from .ir import Graph

__all__ = ["Progress", "jsonable", "prepare", "step"]

logger = logging.getLogger(__name__)

#: ``progress(step_name)``, called at the start of each step (or ``None``)
Progress = Callable[[str], Any] | None


def step(progress: Progress, name: str) -> None:
    """Announce step ``name`` (log, and ``progress(name)`` when given)."""
    logger.debug("step: %s", name)
    if progress is not None:
        progress(name)


def prepare(
    model: Any,
    shapes=None,
    constants=None,
    progress: Progress = None,
    dims=None,
    opt_shapes=None,
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
    from .passes.fuse_elementwise import fuse_elementwise
    from .passes.plan_memory import plan_memory

    step(progress, "import")
    if isinstance(model, Graph):
        graph = model
    else:
        graph = import_model(model, shapes, constants, dims, opt_shapes)
    step(progress, "optimize")
    graph = simplify(graph).graph
    step(progress, "fuse")
    fusion = fuse_elementwise(graph)
    step(progress, "plan memory")
    return graph, fusion, plan_memory(fusion)


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
