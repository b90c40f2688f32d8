"""Run a ``.wasm`` exported by monolib from Python, through wasmtime (docs/wasm.md).

``load_module("m.wasm")`` ends here (:func:`load_wasm`): the file is read once (and,
with ``trusted_keys``, its detached signature checked over exactly those bytes), its
container found and checked without running anything (:mod:`monolib.abi.binfmt.wasm`),
then the module compiled and instantiated with WASI. The result is the root of the same
tree a native library gives: a graph executor factory (:class:`WasmFactory`) importing
the code module (:class:`WasmModule`, type key ``"wasm"``, in the place of the DSO), so
``GraphModule(mod["default"](cpu()))`` has the usual ``set_input`` / ``run`` /
``get_output`` API. Its executor (:class:`WasmExecutor`) opens a handle with the C API
(``monolib_open``: the arena is allocated in linear memory), views the arena's inputs
and outputs as NumPy arrays of linear memory (no copy: the engine is configured so
memory never moves) and runs the graph with ``monolib_run`` (the weights read in place
from the data segment), run-time shapes bound as the native executor binds them.

Errors are :class:`~monolib.errors.MonolibError` subclasses, never a crash: a module
that does not compile or instantiate is a ``LibraryLoadError``; a C API call that fails
an ``ExecutionError`` (``InputError`` for an input) carrying ``monolib_last_error()``;
a trap (out of bounds, unreachable, stack exhausted) an ``ExecutionError`` naming it.

``wasmtime`` (PyPI; ``pip install monolib[wasm]``) is imported only here, only when a
``.wasm`` is loaded. Its compiled code is cached on disk (wasmtime's cache,
``~/.cache/wasmtime``; ``MONOLIB_WASM_CACHE=0`` turns it off): a second load of PP-OCR
rec compiles in 0.14 s instead of 1.22.
"""

from __future__ import annotations

import ctypes
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..abi.binfmt.wasm import WASM_MAGIC, find_wasm_container
from ..abi.container import Container
from ..abi.graph_spec import from_json, graph_layout, tensor_info
from ..abi.names import (
    CONTAINER_START,
    FACTORY,
    GRAPH_SECTION,
    HEAD_SECTION,
    LIBRARY,
    PARAMS_SECTION,
    RUN,
    RUN_OP,
    RUN_TIMED,
)
from ..errors import ExecutionError, InputError, LibraryLoadError
from .device import Device, cpu
from .factory import GraphExecutorFactoryModule, register_executor
from .module import Module
from .shapes import RunShapes, start_shape

__all__ = ["WASM", "WasmExecutor", "WasmFactory", "WasmModule", "is_wasm", "load_wasm"]

logger = logging.getLogger(__name__)

#: The type key of the code module of a loaded ``.wasm``.
WASM = "wasm"
_ENGINE: Any = None
_engine_lock = threading.Lock()


def is_wasm(data: Any) -> bool:
    """Whether ``data`` (bytes-like) starts as a WebAssembly module (``\\0asm``)."""
    return bytes(memoryview(data)[:4]) == WASM_MAGIC[:4]


def _wasmtime() -> Any:
    try:
        import wasmtime
    except ImportError:
        raise LibraryLoadError(
            "running a .wasm from Python needs wasmtime: pip install monolib[wasm] "
            "(or pip install wasmtime)") from None
    return wasmtime


def _engine() -> Any:
    """The process's one engine: memory never moves (the NumPy views of the arena stay
    valid as it grows: wasmtime reserves a 4 GiB range for a 32-bit memory)."""
    global _ENGINE
    with _engine_lock:
        if _ENGINE is None:
            wt = _wasmtime()
            cfg = wt.Config()
            cfg.memory_may_move = False
            if os.environ.get("MONOLIB_WASM_CACHE", "1") != "0":
                try:  # compiled code cached on disk (~/.cache/wasmtime): rec 1.22 -> 0.14 s
                    cfg.cache = True
                except (wt.WasmtimeError, OSError) as exc:
                    logger.info("no wasmtime code cache: %s", exc)
            _ENGINE = wt.Engine(cfg)
        return _ENGINE


class WasmModule(Module):
    """The code of a loaded ``.wasm`` (type key ``"wasm"``): one wasmtime instance.

    ``mod[name]`` is a callable of export ``name`` (``mod["monolib_num_ops"]()``). Calls
    are serialized (a wasmtime store is not thread-safe); a trap raises
    :class:`~monolib.errors.ExecutionError`.

    Parameters
    ----------
    data : bytes
        The module's file content.
    shown : str
        Its name in messages.
    max_memory : int, optional
        Most bytes of linear memory (a wasmtime store limit; default: 4 GiB, all that
        wasm32 addresses).

    Raises
    ------
    LibraryLoadError
        wasmtime is missing, or the module does not compile or instantiate (a damaged
        or foreign file), or lacks an export of docs/wasm.md.
    """

    type_key = WASM
    exports_to_library = True

    def __init__(self, data: bytes, shown: str, max_memory: int | None = None) -> None:
        super().__init__()
        wt = _wasmtime()
        self.shown = shown
        self._lock = threading.RLock()
        engine = _engine()
        try:
            module = wt.Module(engine, data)
            linker = wt.Linker(engine)
            linker.define_wasi()
            self._store = wt.Store(engine)
            self._store.set_wasi(wt.WasiConfig())
            if max_memory is not None:
                self._store.set_limits(memory_size=int(max_memory))
            self._instance = linker.instantiate(self._store, module)
            self._exports = self._instance.exports(self._store)
            self.memory = self._exports["memory"]
            init = self._exports.get("_initialize")
            if init is not None:
                init(self._store)
        except (wt.WasmtimeError, wt.Trap, KeyError) as exc:
            raise LibraryLoadError(f"{shown}: cannot instantiate the WebAssembly module: "
                                   f"{_first_line(exc)}") from None
        self._trap_types = (wt.Trap, wt.WasmtimeError)

    def call(self, name: str, *args: int) -> Any:
        """Call export ``name`` with integer ``args``.

        Raises
        ------
        FunctionNotFoundError
            No such export.
        ExecutionError
            The call trapped (the message names the export and the trap).
        """
        self._check_open()
        fn = self._exports.get(name)
        if fn is None:
            from ..errors import FunctionNotFoundError

            raise FunctionNotFoundError(f"{self.shown}: the module exports no {name!r}")
        with self._lock:
            try:
                return fn(self._store, *args)
            except self._trap_types as exc:
                raise ExecutionError(f"{self.shown}: {name} trapped: {_first_line(exc)}") from None

    def last_error(self) -> str:
        """``monolib_last_error()``: the message of the C API's last failure."""
        return self.read_cstring(self.call("monolib_last_error"))

    def global_value(self, name: str) -> int:
        """The value of the exported global ``name`` (an address for the container's)."""
        with self._lock:
            return int(self._exports[name].value(self._store))

    def buffer(self) -> np.ndarray:
        """Linear memory as a writable uint8 array (of its size now; it never moves).
        The array (and every view of it) keeps the store, so the memory stays mapped
        while an array points into it, even after :meth:`close`."""
        self._check_open()
        with self._lock:
            n = self.memory.data_len(self._store)
            base = ctypes.cast(self.memory.data_ptr(self._store), ctypes.c_void_p).value
            raw = (ctypes.c_uint8 * n).from_address(base)
            raw.keep = (self._store, self._instance)
        return np.ctypeslib.as_array(raw)

    def memory_bytes(self) -> int:
        """Linear memory's size now."""
        with self._lock:
            return int(self.memory.data_len(self._store))

    def read_cstring(self, ptr: int) -> str:
        """The NUL-terminated UTF-8 string at address ``ptr``."""
        if not ptr:
            return ""
        tail = self.buffer()[ptr:]
        nul = np.flatnonzero(tail == 0)
        return bytes(tail[: nul[0] if len(nul) else len(tail)]).decode("utf-8", "replace")

    def _get_own_function(self, name: str) -> Callable | None:
        if name not in self._exports or name in ("memory",):
            return None
        return lambda *args: self.call(name, *args)

    def _release(self) -> None:
        self._exports, self._instance, self._store = {}, None, None

    def __repr__(self) -> str:
        return f"WasmModule({self.shown!r})"


def _first_line(exc: BaseException) -> str:
    """What went wrong, in one line: a trap's cause (wasmtime puts the backtrace first
    and "wasm trap: ..." last), else the message's first line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    cause = [ln for ln in lines if "wasm trap:" in ln]
    return cause[-1].split(": ", 1)[-1] if cause and cause[-1][0].isdigit() else (
        cause[-1] if cause else lines[0])


class WasmFactory(GraphExecutorFactoryModule):
    """The graph executor factory of a loaded ``.wasm``: its executors
    (:class:`WasmExecutor`) run the graph in the imported :class:`WasmModule`."""

    #: where the params section starts in the container (set by :func:`load_wasm`)
    params_offset = 0

    def default(self, device: Device | None = None) -> WasmExecutor:
        """A new executor (its own handle and arena in linear memory) on ``cpu()``."""
        self._check_open()
        return WasmExecutor(self, device or cpu())


class WasmExecutor:
    """Runs the graph of a ``.wasm``: a C API handle (``monolib_open``) whose arena in
    linear memory the inputs and outputs view, and ``monolib_run`` on it.

    Parameters
    ----------
    factory : WasmFactory
    device : Device
        The host CPU.

    Raises
    ------
    ExecutionError
        ``monolib_open`` failed (e.g. the arena does not fit in linear memory); the
        message is the C API's.
    """

    def __init__(self, factory: WasmFactory, device: Device) -> None:
        if device.device_type != "cpu":
            raise InputError(f"a .wasm runs on cpu, not {device}")
        self.factory, self.device = factory, device
        self.lib: WasmModule = factory.lib
        graph = factory.head
        self.arena_bytes = int(graph["arena_bytes"])
        layout = graph_layout(graph)
        symbols = None if layout is None else layout.by_name
        self.inputs = [tensor_info(r, "input", self.arena_bytes, "arena", symbols)
                       for r in graph["inputs"]]
        self.outputs = [tensor_info(r, "output", self.arena_bytes, "arena", symbols)
                        for r in graph["outputs"]]
        if not self.outputs:
            raise ExecutionError(f"{self.lib.shown}: a graph without outputs")
        self._handle = self.lib.call("monolib_open")
        if not self._handle:
            raise ExecutionError(f"{self.lib.shown}: {self.lib.last_error()}")
        # the arena's address: output 0's place minus its offset (the C API's own)
        self._arena_at = self.lib.call("monolib_output_data", self._handle, 0) - self.outputs[0].offset
        self.arena = self.lib.buffer()[self._arena_at : self._arena_at + self.arena_bytes]
        self._params_at = self.lib.global_value(CONTAINER_START) + factory.params_offset
        self.shapes = None
        if layout is not None:
            self.shapes = RunShapes(layout, self.inputs, self.outputs, self.arena)
        self._in_views = [self._view(t, t.shape if symbols is None else start_shape(t, symbols))
                          for t in self.inputs]
        self._out_views = [self._view(t, tuple(d if type(d) is int else 0 for d in t.shape))
                           for t in self.outputs]
        self.closed = False

    @property
    def param_infos(self) -> dict:
        """``{name: TensorInfo}`` of the params table (the weights are in the module)."""
        return self.factory.param_infos()

    def load_params(self, params: Any) -> None:
        """Refused: a ``.wasm`` carries its weights in its data segment.

        Raises
        ------
        InputError
            Always.
        """
        raise InputError(f"{self.lib.shown}: a .wasm reads its weights from its own data "
                         "segment; export another .wasm to change them")

    share_params = load_params

    def _view(self, info: Any, shape: tuple[int, ...]) -> np.ndarray:
        end = info.offset + math.prod(shape) * info.dtype.itemsize
        return self.arena[info.offset : end].view(info.dtype).reshape(shape)

    def _check(self) -> None:
        if self.closed:
            from ..errors import ModuleClosedError

            raise ModuleClosedError(f"{self.lib.shown}: this executor was closed")

    def set_input_shape(self, i: int, shape: tuple[int, ...]) -> None:
        """Give input ``i`` the (already checked) run-time shape ``shape``."""
        self.shapes.set_input(i, shape)
        self._in_views[i] = self._view(self.inputs[i], shape)

    def run(self) -> None:
        """Run the whole graph once (``monolib_run`` in the module).

        Raises
        ------
        ExecutionError
            A trap, or ``monolib_run`` returned nonzero (``1000 + i``: fused op ``i``
            went past a bound planned at compile time).
        """
        self._check()
        if self.shapes is not None:
            self.shapes.bind()
        ret = self.lib.call(RUN, self._params_at, self._arena_at)
        if ret != 0:
            raise ExecutionError(self._failure(RUN, ret))
        if self.shapes is not None:
            for i, info in enumerate(self.outputs):
                shape = self.shapes.output_shape(i)
                if shape != self._out_views[i].shape:
                    self._out_views[i] = self._view(info, shape)

    def _failure(self, fn: str, ret: int) -> str:
        nodes = self.factory.graph_json.get("nodes", []) if ret >= 1000 else []
        if 0 <= ret - 1000 < len(nodes):
            node = nodes[ret - 1000]
            return (f"{self.lib.shown}: node {node.get('name')!r} ({node.get('op')}) stopped "
                    "the run: it went past a bound planned at compile time")
        return f"{self.lib.shown}: {fn} returned {ret}"

    def set_input_checked(self, key: Any, value: Any) -> None:
        """Copy an input in through the C API (``monolib_set_input_shaped``: its checks
        of rank, static dims, bounds and step, and its messages), as a C or JavaScript
        host does; :meth:`run` then uses that shape.

        Raises
        ------
        InputError
            The C API refused it: the message is ``monolib_last_error()``.
        """
        self._check()
        i = key if isinstance(key, int) else next(
            (k for k, t in enumerate(self.inputs) if t.name == key), None)
        if i is None:
            raise InputError(f"{self.lib.shown}: the model has no input named {key!r}")
        arr = np.ascontiguousarray(value, dtype=self.inputs[i].dtype)
        shape = np.asarray(arr.shape, dtype=np.int64)
        nbytes = arr.nbytes + shape.nbytes
        ptr = self.lib.call("malloc", max(nbytes, 1))
        if not ptr:
            raise ExecutionError(f"{self.lib.shown}: malloc({nbytes}) failed: out of memory")
        try:
            mem = self.lib.buffer()
            mem[ptr : ptr + arr.nbytes] = arr.reshape(-1).view(np.uint8)
            mem[ptr + arr.nbytes : ptr + nbytes] = shape.view(np.uint8)
            rc = self.lib.call("monolib_set_input_shaped", self._handle, i, ptr,
                               ptr + arr.nbytes, arr.ndim)
        finally:
            self.lib.call("free", ptr)
        if rc != 0:
            raise InputError(f"{self.lib.shown}: {self.lib.last_error()}")
        if self.shapes is not None:  # the run binds the dims from the Python side
            self.set_input_shape(i, tuple(arr.shape))

    def num_ops(self) -> int:
        """Number of fused ops."""
        return len(self.factory.graph_json.get("nodes", []))

    def run_op(self, i: int) -> None:
        """Run fused op ``i`` only (``monolib_run_op``).

        Raises
        ------
        InputError
            ``i`` is out of range.
        ExecutionError
            A trap, or the op returned nonzero.
        """
        if not 0 <= i < self.num_ops():
            raise InputError(f"op index {i} out of range [0, {self.num_ops()})")
        self._check()
        if self.shapes is not None:
            self.shapes.bind()
        ret = self.lib.call(RUN_OP, i, self._params_at, self._arena_at)
        if ret != 0:
            raise ExecutionError(self._failure(f"{RUN_OP}({i})", ret))

    def profile(self, repeat: int = 5, in_run: bool = False) -> list[dict[str, Any]]:
        """Time every fused op (``monolib_run_op``, in order), best of ``repeat``; the
        signature of ``GraphExecutor.profile``.

        Returns
        -------
        list of dict
            Per op: ``index``, ``name``, ``op``, ``fused``, ``shape``, ``time_ms``.

        Raises
        ------
        ExecutionError
            ``in_run``: a WebAssembly module has no clock to time ops inside a run
            (it imports no WASI function).
        """
        if in_run:
            raise ExecutionError(
                f"a WebAssembly library cannot time its ops inside runs ({RUN_TIMED}: it "
                "has no clock); profile(in_run=False) times them one at a time")
        best = [float("inf")] * self.num_ops()
        for _ in range(max(1, repeat)):
            for i in range(len(best)):
                t = time.perf_counter()
                self.run_op(i)
                best[i] = min(best[i], time.perf_counter() - t)
        nodes = self.factory.graph_json.get("nodes", [])
        return [{"index": i, "name": n.get("name", ""), "op": n.get("op", ""),
                 "fused": list(n.get("fused", [])), "shape": n.get("shape"),
                 "time_ms": best[i] * 1e3} for i, n in enumerate(nodes)]

    def input_view(self, i: int) -> np.ndarray:
        """The writable view of input ``i`` in linear memory."""
        return self._in_views[i]

    def output_view(self, i: int) -> np.ndarray:
        """The view of output ``i`` in linear memory (overwritten by the next run)."""
        return self._out_views[i]

    def close(self) -> None:
        """``monolib_close`` the handle (its arena is freed); idempotent."""
        if not self.closed:
            self.closed = True
            self._in_views = self._out_views = []
            self.arena = None
            if not self.lib.closed:
                self.lib.call("monolib_close", self._handle)


register_executor(WASM, WasmExecutor)  # so GraphModule takes it (no graph says "wasm")


def _factory(container: Container, shown: str) -> WasmFactory:
    """The root factory of the container (params: a read-only view of the file's copy)
    and the offset of its params in the container."""
    root = container.root
    entry = container.modules[root]
    if entry.type_key != FACTORY:
        raise LibraryLoadError(f"{shown}: the root module is {entry.type_key!r}; a .wasm "
                               "runs a graph executor factory")
    if any(m.type_key not in (FACTORY, LIBRARY) for m in container.modules):
        kinds = sorted({m.type_key for m in container.modules})
        raise LibraryLoadError(f"{shown}: modules {kinds}: a .wasm runs host-only graphs")
    sections = container.sections_of(root)
    if GRAPH_SECTION not in sections or PARAMS_SECTION not in sections:
        raise LibraryLoadError(f"{shown}: the factory lacks its graph or params section")
    params = np.frombuffer(sections[PARAMS_SECTION], dtype=np.uint8)
    params.flags.writeable = False
    graph = sections[GRAPH_SECTION]
    if HEAD_SECTION in sections:
        factory = WasmFactory.from_head(sections[HEAD_SECTION], graph, params)
    else:
        factory = WasmFactory(from_json(graph), params)
    sec = next(s for s in entry.sections if s.name == PARAMS_SECTION)
    if sec.codec != "raw":
        raise LibraryLoadError(f"{shown}: compressed params ({sec.codec}): the module reads "
                               "them in place; export the .wasm uncompressed")
    factory.params_offset = sec.offset
    return factory


def load_wasm(path: Any, verify: bool = False, trusted_keys: Any = None, signature: Any = None,
              max_memory: int | None = None) -> WasmFactory:
    """Load a ``.wasm`` exported by monolib (what ``load_module`` does for one).

    Parameters
    ----------
    path : str, os.PathLike or bytes-like
        The file, or its content.
    verify : bool
        Check every container section's SHA-256 (else the small ones).
    trusted_keys, signature
        As :func:`monolib.runtime.library.load_module`: the detached signature is
        checked over the bytes read, which are then the ones compiled.
    max_memory : int, optional
        Most bytes of linear memory (default: wasm32's 4 GiB).

    Returns
    -------
    WasmFactory
        The root of the tree: the factory, importing the :class:`WasmModule`.

    Raises
    ------
    LibraryLoadError, ContainerError, SignatureError
        As ``load_module``; a module that does not compile or instantiate.
    """
    in_memory = isinstance(path, (bytes, bytearray, memoryview))
    shown = "<bytes>" if in_memory else os.fsdecode(os.fspath(path))
    if in_memory:
        data = bytes(path)
    else:
        try:
            with open(shown, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise LibraryLoadError(f"{shown}: cannot read: {exc.strerror}") from None
    if trusted_keys is not None:
        from . import trust

        if signature is None and in_memory:
            from ..errors import SignatureError

            raise SignatureError("<bytes>: a module given in memory has no signature file "
                                 "beside it: pass signature=")
        sig = signature if signature is not None else trust.signature_path(shown)
        info = trust.verify_bytes(data, sig, trusted_keys, where=shown)
        logger.info("%s: signed by trusted key %s", shown, info.key_id)
    elif signature is not None:
        from ..errors import SignatureError

        raise SignatureError("signature= given without trusted_keys=: nothing would be verified")
    offset, size, _, _ = find_wasm_container(data, shown)
    container = Container(memoryview(data)[offset : offset + size],
                          source=f"{shown} (container at file offset {offset})", verify=verify)
    factory = _factory(container, shown)
    factory.import_module(WasmModule(data, shown, max_memory))
    logger.debug("loaded %s: %d bytes, container %d bytes", shown, len(data), size)
    return factory
