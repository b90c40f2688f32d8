"""Device modules and the device graph executor.

A model compiled for a device target (``"opencl"``, ``"cuda"``) is the module tree
``graph_executor_factory -> library (host) -> opencl | cuda``. The device module holds
the kernel source, the function table (kernel name, fused op, work items) and compiled
code keyed by device (an OpenCL program binary per device name, PTX per CUDA arch);
:class:`DeviceModule` gives both kinds one byte format. :class:`DeviceGraphExecutor`
runs the graph: inputs and outputs in a host arena, everything else in two device
buffers (the params blob and the arena, laid out as in the graph JSON), one kernel
launch per fused op. It is the registered executor of graphs compiled for
``"opencl"`` and ``"cuda"`` (:func:`.factory.register_executor`).

The device APIs (pyopencl, cuda-python) are imported only when an executor is made:
``import monolib.runtime`` needs NumPy alone.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .device import Device
from ..errors import ContainerError, ExecutionError, InputError
from ..abi.graph_spec import graph_layout, tensor_info
from ..abi.names import CUDA, DEVICE, OPENCL
from .arena import aligned_empty
from .factory import register_executor
from .graph_executor import GraphExecutor
from .module import Module

__all__ = [
    "DeviceGraphExecutor",
    "DeviceModule",
    "DeviceSession",
    "read_header",
]

logger = logging.getLogger(__name__)

MAGIC = b"MLDEVMOD"
VERSION = 1
_HEAD = struct.Struct("<8sII")  # magic, format version, header JSON size


class DeviceSession:
    """What a device module gives the executor (one per executor): device buffers for
    the params blob and the arena, and kernel launches. Subclassed per API."""

    def upload_params(self, blob: np.ndarray) -> None:
        raise NotImplementedError

    def write(self, offset: int, host: np.ndarray) -> None:
        """Copy ``host`` into the device arena at byte ``offset``."""
        raise NotImplementedError

    def read(self, offset: int, host: np.ndarray) -> None:
        """Copy the device arena at byte ``offset`` into ``host`` (blocking)."""
        raise NotImplementedError

    def launch(self, i: int) -> None:
        """Enqueue kernel ``i`` of the function table."""
        raise NotImplementedError

    def finish(self) -> None:
        """Wait for every enqueued command."""
        raise NotImplementedError


class DeviceModule(Module):
    """Kernels of one device kind: source, function table, compiled code by key.

    Parameters
    ----------
    source : str
        The kernels (OpenCL C or CUDA C).
    functions : list of dict
        Per kernel, in run order: ``name``, ``node`` (index in the graph JSON
        ``nodes``), ``items`` (work items of the launch).
    binaries : dict of str -> bytes, optional
        Compiled code by key (OpenCL: ``platform|device|driver``; CUDA: ``sm_XY``).
    meta : dict, optional
        More JSON-able fields (the CUDA arch...).

    Byte format (:meth:`save_to_bytes`, little endian): ``b"MLDEVMOD"``, u32 version
    (1), u32 header size, the header (UTF-8 JSON, sorted keys: ``type_key``,
    ``functions``, ``meta``, ``blobs`` = ``{name: [offset, size]}`` into what follows),
    then the blobs (``source``, ``binary:<key>`` sorted by key). Deterministic: a
    loaded module saves to the same bytes.
    """

    type_key = DEVICE

    def __init__(
        self,
        source: str,
        functions: list[dict[str, Any]],
        binaries: Mapping[str, bytes] | None = None,
        **meta: Any,
    ) -> None:
        super().__init__()
        self.source = str(source)
        self.functions = [dict(f) for f in functions]
        self.binaries: dict[str, bytes] = dict(binaries or {})
        self.meta = dict(meta)

    def get_source(self, fmt: str = "") -> str:
        """The kernel source (TVM's ``get_source``)."""
        return self.source

    def _get_own_function(self, name: str) -> Callable | None:
        return {"get_source": self.get_source}.get(name)

    def save_to_bytes(self) -> bytes:
        blobs = [("source", self.source.encode("utf-8"))]
        blobs += [(f"binary:{k}", bytes(self.binaries[k])) for k in sorted(self.binaries)]
        table, off = {}, 0
        for name, data in blobs:
            table[name] = [off, len(data)]
            off += len(data)
        head = json.dumps(
            {
                "type_key": self.type_key,
                "functions": self.functions,
                "meta": self.meta,
                "blobs": table,
            },
            sort_keys=True,
            separators=(",", ":"),
        ).encode("utf-8")
        return b"".join([_HEAD.pack(MAGIC, VERSION, len(head)), head, *(d for _, d in blobs)])

    @classmethod
    def load(cls, data: Any) -> DeviceModule:
        """Rebuild a module from :meth:`save_to_bytes` output (the registered loader).

        Raises
        ------
        ContainerError
            Wrong magic, version or type key, or a blob outside the payload.
        """
        data = memoryview(data).cast("B")
        head, size = read_header(data, cls.type_key)
        try:
            body = data[_HEAD.size + size :]
            blobs = {}
            for name, (off, n) in head["blobs"].items():
                if off < 0 or n < 0 or off + n > len(body):
                    raise ValueError(f"blob {name!r} [{off}, {off + n}) outside {len(body)} bytes")
                blobs[name] = bytes(body[off : off + n])
            functions, meta = head["functions"], head["meta"]
            source = blobs["source"].decode("utf-8")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ContainerError(f"{cls.type_key} module: malformed header ({exc})") from None
        if head.get("type_key") != cls.type_key:
            raise ContainerError(
                f"{cls.type_key} module: payload is of type {head.get('type_key')!r}"
            )
        binaries = {k[len("binary:") :]: v for k, v in blobs.items() if k.startswith("binary:")}
        return cls(source, functions, binaries, **meta)

    def open(self, device: Device, arena_bytes: int) -> DeviceSession:
        """A session on ``device`` with an arena of ``arena_bytes`` (subclasses).

        Raises
        ------
        DeviceUnavailableError
            The device API or the device is missing.
        """
        raise NotImplementedError

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self.functions)} kernels, "
            f"binaries={sorted(self.binaries)})"
        )


def read_header(data: Any, what: str = "device") -> tuple[dict[str, Any], int]:
    """The JSON header of a :class:`DeviceModule` payload and its size in bytes (what
    ``monolib inspect`` shows: kernels, binary keys, meta), without the blobs.

    Raises
    ------
    ContainerError
        Truncated payload, wrong magic or version, or a header that is not JSON.
    """
    data = memoryview(data).cast("B")
    if len(data) < _HEAD.size:
        raise ContainerError(f"{what} module: payload of {len(data)} bytes is truncated")
    magic, version, size = _HEAD.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise ContainerError(
            f"{what} module: not a monolib device module (magic {magic!r}, "
            f"version {version}; reads version {VERSION})"
        )
    try:
        head = json.loads(bytes(data[_HEAD.size : _HEAD.size + size]).decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError too
        raise ContainerError(f"{what} module: malformed header ({exc})") from None
    if not isinstance(head, dict):
        raise ContainerError(f"{what} module: malformed header (not an object)")
    return head, size


def find_device_module(roots: list[Module], type_key: str) -> DeviceModule:
    """The first module of ``type_key`` in the import trees under ``roots`` (depth
    first).

    Raises
    ------
    InputError
        There is none.
    """
    stack, seen = list(roots), set()
    while stack:
        mod = stack.pop(0)
        if id(mod) in seen:
            continue
        seen.add(id(mod))
        if isinstance(mod, DeviceModule) and mod.type_key == type_key:
            return mod
        stack[:0] = mod.imported_modules
    raise InputError(f"the module tree imports no {type_key!r} device module")


class DeviceGraphExecutor(GraphExecutor):
    """Runs a graph compiled for a device target: ``factory["default"](monolib.opencl())``.

    Inputs are written from the host arena into the device arena, the kernels of the
    device module launched in order, the outputs read back; params (weights) live in
    a device buffer, uploaded again after ``load_params``/``share_params``.

    Raises
    ------
    InputError
        ``device`` is not of the kind the graph was compiled for.
    ExecutionError
        The graph has run-time dims (graph JSON version 2 with symbols): device
        kernels are compiled for static shapes (the compiler refuses such a graph
        first; this guards a hand-made or damaged one).
    DeviceUnavailableError
        No usable device (API not installed, no driver, bad index).
    """

    def __init__(self, factory: Any, device: Device) -> None:
        graph = factory.graph_json
        kind = graph.get("device", "cpu")
        layout = graph_layout(graph)
        if layout is not None and layout.symbols:
            names = ", ".join(s.name for s in layout.symbols)
            raise ExecutionError(
                f"graph {graph.get('name', '')!r} has run-time dims ({names}): the {kind} "
                "executor runs static shapes only; compile it for the C target, or with "
                "every dim fixed"
            )
        if device.device_type != kind:
            raise InputError(
                f"graph {graph.get('name', '')!r} was compiled for {kind}: make its executor "
                f"with monolib.{kind}(), not {device}"
            )
        self.factory, self.device = factory, device
        # the factory's tree, or the library given to graph_executor.create
        roots = [factory] + ([factory._library] if factory._library is not None else [])
        self.module = find_device_module(roots, kind)
        self.arena_bytes = int(graph["arena_bytes"])
        infos = [
            tensor_info(r, k, self.arena_bytes, "arena")
            for k in ("inputs", "outputs")
            for r in graph[k]
        ]
        # the host arena mirrors the device one: inputs and outputs at their offsets, and
        # an op's output after run_op (what the debug executor reads)
        self.arena = aligned_empty(max(self.arena_bytes, 64))
        self.inputs, self.outputs = infos[: len(graph["inputs"])], infos[len(graph["inputs"]) :]
        self.shapes = None  # static shapes only (checked above)
        self._in_views = [self._view(t, t.shape) for t in self.inputs]
        self._out_views = [self._view(t, t.shape) for t in self.outputs]
        self.session = self.module.open(device, self.arena_bytes)
        self._use_params(factory.params, set() if factory.has_params else set(self.param_infos))

    def _use_params(self, blob: np.ndarray | None, missing: set[str]) -> None:
        super()._use_params(blob, missing)
        self._uploaded = None

    def _sync_params(self) -> None:
        if self._uploaded is not self.params:
            self.session.upload_params(self.params)
            self._uploaded = self.params

    def run(self) -> None:
        """Run the whole graph: write inputs, one launch per fused op, read outputs.

        Raises
        ------
        InputError
            Params are missing (a factory without weights).
        ExecutionError
            The device API reported an error.
        """
        self._check_ready()
        self._sync_params()
        s = self.session
        for info, view in zip(self.inputs, self._in_views):
            s.write(info.offset, view)
        for i in range(len(self.module.functions)):
            s.launch(i)
        for info, view in zip(self.outputs, self._out_views):
            s.read(info.offset, view)
        s.finish()

    def run_op(self, i: int) -> None:
        """Run kernel ``i`` alone (``profile``, the debug executor) and copy its output
        back into the host arena at the node's offset; op 0 first writes the inputs.

        Raises
        ------
        InputError
            ``i`` out of range, or params missing.
        """
        if not 0 <= i < len(self.module.functions):
            raise InputError(f"op index {i} out of range [0, {len(self.module.functions)})")
        self._check_ready()
        self._sync_params()
        s = self.session
        if i == 0:
            for info, view in zip(self.inputs, self._in_views):
                s.write(info.offset, view)
        s.launch(i)
        node = self.factory.graph_json["nodes"][self.module.functions[i]["node"]]
        out = tensor_info(
            {**node, "name": node.get("name", "")}, "node", self.arena_bytes, "arena"
        )
        s.read(out.offset, self.arena[out.offset : out.offset + out.nbytes])
        s.finish()


# the factory's default(device) finds it by the graph's "device" (no import back)
for _kind in (OPENCL, CUDA):
    register_executor(_kind, DeviceGraphExecutor)
