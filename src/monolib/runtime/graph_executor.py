"""The graph executor: runs a compiled graph with ONE native call, and ``create``.

Follows TVM's graph executor (``tvm.contrib.graph_executor``): the factory module
(type key ``"graph_executor_factory"``) holds the graph JSON and the params blob and
imports the library; ``factory["default"](dev)`` makes an executor; ``GraphModule``
wraps it with ``set_input`` / ``run`` / ``get_output``. Unlike TVM's interpreter, a
whole run is ONE native call, ``monolib_run(params, arena)``, into the generated C
(see "The generated C library" in ``docs/ARCHITECTURE.md``). The factory is in
:mod:`.factory`, the arena in :mod:`.arena`, the thread count in :mod:`.threads`,
``GraphModule`` in :mod:`.graph_module`.

Weights: the params blob holds the tensors of the graph JSON ``params`` table (small
constants are baked into the C). ``factory.remove_params()`` gives a factory without
them (exported without a params section); an executor then takes them with
``load_params`` (safetensors, :mod:`.params`) or ``set_input(name=array)``, or shares
another executor's with ``share_params``. ``save_graph_json`` + :func:`create` is the
separate-artifact path. Each executor owns its arena and ctypes releases the GIL
during ``monolib_run``, so executors of one factory run in parallel threads.
Per-op profiles and outputs: :mod:`.debug_executor`.

Run-time shapes (graph JSON version 2): an input takes any shape within its
symbols' bounds; before each run the symbol values are written to the arena, after
it the outputs' actual shapes are read back (:mod:`.shapes`), so ``output_view``
has this run's shape. A static graph takes none of these steps.
"""

from __future__ import annotations

import ctypes
import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..abi.graph_spec import TensorInfo, graph_layout, tensor_info
from ..abi.names import RUN, RUN_OP, RUN_TIMED, RUN_TIMED_NONE
from ..errors import (ContainerError, ExecutionError, FunctionNotFoundError, InputError,
                      ParamsInputError)
from . import threads
from .arena import arena_empty
from .device import Device, cpu
from .factory import GraphExecutorFactoryModule, register_executor
from .graph_module import GraphModule
from .module import Module
from .params import params_blob
from .params import load_params as read_params
from .shapes import RunShapes, start_shape
from .threads import close_executor, register_library

__all__ = ["GraphExecutor", "create"]

logger = logging.getLogger(__name__)


class GraphExecutor:
    """Runs a compiled graph: owns a 64-byte aligned arena, calls ``monolib_run``.

    Parameters
    ----------
    factory : GraphExecutorFactoryModule
    device : Device
        Only the host CPU is supported by the C library.

    Raises
    ------
    FunctionNotFoundError
        The library exports no ``monolib_run``.
    """

    def __init__(self, factory: GraphExecutorFactoryModule, device: Device) -> None:
        if device.device_type != "cpu":
            raise InputError(f"the C library runs on cpu, not {device}")
        self.factory, self.device = factory, device
        graph = factory.head  # the full graph JSON stays unparsed until needed
        self.arena_bytes = int(graph["arena_bytes"])
        try:
            self.arena = arena_empty(self.arena_bytes)
        except (MemoryError, OSError):  # a damaged or hostile graph JSON, or a model too big here
            raise ContainerError(
                f"graph JSON asks for a {self.arena_bytes}-byte arena, which cannot be "
                "allocated on this machine"
            ) from None
        layout = graph_layout(graph)
        symbols = None if layout is None else layout.by_name
        self.inputs = [
            tensor_info(r, "input", self.arena_bytes, "arena", symbols) for r in graph["inputs"]
        ]
        self.outputs = [
            tensor_info(r, "output", self.arena_bytes, "arena", symbols) for r in graph["outputs"]
        ]
        #: run-time shapes (None for a static graph: nothing to do per run)
        self.shapes = None
        if layout is not None:
            self.shapes = RunShapes(layout, self.inputs, self.outputs, self.arena)
            # run() of a static graph stays one check and one native call: this one
            # runs the shaped path instead
            self.run = self._run_shaped
        self._in_views = [self._view(t, self._start(t, symbols)) for t in self.inputs]
        # a run-time dim of an output is 0 until a run writes its size
        self._out_views = [
            self._view(t, tuple(d if type(d) is int else 0 for d in t.shape)) for t in self.outputs
        ]
        self._run = self._c_function(RUN, [ctypes.c_void_p, ctypes.c_void_p])
        #: arena offset of the int32 "run-once ops done" flag (None: the graph has none)
        self._init_at = self._init_offset(graph)
        # closed when the library is; its pool handed the cores before each run
        self._pool = register_library(factory.lib, self)
        # Shared and read-only; load_params gives this executor a private copy. A
        # factory without weights leaves every param missing until it is given.
        self._use_params(factory.params, set() if factory.has_params else set(self.param_infos))

    @property
    def param_infos(self) -> dict[str, TensorInfo]:
        """``{name: TensorInfo}`` of the params table (the factory's, shared: do not
        modify it); read on first use."""
        return self.factory.param_infos()

    def _init_offset(self, graph: Mapping) -> int | None:
        off = graph.get("init_offset")
        if off is None:
            return None
        if type(off) is not int or not 0 <= off <= self.arena_bytes - 4 or off % 4:
            raise ContainerError(
                f"graph JSON: init_offset {off!r:.100} is not a 4-aligned offset inside "
                f"the {self.arena_bytes}-byte arena"
            )
        return off

    def _use_params(self, blob: np.ndarray | None, missing: set[str]) -> None:
        self.params, self._missing = blob, missing
        self._args = None if blob is None else (blob.ctypes.data, self.arena.ctypes.data)
        # run-once ops (graph JSON nodes with "init") read constants, some of which may
        # be params: new params make the next run compute them again
        self._set_initialized(False)

    @property
    def initialized(self) -> bool:
        """Whether the run-once ops (graph JSON ``nodes[i]["init"]``: constant
        subgraphs too big to fold) have run on this executor's params, so that
        ``monolib_run`` skips them; False before the first run and after
        ``load_params``/``share_params``. Always True for a graph without them."""
        off = getattr(self, "_init_at", None)  # device executors: no run-once ops
        return off is None or bool(self.arena[off : off + 4].view(np.int32)[0])

    def _set_initialized(self, done: bool) -> None:
        off = getattr(self, "_init_at", None)
        if off is not None:
            self.arena[off : off + 4].view(np.int32)[0] = int(done)

    def init_ops(self) -> list[int]:
        """Indices of the run-once fused ops (graph JSON nodes marked ``"init"``)."""
        if getattr(self, "_init_at", None) is None:
            return []
        return [i for i, n in enumerate(self.factory.graph_json.get("nodes", [])) if n.get("init")]

    @property
    def missing_params(self) -> list[str]:
        """Names of the params not given yet (a factory without weights), sorted."""
        return sorted(self._missing)

    def load_params(self, params: Any) -> None:
        """Run this executor with other weights (TVM's ``load_params``); the factory
        and other executors keep theirs.

        Only the tensors of the graph JSON ``params`` table live in the params blob
        and are replaced; small constants are baked into the generated C.

        Parameters
        ----------
        params : mapping of str -> array, or a safetensors file path / bytes
            New values of some or all of the graph's params (names, shapes and dtypes
            as in ``graph_json["params"]``, see :func:`monolib.save_params`); the
            others keep their current values (or stay missing for a factory without
            weights).

        Raises
        ------
        ParamsInputError
            (an InputError) Unknown name, wrong shape or dtype;
            the message names the param and what the graph expects.
        ParamsError
            A malformed safetensors file or buffer.
        """
        tensors = params if isinstance(params, Mapping) else read_params(params)
        tensors = {name: self._checked_param(name, value) for name, value in tensors.items()}
        blob = params_blob(self.factory.graph_json, tensors, base=self.params)
        self._use_params(blob, self._missing - set(tensors))

    def _checked_param(self, name: Any, value: Any) -> np.ndarray:
        info = self.param_infos.get(name) if isinstance(name, str) else None
        if info is None:
            known = ", ".join(list(self.param_infos)[:8]) or "none"
            raise ParamsInputError(
                f"unknown param {name!r} for graph {self.factory.graph_json.get('name', '')!r} "
                f"(its params: {known}{', ...' if len(self.param_infos) > 8 else ''})"
            )
        arr = np.asarray(value)
        if arr.shape != info.shape or arr.dtype != info.dtype:
            raise ParamsInputError(
                f"param {name!r}: got {arr.dtype}{list(arr.shape)}, the graph "
                f"expects {info.dtype}{list(info.shape)}"
            )
        return arr

    def share_params(self, other: GraphExecutor) -> None:
        """Run with ``other``'s params blob, no copy (TVM's ``share_params``): e.g.
        weights loaded once into one executor, used by several (one per thread).

        Later ``load_params`` calls on either give that one a private blob again.

        Raises
        ------
        InputError
            ``other`` is not a GraphExecutor of a graph with the same params table.
        """
        other = getattr(other, "executor", other)  # a GraphModule too
        if not isinstance(other, GraphExecutor):
            raise InputError(f"share_params expects a GraphExecutor, got {type(other).__name__}")
        if other.param_infos != self.param_infos:
            raise InputError(
                f"share_params: graph {other.factory.graph_json.get('name', '')!r} has "
                f"another params table than {self.factory.graph_json.get('name', '')!r}"
            )
        self._use_params(other.params, set(other._missing))

    def _check_ready(self) -> None:
        if self._missing or self._args is None:
            missing = self.missing_params
            shown = ", ".join(repr(n) for n in missing[:5]) + (", ..." if len(missing) > 5 else "")
            raise InputError(
                f"graph {self.factory.head.get('name', '')!r} has no weights for "
                f"{len(missing)} params ({shown}): give them with load_params or set_input"
            )

    @staticmethod
    def _start(info: TensorInfo, symbols: dict | None) -> tuple[int, ...]:
        return info.shape if symbols is None else start_shape(info, symbols)

    def _view(self, info: TensorInfo, shape: tuple[int, ...]) -> np.ndarray:
        """``info``'s data in the arena as an array of ``shape`` (contiguous from its
        offset: a run-time shape fills only the start of the slot)."""
        end = info.offset + math.prod(shape) * info.dtype.itemsize
        return self.arena[info.offset : end].view(info.dtype).reshape(shape)

    def set_input_shape(self, i: int, shape: tuple[int, ...]) -> None:
        """Give input ``i`` (of a graph with run-time dims) the shape ``shape``,
        already checked with ``shapes.check_input``: ``input_view(i)`` then has it."""
        self.shapes.set_input(i, shape)
        self._in_views[i] = self._view(self.inputs[i], shape)

    def _read_shapes(self) -> None:
        """After a run of a graph with run-time dims: each output's view at the
        shape the library wrote."""
        for i, info in enumerate(self.outputs):
            shape = self.shapes.output_shape(i)
            if shape != self._out_views[i].shape:
                self._out_views[i] = self._view(info, shape)

    def _c_function(self, name: str, argtypes: list) -> Callable:
        fn = self.factory.lib.get_function(name, query_imports=True)
        fn.restype, fn.argtypes = ctypes.c_int32, argtypes
        return fn

    def run(self) -> None:
        """Run the whole graph once (one native call).

        A graph with run-time dims runs :meth:`_run_shaped` instead (set per
        executor in ``__init__``).

        Raises
        ------
        InputError
            Params are missing (a factory without weights, no ``load_params`` yet), or
            (run-time dims) two inputs give a shared dim two values.
        ExecutionError
            ``monolib_run`` returned nonzero, or wrote an output shape that does not
            fit its slot.
        """
        self._check_ready()
        if threads._last() is not self._pool:
            threads.switch_to(self._pool)
        ret = self._run(*self._args)
        if ret != 0:
            raise ExecutionError(self._failure(ret))

    def _failure(self, ret: int) -> str:
        """The message of a failed ``monolib_run``: ``1000 + i`` is fused op ``i``
        stopping the run (a ``Loop`` past its planned trip-count bound, a size past
        its ``max_sizes`` bound, issue 13)."""
        graph = self.factory.head.get("name", "")
        nodes = self.factory.graph_json.get("nodes", []) if ret >= 1000 else []
        if 0 <= ret - 1000 < len(nodes):
            node = nodes[ret - 1000]
            return (f"node {node.get('name')!r} ({node.get('op')}) of graph {graph!r} stopped "
                    "the run: it went past what was planned at compile time (a Loop with "
                    "more iterations than its bound, or a data-dependent size past its "
                    "bound: compile with a larger max_trip_count / max_sizes; a loop-carried "
                    "value whose shape changed; a bad run-time shape or position)")
        return f"monolib_run returned {ret} (graph {graph!r})"

    def _run_shaped(self) -> None:
        """:meth:`run` of a graph with run-time dims (this executor's ``run``): the
        symbols into the arena, the outputs' shapes out."""
        self._check_ready()
        self.shapes.bind()
        if threads._last() is not self._pool:
            threads.switch_to(self._pool)
        ret = self._run(*self._args)
        if ret != 0:
            raise ExecutionError(self._failure(ret))
        self._read_shapes()

    def num_ops(self) -> int:
        """Number of fused ops (``len(graph["nodes"])``)."""
        return len(self.factory.graph_json.get("nodes", []))

    def run_op(self, i: int) -> None:
        """Run fused op ``i`` only (``monolib_run_op``), for profiling.

        Raises
        ------
        InputError
            ``i`` is out of range.
        ExecutionError
            The op returned nonzero.
        """
        if not 0 <= i < self.num_ops():
            raise InputError(f"op index {i} out of range [0, {self.num_ops()})")
        self._check_ready()
        if self.shapes is not None:
            self.shapes.bind()
        if not hasattr(self, "_run_op"):
            self._run_op = self._c_function(
                RUN_OP, [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p]
            )
        ret = self._run_op(i, *self._args)
        if ret != 0:
            raise ExecutionError(f"monolib_run_op({i}) returned {ret}")

    def profile(self, repeat: int = 5, in_run: bool = False) -> list[dict[str, Any]]:
        """Time every fused op: best of ``repeat`` runs of it alone (``monolib_run_op``),
        or with ``in_run`` the median over ``repeat`` whole runs (``monolib_run_timed``).

        Alone, ops run in order on the current inputs, so each sees the data it would
        see in a whole run, but each is timed at its best, its weights and buffers left
        in the caches by its own earlier runs. Inside whole runs each op finds the
        caches as the ops before it left them (in a model whose weights and
        activations outgrow the cache, an op's weights and output region come from
        DRAM): the time it takes in production. Run-once ops (:meth:`init_ops`) run as
        ``monolib_run`` runs them: once, and only if this executor has not run them
        yet; their ``time_ms`` is 0 (a run does not spend it) and ``init_ms`` their one
        time (None when they had already run; with ``in_run`` always None).

        Returns
        -------
        list of dict
            Per op, in run order: ``index``, ``name``, ``op``, ``fused`` (ONNX ops
            fused into it), ``shape``, ``time_ms`` (milliseconds), and for a run-once
            op ``init: True`` and ``init_ms``.

        Raises
        ------
        ExecutionError
            ``in_run`` with a library that cannot time its ops (built before
            ``monolib_run_timed`` existed, or whose run dispatches to specialized
            variants: ``opt_shapes``), or a run that failed.
        """
        if in_run:
            return self._rows(self._profile_in_run(repeat), {})
        best = [float("inf")] * self.num_ops()
        once = set(self.init_ops())
        first: dict[int, float] = {}
        for _ in range(max(1, repeat)):
            for i in range(len(best)):
                if i in once:
                    if not self.initialized:
                        t = time.perf_counter()
                        self.run_op(i)
                        first[i] = time.perf_counter() - t
                    best[i] = 0.0
                    continue
                t = time.perf_counter()
                self.run_op(i)
                best[i] = min(best[i], time.perf_counter() - t)
            self._set_initialized(True)
        return self._rows(best, first)

    def _profile_in_run(self, repeat: int) -> list[float]:
        """Per op, its median time in seconds over ``repeat`` runs (``monolib_run_timed``)
        after one run that is not counted."""
        try:
            timed = self._c_function(RUN_TIMED, [ctypes.c_void_p, ctypes.c_void_p,
                                                 ctypes.c_void_p])
        except FunctionNotFoundError:
            timed = None
        n = self.num_ops()
        ns = np.zeros((max(1, repeat), max(1, n)), np.int64)
        for r in range(-1, max(1, repeat)):
            self._check_ready()
            if self.shapes is not None:
                self.shapes.bind()
            ret = RUN_TIMED_NONE if timed is None else timed(
                *self._args, ns[max(r, 0)].ctypes.data)
            if ret == RUN_TIMED_NONE:
                raise ExecutionError(
                    f"this library cannot time its ops inside runs ({RUN_TIMED}: built "
                    "before it existed, or its run dispatches to specialized variants); "
                    "profile(in_run=False) times them one at a time")
            if ret != 0:
                raise ExecutionError(self._failure(ret))
            if self.shapes is not None:
                self._read_shapes()
            self._set_initialized(True)
        return [float(v) * 1e-9 for v in np.median(ns, axis=0)[:n]]

    def _rows(self, times: list[float], first: dict[int, float]) -> list[dict[str, Any]]:
        """:meth:`profile`'s rows from per-op times (s) and run-once ops' first times."""
        once = set(self.init_ops())
        best = [0.0 if i in once else t for i, t in enumerate(times)]
        nodes = self.factory.graph_json.get("nodes", [])
        rows = [
            {
                "index": i,
                "name": n.get("name", ""),
                "op": n.get("op", ""),
                "fused": list(n.get("fused", [])),
                "shape": n.get("shape"),
                "time_ms": best[i] * 1e3,
            }
            for i, n in enumerate(nodes)
        ]
        for i in once:
            rows[i]["init"] = True
            rows[i]["init_ms"] = first[i] * 1e3 if i in first else None
        return rows

    #: True once :meth:`close` (or ``Module.close`` of its library) ran
    closed = False

    def close(self) -> None:
        """Drop the arena and the params; every later call raises
        :class:`~monolib.errors.ModuleClosedError`. ``Module.close`` of the library
        closes its executors. Idempotent."""
        close_executor(self)

    def input_view(self, i: int) -> np.ndarray:
        """The writable arena view of input ``i``."""
        return self._in_views[i]

    def output_view(self, i: int) -> np.ndarray:
        """The arena view of output ``i`` (overwritten by the next run)."""
        return self._out_views[i]


register_executor("cpu", GraphExecutor)


def create(
    graph_json: Any, lib: Module, device: Device | None = None, params: Any = None
) -> GraphModule:
    """The separate-artifact path (TVM's ``graph_executor.create``): a GraphModule
    from a graph JSON, a library module and, optionally, params.

    Parameters
    ----------
    graph_json : str, bytes or dict
        The graph JSON (e.g. the text written by ``factory.save_graph_json``).
    lib : Module
        The module holding ``monolib_run``: a loaded library (``load_module`` of a
        library exported from ``factory.lib`` or ``factory.remove_params()``) or a
        CSourceModule.
    device : Device, optional
        Default ``cpu()``.
    params : optional
        A params blob (1-D uint8 ndarray, laid out as the graph's ``params`` table),
        or what :meth:`GraphModule.load_params` takes (``{name: array}``, a
        safetensors path or bytes). None: call ``load_params`` before ``run``.

    Raises
    ------
    ContainerError
        A malformed graph JSON.
    InputError
        Wrong params (see :meth:`GraphExecutor.load_params`).
    """
    if lib is not None and not lib.exports_to_library:
        lib = next((m for m in lib.imported_modules if m.exports_to_library), lib)
    blob = params if isinstance(params, np.ndarray) and params.dtype == np.uint8 else None
    factory = GraphExecutorFactoryModule(graph_json, blob, None)
    factory.use_library(lib)
    gm = GraphModule(factory.default(device or cpu()))
    if params is not None and blob is None:
        gm.load_params(params)
    return gm
