"""The graph executor: factory module, executor, and the user-facing GraphModule.

Follows TVM's graph executor (``tvm.contrib.graph_executor``): the factory module
(type key ``"graph_executor_factory"``) holds the graph JSON and the params blob and
imports the library; ``factory["default"](dev)`` makes an executor; ``GraphModule``
wraps it with ``set_input`` / ``run`` / ``get_output``. Unlike TVM's interpreter, a
whole run is ONE native call, ``monolib_run(params, arena)``, into the generated C
(see "The generated C library" in ``docs/ARCHITECTURE.md``).

Weights: the params blob holds the tensors of the graph JSON ``params`` table (small
constants are baked into the C). ``factory.remove_params()`` gives a factory without
them (exported without a params section); an executor then takes them with
``load_params`` (safetensors, :mod:`.params`) or ``set_input(name=array)``, or shares
another executor's with ``share_params``. ``save_graph_json`` + :func:`create` is the
separate-artifact path. Each executor owns its arena and ctypes releases the GIL
during ``monolib_run``, so executors of one factory run in parallel threads.
Per-op profiles and outputs: :mod:`.debug_executor`.
"""

from __future__ import annotations

import copy
import ctypes
import json
import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..abi.graph_spec import TensorInfo, check_graph_json, from_json, graph_head, tensor_info, to_json
from .device import Device, cpu
from ..errors import ContainerError, ExecutionError, ExportError, FunctionNotFoundError, InputError
from .module import Module
from .ndarray import NDArray
from .params import ParamsError, params_blob
from .params import load_params as read_params

__all__ = [
    "ALIGN",
    "BenchmarkResult",
    "GraphExecutor",
    "GraphExecutorFactoryModule",
    "GraphModule",
    "ParamsInputError",
    "create",
    "load_factory",
    "set_num_threads",
]

logger = logging.getLogger(__name__)

ALIGN = 64


class ParamsInputError(InputError, ParamsError):
    """A param given to an executor has an unknown name, or the wrong shape or dtype.
    Both an :class:`InputError` and a ``ParamsError`` (what it was before)."""


def aligned_empty(nbytes: int, align: int = ALIGN, zero: bool = True) -> np.ndarray:
    """A 1-D uint8 array of ``nbytes`` whose data pointer is ``align``-byte aligned."""
    raw = (np.zeros if zero else np.empty)(nbytes + align, dtype=np.uint8)
    skip = (-raw.ctypes.data) % align
    return raw[skip : skip + nbytes]


#: Arenas at least this large are mapped with transparent huge pages where the OS
#: offers them (Linux ``madvise`` mode): a first run touches a 35 MB arena with 18
#: faults instead of 9,000, and the kernels' scattered reads miss the TLB less. From
#: 512 KiB up one zeroed 2 MiB page (~0.15 ms) beats 128+ faults of 4 KiB (~2.5 us
#: each on a VM): Silero's 0.7 MB arena, Magika's 2 MB one.
HUGE_ARENA_BYTES = 512 << 10
_HUGE_PAGE = 2 << 20


def arena_empty(nbytes: int) -> np.ndarray:
    """A zero-filled 1-D uint8 array of ``nbytes`` for an executor's arena, 64-byte
    aligned; from ``HUGE_ARENA_BYTES`` up, an anonymous mapping aligned to 2 MiB and
    advised ``MADV_HUGEPAGE`` (pages are zeroed by the OS on first touch).

    Raises
    ------
    MemoryError, OSError
        The memory cannot be had.
    """
    import mmap  # built in, imported only for large arenas

    if nbytes < HUGE_ARENA_BYTES or not hasattr(mmap, "MADV_HUGEPAGE"):
        return aligned_empty(nbytes)
    # MAP_PRIVATE: a shared anonymous mapping is shmem, which THP's "madvise" mode
    # never backs with huge pages (that takes shmem_enabled); a private one it does.
    # whole huge pages only: a 2 MiB page needs its aligned block inside the mapping
    whole = -(-nbytes // _HUGE_PAGE) * _HUGE_PAGE
    mapping = mmap.mmap(-1, whole + _HUGE_PAGE,
                        flags=mmap.MAP_PRIVATE | getattr(mmap, "MAP_ANONYMOUS", 0x20))
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE)
    except OSError:  # THP off or unsupported: plain pages serve as well
        pass
    raw = np.frombuffer(mapping, dtype=np.uint8)  # keeps the mapping alive
    skip = (-raw.ctypes.data) % _HUGE_PAGE
    return raw[skip : skip + nbytes]


def _aligned_blob(params: Any) -> np.ndarray:
    """``params`` as a 1-D uint8 array with a 64-byte aligned base (copied if not)."""
    params = np.asarray(params)
    if params.dtype != np.uint8 or params.ndim != 1:
        params = np.ascontiguousarray(params).reshape(-1).view(np.uint8)
    if params.ctypes.data % ALIGN or not params.flags.c_contiguous:
        aligned = aligned_empty(params.nbytes, zero=False)
        aligned[:] = params
        params = aligned
    return params


class GraphExecutorFactoryModule(Module):
    """Holds a compiled graph: its JSON, its params blob, and (as import) the library.

    Parameters
    ----------
    graph_json : dict or str
        The graph JSON (see "The graph JSON" in ``docs/ARCHITECTURE.md``).
    params : np.ndarray of uint8, 1-D, or None
        The params blob, each tensor at a 64-byte aligned offset. Copied only if its
        base is not 64-byte aligned; a loaded factory's params are a read-only view
        of the mapped library. None: a factory without weights (see
        :meth:`remove_params`); its executors need ``load_params`` before ``run``.
    lib : Module, optional
        The module holding ``monolib_run`` (CSourceModule or DSOModule); imported.

    Raises
    ------
    ContainerError
        The graph JSON is malformed or names ranges outside the arena/params.
    """

    type_key = "graph_executor_factory"

    def __init__(self, graph_json: Any, params: Any = None, lib: Module | None = None) -> None:
        super().__init__()
        if isinstance(graph_json, (str, bytes, bytearray, memoryview)):
            graph_json = from_json(graph_json)
        self.params = None if params is None else _aligned_blob(params)
        self._library: Module | None = None
        self._param_infos: dict[str, TensorInfo] | None = None
        self._graph_raw: Any = None
        self._set_graph(dict(graph_json))
        self.head = self._graph_json
        if lib is not None:
            self.import_module(lib)

    @classmethod
    def from_head(cls, head: Any, graph: Any, params: Any) -> GraphExecutorFactoryModule:
        """A loaded factory whose full graph JSON is parsed on first use.

        An executor needs only the head (:func:`graph_head`: arena size, inputs,
        outputs); the nodes and the params table, most of the bytes of a large graph
        (36 KiB for PP-OCR det, ~1.5 ms to parse and check), wait until
        :attr:`graph_json` or :meth:`param_infos` is first read.

        Raises
        ------
        ContainerError
            The head is malformed or names ranges outside the arena (the full graph
            JSON's errors are raised when it is first read).
        """
        self = cls.__new__(cls)
        Module.__init__(self)
        self.params = None if params is None else _aligned_blob(params)
        self._library, self._param_infos = None, None
        self.head = dict(from_json(head))
        check_graph_json(self.head, None if params is None else self.params.nbytes)
        self._graph_json, self._graph_raw = None, graph
        return self

    def _set_graph(self, graph: dict) -> None:
        self._graph_json = graph
        self._param_table = check_graph_json(
            graph, None if self.params is None else self.params.nbytes
        )

    @property
    def graph_json(self) -> dict:
        """The graph JSON (dict; see "The graph JSON" in ``docs/ARCHITECTURE.md``).

        Raises
        ------
        ContainerError
            (a loaded factory, on first read) The graph JSON is malformed, names
            ranges outside the arena or params, or disagrees with the head.
        """
        if self._graph_json is None:
            graph = from_json(self._graph_raw)
            if not isinstance(graph, dict) or graph_head(graph) != self.head:
                raise ContainerError("graph JSON disagrees with the graph head section")
            self._set_graph(graph)
            self._graph_raw = None
        return self._graph_json

    @graph_json.setter
    def graph_json(self, graph: Any) -> None:
        self._set_graph(dict(graph))
        self.head, self._param_infos = self._graph_json, None

    @property
    def lib(self) -> Module:
        """The module that holds the compiled code: the one given to
        :meth:`use_library`, else the imported DSO or C source module.

        Raises
        ------
        FunctionNotFoundError
            The factory imports no module.
        """
        if self._library is not None:
            return self._library
        for mod in self._imports:
            if mod.exports_to_library:
                return mod
        if self._imports:
            return self._imports[0]
        raise FunctionNotFoundError("graph executor factory imports no library module")

    def use_library(self, lib: Module) -> None:
        """Run with ``lib`` without importing it (a legacy container's factory is an
        import OF the DSO module, so importing it back would make a cycle)."""
        self._library = lib

    def param_infos(self) -> dict[str, TensorInfo]:
        """``{name: TensorInfo}`` of the graph's params table, each range checked
        against ``params_bytes``; parsed once and shared by every executor (do not
        modify it).

        Raises
        ------
        ContainerError
            A malformed entry or a range outside ``params_bytes``.
        """
        if self._param_infos is None:
            limit = int(self.graph_json.get("params_bytes", 0))
            raws = self.graph_json.get("params", [])
            for raw, info in zip(raws, self._param_table, strict=True):
                if info.offset + info.nbytes > limit:  # checked against the blob only
                    tensor_info(raw, "param", limit, "params blob")  # raises, naming it
            self._param_infos = {info.name: info for info in self._param_table}
        return self._param_infos

    def _get_own_function(self, name: str) -> Callable | None:
        table = {
            "default": self.default,
            "get_graph_json": self.get_graph_json,
            "get_params": self.get_params,
        }
        return table.get(name)

    def default(self, device: Device | None = None) -> GraphExecutor:
        """A new executor on ``device`` (default ``cpu()``), with its own arena; a
        graph compiled for a device target gets a device executor (docs/devices.md)."""
        if self.head.get("device"):
            from .device_executor import DeviceGraphExecutor

            return DeviceGraphExecutor(self, device or cpu())
        return GraphExecutor(self, device or cpu())

    def get_graph_json(self) -> dict:
        """A copy of the graph JSON (dict)."""
        return copy.deepcopy(self.graph_json)

    @property
    def has_params(self) -> bool:
        """False for a factory without weights (:meth:`remove_params`)."""
        return self.params is not None

    def remove_params(self) -> GraphExecutorFactoryModule:
        """A factory of the same graph and library WITHOUT the weights (TVM's
        ``remove_params``): ``export_library`` of it writes no params section, and its
        executors run once given the params with ``load_params`` / ``set_input``.

        Only the tensors of the graph JSON ``params`` table live in the blob; small
        constants are baked into the generated C and stay in the library.

        Returns
        -------
        GraphExecutorFactoryModule
            Sharing this one's imports (the library and any user modules).
        """
        bare = GraphExecutorFactoryModule(copy.deepcopy(self.graph_json), None)
        for mod in self._imports:
            bare.import_module(mod)
        bare._library = self._library
        return bare

    def save_graph_json(self, path: Any) -> str:
        """Write the graph JSON (UTF-8) to ``path`` for the separate-artifact path
        (:func:`create`); returns the path.

        Raises
        ------
        ExportError
            The file cannot be written.
        """
        path = os.fspath(path)
        try:
            with open(path, "w", encoding="utf-8") as f:
                json.dump(self.graph_json, f, indent=1)
        except OSError as exc:
            raise ExportError(f"{path}: cannot write the graph JSON: {exc}") from None
        return path

    def get_params(self) -> dict[str, np.ndarray]:
        """``{name: read-only ndarray view}`` of every tensor in the params blob
        (empty for a factory without weights)."""
        out: dict[str, np.ndarray] = {}
        if self.params is None:
            return out
        for raw in self.graph_json.get("params", []):
            info = tensor_info(raw, "param", self.params.nbytes, "params blob")
            arr = self.params[info.offset : info.offset + info.nbytes].view(info.dtype)
            arr = arr.reshape(info.shape)
            arr.flags.writeable = False
            out[info.name] = arr
        return out

    def save_sections(self) -> dict[str, Any]:
        """``{"graph": UTF-8 JSON, "head": its head (:func:`graph_head`), "params": the
        blob}`` (the blob is not copied); no ``"params"`` for a factory without weights."""
        if self._graph_raw is not None:  # loaded and never read: the same bytes again
            graph = bytes(self._graph_raw)
        else:
            graph = to_json(self.graph_json)
        head = to_json(graph_head(self.head))
        sections = {"graph": graph, "head": head}
        if self.params is not None:
            sections["params"] = self.params
        return sections

    def __repr__(self) -> str:
        name = self.head.get("name", "")
        size = "removed" if self.params is None else f"{self.params.nbytes} bytes"
        return f"GraphExecutorFactoryModule({name!r}, params={size})"


def load_factory(sections: Mapping[str, Any]) -> GraphExecutorFactoryModule:
    """Loader of ``"graph_executor_factory"`` (``register_loader(..., sections=True)``).

    The params stay a read-only view of the section (the mapped library): no copy.
    No ``"params"`` section: a factory exported after :meth:`remove_params`. With a
    ``"head"`` section (written since format 0.2) the full graph JSON is parsed on
    first use (:meth:`GraphExecutorFactoryModule.from_head`); without one, at once.

    Raises
    ------
    ContainerError
        No ``"graph"`` section, or a malformed graph JSON.
    """
    if "graph" not in sections:
        raise ContainerError("graph executor factory lacks section 'graph'")
    params = None
    if "params" in sections:
        params = np.frombuffer(sections["params"], dtype=np.uint8)
        params.flags.writeable = False
    if "head" in sections:
        return GraphExecutorFactoryModule.from_head(sections["head"], sections["graph"], params)
    return GraphExecutorFactoryModule(from_json(sections["graph"]), params)


# Threads: each library has its own pool (MONOLIB_NUM_THREADS at load, else the CPUs the
# process may use). set_num_threads reaches every library an executor was made for.
_num_threads: int | None = None
_thread_setters: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def set_num_threads(n: int) -> int:
    """Run the ops of every loaded model library on ``n`` threads (its own thread pool).

    Applies to the libraries of existing executors and to those made later. Without a
    call, a library uses ``MONOLIB_NUM_THREADS`` (read when it is loaded) or the number
    of CPUs the process may run on (``sched_getaffinity``). Small ops always run on the
    calling thread. Calls ``monolib_set_num_threads`` (docs/ARCHITECTURE.md, "The
    generated C library"); libraries built before it existed are left alone.

    Parameters
    ----------
    n : int
        Threads, ``>= 1`` (a library caps it at its ``ML_MAX_THREADS``, 64).

    Returns
    -------
    int
        ``n``.

    Raises
    ------
    InputError
        ``n`` is not an integer ``>= 1``.
    """
    global _num_threads
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise InputError(f"set_num_threads: n must be an integer >= 1, got {n!r}")
    _num_threads = int(n)
    for setter in list(_thread_setters.values()):
        setter(_num_threads)
    return _num_threads


def _register_threads(lib: Module) -> None:
    """Remember ``lib``'s ``monolib_set_num_threads`` and apply the chosen count."""
    if lib in _thread_setters:
        return
    try:
        fn = lib.get_function("monolib_set_num_threads", query_imports=True)
    except FunctionNotFoundError:
        return  # a library from before the thread pool: single-threaded
    fn.restype, fn.argtypes = ctypes.c_int32, [ctypes.c_int32]
    _thread_setters[lib] = fn
    if _num_threads is not None:
        fn(_num_threads)


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
        self.inputs = [tensor_info(r, "input", self.arena_bytes, "arena") for r in graph["inputs"]]
        self.outputs = [
            tensor_info(r, "output", self.arena_bytes, "arena") for r in graph["outputs"]
        ]
        self._in_views = [self._view(t) for t in self.inputs]
        self._out_views = [self._view(t) for t in self.outputs]
        self._run = self._c_function("monolib_run", [ctypes.c_void_p, ctypes.c_void_p])
        _register_threads(factory.lib)
        # Shared and read-only; load_params gives this executor a private copy. A
        # factory without weights leaves every param missing until it is given.
        self._use_params(factory.params, set() if factory.has_params else set(self.param_infos))

    @property
    def param_infos(self) -> dict[str, TensorInfo]:
        """``{name: TensorInfo}`` of the params table (the factory's, shared: do not
        modify it); read on first use."""
        return self.factory.param_infos()

    def _use_params(self, blob: np.ndarray | None, missing: set[str]) -> None:
        self.params, self._missing = blob, missing
        self._args = None if blob is None else (blob.ctypes.data, self.arena.ctypes.data)

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
            (an InputError and a ParamsError) Unknown name, wrong shape or dtype;
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

    def _view(self, info: TensorInfo) -> np.ndarray:
        return (
            self.arena[info.offset : info.offset + info.nbytes].view(info.dtype).reshape(info.shape)
        )

    def _c_function(self, name: str, argtypes: list) -> Callable:
        fn = self.factory.lib.get_function(name, query_imports=True)
        fn.restype, fn.argtypes = ctypes.c_int32, argtypes
        return fn

    def run(self) -> None:
        """Run the whole graph once (one native call).

        Raises
        ------
        InputError
            Params are missing (a factory without weights, no ``load_params`` yet).
        ExecutionError
            ``monolib_run`` returned nonzero.
        """
        self._check_ready()
        ret = self._run(*self._args)
        if ret != 0:
            raise ExecutionError(
                f"monolib_run returned {ret} (graph {self.factory.head.get('name', '')!r})"
            )

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
        if not hasattr(self, "_run_op"):
            self._run_op = self._c_function(
                "monolib_run_op", [ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p]
            )
        ret = self._run_op(i, *self._args)
        if ret != 0:
            raise ExecutionError(f"monolib_run_op({i}) returned {ret}")

    def profile(self, repeat: int = 5) -> list[dict[str, Any]]:
        """Time every fused op (``monolib_run_op``), best of ``repeat`` runs each.

        Ops run in order on the current inputs, so each sees the data it would see
        in a whole run.

        Returns
        -------
        list of dict
            Per op, in run order: ``index``, ``name``, ``op``, ``fused`` (ONNX ops
            fused into it), ``shape``, ``time_ms`` (milliseconds, best of ``repeat``).
        """
        best = [float("inf")] * self.num_ops()
        for _ in range(max(1, repeat)):
            for i in range(len(best)):
                t = time.perf_counter()
                self.run_op(i)
                best[i] = min(best[i], time.perf_counter() - t)
        nodes = self.factory.graph_json.get("nodes", [])
        return [
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

    def input_view(self, i: int) -> np.ndarray:
        """The writable arena view of input ``i``."""
        return self._in_views[i]

    def output_view(self, i: int) -> np.ndarray:
        """The arena view of output ``i`` (overwritten by the next run)."""
        return self._out_views[i]


def _as_array(value: Any, info: TensorInfo) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, NDArray):
        return np.asarray(value)
    if hasattr(value, "__dlpack__"):
        try:
            return np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError) as exc:
            raise InputError(
                f"input {info.name!r}: cannot read the DLPack object "
                f"{type(value).__name__} on the host ({exc})"
            ) from None
    try:  # a list or scalar has no dtype of its own
        arr = np.asarray(value, dtype=info.dtype)
    except (ValueError, TypeError, OverflowError) as exc:  # ragged, text, out of range
        raise InputError(
            f"input {info.name!r}: cannot convert {type(value).__name__} to a "
            f"{info.dtype} array ({exc})"
        ) from None
    return arr


class GraphModule:
    """The user API of a graph executor (TVM's ``graph_executor.GraphModule``).

    Parameters
    ----------
    module : GraphExecutor or GraphExecutorFactoryModule
        ``factory["default"](dev)``; a factory is run on ``cpu()``.

    Examples
    --------
    >>> gm = GraphModule(lib["default"](cpu()))
    >>> gm.run(x=image); y = gm.get_output(0).numpy()
    """

    def __init__(self, module: Any) -> None:
        if isinstance(module, GraphExecutorFactoryModule):
            module = module.default(cpu())
        if not isinstance(module, GraphExecutor):
            raise TypeError(f"GraphModule wraps a GraphExecutor, got {type(module).__name__}")
        self.executor = module
        self._by_name = {t.name: i for i, t in enumerate(module.inputs)}

    def _expected(self) -> str:
        return ", ".join(t.describe() for t in self.executor.inputs)

    def _index(self, key: Any) -> int:
        inputs = self.executor.inputs
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if 0 <= key < len(inputs):
                return int(key)
            raise InputError(
                f"input index {key} out of range: the model has "
                f"{len(inputs)} inputs ({self._expected()})"
            )
        i = self._by_name.get(key) if isinstance(key, str) else None
        if i is None:
            params = list(self.executor.param_infos)
            extra = f"; params: {', '.join(params[:8])}{', ...' if len(params) > 8 else ''}"
            raise InputError(
                f"unknown input {key!r}: the model expects {self._expected()}"
                + (extra if params else "")
            )
        return i

    def set_input(self, key: Any = None, value: Any = None, **inputs: Any) -> None:
        """Copy input array(s) into the executor.

        Parameters
        ----------
        key : str or int, optional
            Input name or index.
        value : array-like
            A NumPy array, any DLPack object (``np.from_dlpack``), or a NDArray; its
            dtype and shape must match the model's exactly.
        **inputs
            More ``name=array`` pairs. A name of the graph JSON ``params`` table (and
            not an input) sets that param for this executor, as TVM's ``set_input``
            does (see :meth:`GraphExecutor.load_params`).

        Raises
        ------
        InputError
            Unknown name/index, wrong shape or wrong dtype; the message lists what
            the model expects. Every array is checked before any is copied, so on an
            error no input has changed (the executor stays usable as it was).
        """
        pairs = ([(key, value)] if key is not None else []) + list(inputs.items())
        params = {n: v for n, v in pairs if self._is_param(n)}
        checked = [self._checked(k, v) for k, v in pairs if not self._is_param(k)]
        if params:
            self.executor.load_params(params)
        for i, arr in checked:
            # copyto reads any strides (non-contiguous, negative, broadcast) correctly
            np.copyto(self.executor.input_view(i), arr)

    def _is_param(self, key: Any) -> bool:
        return (
            isinstance(key, str) and key not in self._by_name and key in self.executor.param_infos
        )

    def _checked(self, key: Any, value: Any) -> tuple[int, np.ndarray]:
        """(input index, array) for ``set_input``, dtype and shape checked."""
        i = self._index(key)
        info = self.executor.inputs[i]
        arr = value if type(value) is np.ndarray else _as_array(value, info)
        if arr.dtype != info.dtype:
            raise InputError(
                f"input {info.name!r} has dtype {arr.dtype}, the model expects "
                f"{info.dtype} ({self._expected()})"
            )
        if arr.shape != info.shape:
            raise InputError(
                f"input {info.name!r} has shape {list(arr.shape)}, the model "
                f"expects {list(info.shape)} ({self._expected()})"
            )
        return i, arr

    def run(self, **inputs: Any) -> None:
        """Set ``inputs`` (``name=array``) if given, then run the whole graph."""
        if inputs:
            self.set_input(**inputs)
        self.executor.run()

    def get_input(self, key: Any) -> NDArray:
        """Input ``key`` (name or index) as an NDArray view."""
        return NDArray(self.executor.input_view(self._index(key)), self.executor.device)

    def get_output(self, index: int, out: np.ndarray | None = None) -> NDArray:
        """Output ``index`` as an NDArray (a view: ``.numpy()`` copies it).

        Raises
        ------
        InputError
            ``index`` out of range.
        """
        outputs = self.executor.outputs
        if not (isinstance(index, (int, np.integer)) and 0 <= index < len(outputs)):
            names = ", ".join(t.describe() for t in outputs)
            raise InputError(
                f"output index {index!r} out of range: the model has "
                f"{len(outputs)} outputs ({names})"
            )
        view = self.executor.output_view(int(index))
        if out is not None:
            np.copyto(out, view)
        return NDArray(view, self.executor.device)

    def get_num_inputs(self) -> int:
        """Number of graph inputs."""
        return len(self.executor.inputs)

    def get_num_outputs(self) -> int:
        """Number of graph outputs."""
        return len(self.executor.outputs)

    def get_input_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of the inputs, by name (TVM's order)."""
        ins = self.executor.inputs
        return {t.name: t.shape for t in ins}, {t.name: str(t.dtype) for t in ins}

    def get_output_info(self) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
        """``(shape_dict, dtype_dict)`` of the outputs, by name."""
        outs = self.executor.outputs
        return {t.name: t.shape for t in outs}, {t.name: str(t.dtype) for t in outs}

    def load_params(self, params: Any) -> None:
        """Use other weights: ``{name: array}`` or a safetensors file path / bytes
        (see :meth:`GraphExecutor.load_params`)."""
        self.executor.load_params(params)

    def share_params(self, other: Any) -> None:
        """Run with the params of ``other`` (GraphModule or GraphExecutor), no copy
        (see :meth:`GraphExecutor.share_params`)."""
        self.executor.share_params(other)

    def benchmark(self, repeat: int = 10, number: int = 1, warmup: int = 1) -> BenchmarkResult:
        """Time :meth:`run` on the current inputs (TVM's ``GraphModule.benchmark``).

        Parameters
        ----------
        repeat : int
            Number of measurements.
        number : int
            Runs per measurement (the measurement is their mean).
        warmup : int
            Untimed runs first.

        Returns
        -------
        BenchmarkResult
            Seconds per run of each measurement, with mean/median/min/max/std.
        """
        for _ in range(warmup):
            self.executor.run()
        results = []
        for _ in range(max(1, repeat)):
            t = time.perf_counter()
            for _ in range(max(1, number)):
                self.executor.run()
            results.append((time.perf_counter() - t) / max(1, number))
        return BenchmarkResult(results)

    @property
    def input_names(self) -> list[str]:
        """Input names in index order."""
        return [t.name for t in self.executor.inputs]

    @property
    def output_names(self) -> list[str]:
        """Output names in index order."""
        return [t.name for t in self.executor.outputs]


class BenchmarkResult:
    """Seconds per run of each measurement of :meth:`GraphModule.benchmark`."""

    def __init__(self, results: list[float]) -> None:
        self.results = list(results)

    @property
    def mean(self) -> float:
        return float(np.mean(self.results))

    @property
    def median(self) -> float:
        return float(np.median(self.results))

    @property
    def min(self) -> float:
        return float(np.min(self.results))

    @property
    def max(self) -> float:
        return float(np.max(self.results))

    @property
    def std(self) -> float:
        return float(np.std(self.results))

    def __str__(self) -> str:
        return (
            f"mean {self.mean * 1e3:.3f} ms, median {self.median * 1e3:.3f} ms, "
            f"min {self.min * 1e3:.3f} ms, std {self.std * 1e3:.3f} ms "
            f"({len(self.results)} measurements)"
        )


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
