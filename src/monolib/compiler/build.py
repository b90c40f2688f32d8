"""``compile``: an ONNX model -> a graph executor factory module (graph, params, code).

The pipeline of docs/ARCHITECTURE.md ("Compiler pipeline"):

1. :func:`~.pipeline.prepare`: ``frontend.onnx.import_model`` -> typed :class:`Graph`;
   graph passes (``passes.simplify``: constant folding, ``fold_batchnorm``, ``dce``),
   :func:`~.passes.fuse_elementwise.fuse_elementwise`,
   :func:`~.passes.plan_memory.plan_memory`;
2. the backend of the target's kind (:data:`~.backends.registry.BACKENDS`) generates the
   source, graph JSON and params blob, then packages them:
   ``GraphExecutorFactoryModule(graph_json, params, CSourceModule(source, target))``.

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
from typing import Any

import numpy as np

from ..errors import CompileError
from ..export.targets import Target
from .backends.registry import BACKENDS
from .ops.nn.conv_budget import DEFAULT_FRACTION, winograd_budget
from .pipeline import Progress, jsonable, prepare, step
from .tuning.select import restricting, selecting
from .tuning.tuner import DEFAULT_BUDGET_S, selection_for

__all__ = ["compile", "lower"]

logger = logging.getLogger(__name__)


def lower(
    model: Any,
    shapes: dict[str, tuple[Any, ...]] | None = None,
    constants: dict[str, Any] | None = None,
    progress: Progress = None,
    dims: dict[str, tuple[int, ...]] | None = None,
    opt_shapes: dict[str, list[tuple[int, ...]]] | None = None,
    max_trip_count: dict[str, int] | None = None,
    max_sizes: dict[str, int] | None = None,
    size_budget: float | None = DEFAULT_FRACTION,
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
    backend, target = BACKENDS["c"], Target("c")
    graph, fusion, plan = prepare(model, shapes, constants, progress, dims, opt_shapes,
                                  max_trip_count, max_sizes)
    step(progress, backend.step)
    with restricting(winograd_budget(graph, size_budget)):
        out = backend.generate(graph, fusion, plan, target, constants=jsonable(constants))
    return out.source, out.graph_json, out.params


def compile(
    model: Any,
    target: str = "c",
    shapes: dict[str, tuple[Any, ...]] | None = None,
    constants: dict[str, Any] | None = None,
    progress: Progress = None,
    dims: dict[str, tuple[int, ...]] | None = None,
    opt_shapes: dict[str, list[tuple[int, ...]]] | None = None,
    max_trip_count: dict[str, int] | None = None,
    max_sizes: dict[str, int] | None = None,
    tune: bool = False,
    tune_budget_s: float = DEFAULT_BUDGET_S,
    size_budget: float | None = DEFAULT_FRACTION,
):
    """Compile an ONNX model into a graph executor factory module.

    Parameters
    ----------
    model : str, os.PathLike, bytes or onnx.ModelProto
        The ONNX model (a file path, its serialized bytes, or the proto).
    target : str or Target
        Target string in TVM's form: ``"c"``, ``"c -mcpu=native"``,
        ``"c -mtriple=aarch64-linux-gnu"``, ``"opencl"``, ``"cuda -arch=sm_90"``.
    shapes : dict, optional
        Input name -> shape, for inputs with dynamic dims: per axis an int (static) or
        ``(lo, hi)`` / ``(lo, hi, step)`` (a run-time dim, inclusive bounds, values a
        multiple of ``step``), e.g. ``{"x": ((1, 8), 3, (32, 1280, 32), (32, 1280, 32))}``.
        A string input takes ``{"shape": <as above, optional>, "width": n}``: ``n``
        bytes of UTF-8 per element (``compiler/frontend/strings.py``).
    constants : dict, optional
        Input name -> value: inputs frozen to compile-time constants (e.g. a sample
        rate); recorded under ``"constants"`` in the graph JSON.
    progress : callable, optional
        ``progress(step_name)`` is called at the start of each step.
    dims : dict, optional
        ONNX ``dim_param`` -> ``(lo, hi[, step])``: binds every input dim the model names
        so (``{"batch": (1, 8)}``); dims sharing a name are equal at run time.
    opt_shapes : dict, optional
        Input name -> list of concrete shapes that get fully static, specialized code
        in the same library (``{"x": [(1, 3, 640, 640)]}``).
    max_trip_count : dict, optional
        ``Loop`` node name -> upper bound on its trip count, for a loop with scan
        outputs whose bound monolib cannot derive (``{"decode": 64}``); a run that
        needs more iterations stops with an ``ExecutionError`` naming the node.
    max_sizes : dict, optional
        Node name -> ``N``, for a node whose output sizes depend on run-time data with
        no bound monolib can derive (a ``Range``, ``Expand``, ``Tile``,
        ``ConstantOfShape`` or ``OneHot`` reading run-time values; a ``Loop``, as
        ``max_trip_count``): the product of the output's data-dependent dims is at
        most ``N`` (one such dim: its length), and memory is planned at that. A run
        that needs more stops with an ``ExecutionError`` naming the node.
    tune : bool
        Time the candidate algorithms of each distinct conv signature on this CPU
        first (``compiler/tuning``: one small benchmark library per signature, medians
        at 1 thread) and cache the fastest under ``~/.cache/monolib/tuning``
        (``MONOLIB_TUNING_DIR``). Every compile for the C target uses this CPU's cached
        choices, tuned or not; without any, the fixed rules choose.
    tune_budget_s : float
        Seconds of measuring at most (signatures left over keep the rule's choice).
    size_budget : float or None
        Extra bytes that re-laid-out Conv weights (Winograd's pre-transformed ones: up
        to 4x a 3x3 kernel) may add, as a fraction of the model's weight bytes, plus
        1 MB (``ops/nn/conv_budget.py``; default 0.15): the layers with the most time
        saved per extra byte get Winograd, tuned or not. None: no limit (fastest,
        largest).

    Returns
    -------
    GraphExecutorFactoryModule
        type_key ``"graph_executor_factory"``, importing a ``CSourceModule`` (type_key
        ``"c"``) that is compiled by ``export_library`` (or on first call).

    Raises
    ------
    TargetError
        A malformed target string, an unknown kind, or an option its backend refuses.
    CompileError
        Subclasses name the problem: ``UnsupportedOpError`` (an op or opset monolib
        lacks), ``ShapeError`` (a dynamic dim with no value, a malformed or
        contradicting bound), ``UndecidableDimError`` (an op that cannot take a
        run-time dim; the node, the op and the dim named), ...; a kind with no backend.

    Examples
    --------
    >>> lib = compile("det.onnx", shapes={"x": (1, 3, 640, 640)})  # doctest: +SKIP
    >>> lib.export_library("det.so")                                # doctest: +SKIP
    """
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    tgt = Target(target)
    backend = BACKENDS.get(tgt.kind)
    if backend is None:
        raise CompileError(
            f"target {target!r}: no backend for kind {tgt.kind!r} (known: {', '.join(BACKENDS)})"
        )
    backend.accept(tgt)
    graph, fusion, plan = prepare(model, shapes, constants, progress, dims, opt_shapes,
                                  max_trip_count, max_sizes)
    step(progress, backend.step)

    def generate() -> Any:
        return backend.generate(graph, fusion, plan, tgt, constants=jsonable(constants))

    with restricting(winograd_budget(graph, size_budget)), \
            selecting(selection_for(generate, tgt.kind, tune, tune_budget_s)):
        generated = generate()
    step(progress, "package")
    try:
        return backend.package(generated, tgt)
    except ImportError as e:  # the runtime/export parts are missing from this install
        raise CompileError(f"monolib runtime modules are not available: {e}") from e
