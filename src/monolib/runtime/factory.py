"""The graph executor factory module (type key ``"graph_executor_factory"``), its
loader, and the registry of executors by device.

Follows TVM's graph executor factory: the module holds the graph JSON and the params
blob and imports the library; ``factory["default"](dev)`` makes an executor. Which
executor class is looked up in a registry keyed by the graph's ``"device"`` (absent:
``"cpu"``): :mod:`.graph_executor` registers the C library's executor for ``"cpu"``,
:mod:`.device_executor` the device executor for ``"opencl"`` and ``"cuda"``, so this
module imports neither.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ..abi.graph_spec import TensorInfo, check_graph_json, from_json, graph_head, tensor_info, to_json
from ..abi.names import FACTORY, GRAPH_SECTION, HEAD_SECTION, PARAMS_SECTION
from ..errors import ContainerError, ExecutionError, ExportError, FunctionNotFoundError
from .arena import aligned_blob
from .device import Device, cpu
from .module import Module

__all__ = [
    "GraphExecutorFactoryModule",
    "is_executor",
    "load_factory",
    "register_executor",
]

logger = logging.getLogger(__name__)

# graph "device" -> executor class, ``cls(factory, device)``
_EXECUTORS: dict[str, type] = {}


def register_executor(device_kind: str, cls: type) -> None:
    """Make ``cls`` the executor of graphs compiled for ``device_kind``.

    Parameters
    ----------
    device_kind : str
        The graph JSON's ``"device"`` (``"cpu"`` for a graph without one).
    cls : type
        ``cls(factory, device)`` makes an executor (a ``GraphExecutor`` subclass).
        A later registration for the same kind replaces it.
    """
    _EXECUTORS[device_kind] = cls
    logger.debug("executor for %r graphs: %s", device_kind, cls.__name__)


def is_executor(obj: Any) -> bool:
    """Whether ``obj`` is an executor of a registered class (what ``GraphModule``
    wraps)."""
    return isinstance(obj, tuple(_EXECUTORS.values()))


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

    type_key = FACTORY

    def __init__(self, graph_json: Any, params: Any = None, lib: Module | None = None) -> None:
        super().__init__()
        if isinstance(graph_json, (str, bytes, bytearray, memoryview)):
            graph_json = from_json(graph_json)
        self.params = None if params is None else aligned_blob(params)
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
        self.params = None if params is None else aligned_blob(params)
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

    def default(self, device: Device | None = None) -> Any:
        """A new executor on ``device`` (default ``cpu()``), with its own arena: the
        executor registered for the graph's ``"device"`` (a graph compiled for a
        device target gets a device executor, docs/devices.md).

        Raises
        ------
        ExecutionError
            No executor is registered for the graph's device.
        ModuleClosedError
            The factory was closed.
        """
        self._check_open()
        kind = self.head.get("device") or "cpu"
        cls = _EXECUTORS.get(kind)
        if cls is None:
            known = ", ".join(sorted(_EXECUTORS)) or "none"
            raise ExecutionError(
                f"graph {self.head.get('name', '')!r} is compiled for {kind!r}, which has "
                f"no registered executor (registered: {known})"
            )
        return cls(self, device or cpu())

    def _release(self) -> None:
        """Module.close: drop the weights (a loaded factory's view into the mapped
        library); the graph JSON stays readable (copied out of the library)."""
        self.params = None
        if self._graph_raw is not None:
            self._graph_raw = bytes(self._graph_raw)

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
        sections = {GRAPH_SECTION: graph, HEAD_SECTION: head}
        if self.params is not None:
            sections[PARAMS_SECTION] = self.params
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
    if GRAPH_SECTION not in sections:
        raise ContainerError(f"graph executor factory lacks section {GRAPH_SECTION!r}")
    params = None
    if PARAMS_SECTION in sections:
        params = np.frombuffer(sections[PARAMS_SECTION], dtype=np.uint8)
        params.flags.writeable = False
    graph = sections[GRAPH_SECTION]
    if HEAD_SECTION in sections:
        return GraphExecutorFactoryModule.from_head(sections[HEAD_SECTION], graph, params)
    return GraphExecutorFactoryModule(from_json(graph), params)
