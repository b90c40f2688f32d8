"""``compile``: an ONNX model -> a graph executor factory module (graph, params, C).

The pipeline of docs/ARCHITECTURE.md ("Compiler pipeline"):

1. ``frontend.onnx.import_model(model, shapes, constants)`` -> typed :class:`Graph`;
2. graph passes (``passes.simplify``: constant folding, ``fold_batchnorm``, ``dce``), then
   :func:`~.passes.fuse_elementwise.fuse_elementwise` and
   :func:`~.passes.plan_memory.plan_memory`;
3. :func:`~.codegen.c.generate` -> C source, graph JSON, params blob;
4. ``GraphExecutorFactoryModule(graph_json, params, CSourceModule(source, target))``.

Example
-------
>>> import monolib
>>> lib = monolib.compile("model.onnx", shapes={"x": (1, 3, 224, 224)})  # doctest: +SKIP
>>> lib.export_library("model.so")                                        # doctest: +SKIP
>>> gm = monolib.GraphModule(monolib.load_module("model.so")["default"](monolib.cpu()))  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import CompileError
from .ir import Graph

__all__ = ["compile", "lower"]

logger = logging.getLogger(__name__)

Progress = Callable[[str], Any] | None


def _step(progress: Progress, name: str) -> None:
    logger.debug("step: %s", name)
    if progress is not None:
        progress(name)


def _import(model, shapes, constants) -> Graph:
    from .frontend.onnx import import_model

    return import_model(model, shapes, constants)


def prepare(model: Any, shapes=None, constants=None, progress=None):
    """The target-independent steps: import (unless ``model`` is already a
    :class:`~.ir.Graph`), simplify, fuse elementwise chains, plan the arena; each step
    announced to ``progress``. Returns ``(graph, fusion, plan)`` for a code generator
    (the C one here, the device one in ``backends/device``)."""
    from .passes import simplify
    from .passes.fuse_elementwise import fuse_elementwise
    from .passes.plan_memory import plan_memory

    _step(progress, "import")
    graph = model if isinstance(model, Graph) else _import(model, shapes, constants)
    _step(progress, "optimize")
    graph = simplify(graph).graph
    _step(progress, "fuse")
    fusion = fuse_elementwise(graph)
    _step(progress, "plan memory")
    return graph, fusion, plan_memory(fusion)


def lower(
    model: Any,
    shapes: dict[str, tuple[int, ...]] | None = None,
    constants: dict[str, Any] | None = None,
    progress: Progress = None,
) -> tuple[str, dict[str, Any], np.ndarray]:
    """Compile ``model`` down to C source, graph JSON and params blob (no runtime).

    Parameters and errors are those of :func:`compile`; the model may also be a
    :class:`~.ir.Graph` already imported.

    Returns
    -------
    source : str
    graph_json : dict
    params : numpy.ndarray of uint8
    """
    from .backends.c.generate import generate, scratch_sizes
    from .passes.plan_memory import plan_memory

    graph, fusion, plan = prepare(model, shapes, constants, progress)
    scratch = scratch_sizes(fusion, plan)  # a first emission measures per-op scratch
    if scratch:
        plan = plan_memory(fusion, scratch)
    _step(progress, "generate C")
    return generate(graph, fusion, plan, constants=_jsonable(constants))


def _jsonable(constants: dict[str, Any] | None) -> dict[str, Any]:
    out = {}
    for k, v in (constants or {}).items():
        out[k] = (
            v.tolist()
            if isinstance(v, np.ndarray)
            else (v.item() if isinstance(v, np.generic) else v)
        )
    return out


def compile(
    model: Any,
    target: str = "c",
    shapes: dict[str, tuple[int, ...]] | None = None,
    constants: dict[str, Any] | None = None,
    progress: Progress = None,
):
    """Compile an ONNX model into a graph executor factory module.

    Parameters
    ----------
    model : str, os.PathLike, bytes or onnx.ModelProto
        The ONNX model (a file path, its serialized bytes, or the proto).
    target : str
        Target string in TVM's form: ``"c"``, ``"c -mcpu=native"``,
        ``"c -mtriple=aarch64-linux-gnu"``.
    shapes : dict, optional
        Input name -> static shape, for inputs with dynamic dims.
    constants : dict, optional
        Input name -> value: inputs frozen to compile-time constants (e.g. a sample
        rate); recorded under ``"constants"`` in the graph JSON.
    progress : callable, optional
        ``progress(step_name)`` is called at the start of each step.

    Returns
    -------
    GraphExecutorFactoryModule
        type_key ``"graph_executor_factory"``, importing a ``CSourceModule`` (type_key
        ``"c"``) that is compiled by ``export_library`` (or on first call).

    Raises
    ------
    CompileError
        Subclasses name the problem: ``UnsupportedOpError`` (an op or opset monolib
        lacks), ``ShapeError`` (a dynamic dim with no value), ...

    Examples
    --------
    >>> lib = compile("det.onnx", shapes={"x": (1, 3, 640, 640)})  # doctest: +SKIP
    >>> lib.export_library("det.so")                                # doctest: +SKIP
    """
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    from .backends.device import compile_device, is_device_target

    if is_device_target(target):  # "opencl", "cuda -arch=sm_80": docs/devices.md
        return compile_device(model, target, shapes, constants, progress)
    source, graph_json, params = lower(model, shapes, constants, progress)
    _step(progress, "package")
    try:
        from ..export.csource import CSourceModule
        from ..runtime.graph_executor import GraphExecutorFactoryModule
    except ImportError as e:  # the runtime/export parts are missing from this install
        raise CompileError(f"monolib runtime modules are not available: {e}") from e
    return GraphExecutorFactoryModule(graph_json, params, CSourceModule(source, target))
