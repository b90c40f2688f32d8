"""The graph JSON: the one reader (validating) and the one writer.

The graph JSON is section ``"graph"`` of the ``"graph_executor_factory"`` module
(docs/ARCHITECTURE.md, "The graph JSON")::

    {"format": "monolib.graph", "version": 1, "name": ..., ["device": ...,]
     "arena_bytes": ..., "params_bytes": ..., "inputs": [...], "outputs": [...],
     "nodes": [...], "params": [...], "aliases": {...}, "constants": {...},
     "metadata": {...}}

Version 2 (a graph with run-time dims, :mod:`.symbols`) adds ``symbols``,
``sym_offset``, ``shape_offset`` and ``specializations``; its shape entries may be
strings (an input's: a symbol name; an output's or node's: a dim expression) and its
tensors with run-time dims carry ``max_nbytes`` (their bytes at the upper bounds).
Version 1 (every dim static) is still read, and still written for static graphs.

Section ``"head"`` is the same document without ``nodes`` and ``params``
(:func:`graph_head`): all an executor reads. The compiler writes documents with
:func:`tensor_entry`, :func:`node_entry` and :func:`graph_document`, and serializes
them with :func:`to_json`; the runtime and the tools read them with :func:`from_json`
and check them with :func:`check_graph_json` / :func:`tensor_info` (what an executor
reads: format, version, byte ranges) and :func:`check_fields` (the type of every
field, for readers of the whole document: :func:`factory_graphs`).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ..errors import ContainerError
from .names import FACTORY, GRAPH_SECTION
from .sequences import spec_of
from .symbols import DynamicLayout, Symbol, check_expression, dynamic_layout, is_static

__all__ = [
    "GRAPH_FORMAT",
    "GRAPH_VERSION",
    "GRAPH_VERSIONS",
    "GRAPH_VERSION_DYNAMIC",
    "LAZY_KEYS",
    "TensorInfo",
    "check_fields",
    "check_graph_json",
    "dtype_name",
    "factory_graphs",
    "from_json",
    "graph_document",
    "graph_head",
    "graph_layout",
    "node_entry",
    "tensor_dtype",
    "tensor_entry",
    "tensor_info",
    "to_json",
]

logger = logging.getLogger(__name__)

GRAPH_FORMAT = "monolib.graph"
#: The version this writer produces for a graph whose dims are all static.
GRAPH_VERSION = 1
#: The version it produces for a graph with run-time dims (``symbols``).
GRAPH_VERSION_DYNAMIC = 2
#: The versions this reader accepts.
GRAPH_VERSIONS = (1, 2)
#: Graph JSON keys an executor does not need: they stay unparsed in a loaded factory
#: and are left out of the head section.
LAZY_KEYS = ("nodes", "params")


# ---------------------------------------------------------------- reading


class TensorInfo(NamedTuple):
    """A graph input, output or param: name, shape, dtype, byte offset, byte size.

    A tensor with run-time dims (graph JSON version 2) has strings in ``shape`` (an
    input's: symbol names; an output's: dim expressions) and ``nbytes`` its bytes at
    the upper bounds (``max_nbytes``, the size of its arena slot).
    """

    name: str
    shape: tuple[int | str, ...]
    dtype: np.dtype
    offset: int
    nbytes: int

    @property
    def dynamic(self) -> bool:
        """Whether some dim is a run-time dim (a string)."""
        return not is_static(self.shape)

    def describe(self) -> str:
        """``"name: dtype[shape]"``, for messages."""
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


# dtype name -> np.dtype: parsing a dtype string costs ~1 us, and a graph names a few
# dtypes hundreds of times.
_DTYPES: dict[str, np.dtype] = {}


def tensor_dtype(name: Any) -> np.dtype:
    """The ``np.dtype`` a graph JSON ``"dtype"`` names (cached per name).

    The storage types NumPy lacks (bfloat16, float8_*, int4...) come from
    ``ml_dtypes``, imported only when a graph names one (it registers them).

    Raises
    ------
    TypeError
        ``name`` is no dtype, or names one of ``ml_dtypes`` and that is not installed.
    """
    if isinstance(name, str):
        found = _DTYPES.get(name)
        if found is None:
            found = _DTYPES[name] = _parse_dtype(name)
        return found
    return np.dtype(name)


def dtype_name(dtype: Any) -> str:
    """The graph JSON spelling of ``dtype``: its NumPy name (``"float32"``,
    ``"bfloat16"``), and ``"S<n>"`` for a string tensor (NumPy's fixed-width bytes
    type: ``n`` bytes of UTF-8 per element, NUL padded; NumPy names it
    ``"bytes<8n>"``, which ``np.dtype`` does not read back)."""
    dt = tensor_dtype(dtype)
    return f"S{dt.itemsize}" if dt.kind == "S" else dt.name


def _parse_dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        try:
            import ml_dtypes
        except ImportError:
            raise TypeError(
                f"dtype {name!r} needs the ml_dtypes package (pip install ml_dtypes)"
            ) from None
        found = getattr(ml_dtypes, name, None)
        if found is None:
            raise
        return np.dtype(found)


def tensor_info(
    raw: Any, where: str, limit: int, limit_name: str,
    symbols: Mapping[str, Symbol] | None = None,
) -> TensorInfo:
    """One ``inputs``/``outputs``/``params`` entry, checked.

    Parameters
    ----------
    raw : Mapping
        The entry: ``name``, ``shape``, ``dtype``, ``offset`` (``max_nbytes`` too
        when a dim is a string).
    where : str
        What it is, for messages (``"input"``, ``"output"``, ``"param"``, ``"node"``).
    limit : int
        Bytes of the buffer it lies in; ``limit_name`` names that buffer.
    symbols : Mapping of str -> Symbol, optional
        The graph's symbols (version 2): string dims are then read, an input's as a
        symbol name, any other's as a dim expression. None: every dim must be an int.

    Raises
    ------
    ContainerError
        A missing or malformed field, a dtype that is no tensor dtype, a string dim
        that is no declared symbol (an input's) or no dim expression, ``max_nbytes``
        missing or smaller than the input at its upper bounds, or a byte range outside
        ``[0, limit)``.
    """
    shape_raw = raw.get("shape") if isinstance(raw, Mapping) else None
    if symbols is not None and isinstance(shape_raw, list) and not is_static(shape_raw):
        return _dynamic_info(raw, where, limit, limit_name, symbols)
    try:
        shape = tuple(int(d) for d in raw["shape"])
        dtype = tensor_dtype(raw["dtype"])
        info = TensorInfo(
            str(raw["name"]),
            shape,
            dtype,
            int(raw["offset"]),
            math.prod(shape) * dtype.itemsize,  # exact (np.prod would wrap at 2**63)
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # Infinity: Overflow
        raise ContainerError(f"graph JSON: malformed {where} entry {raw!r:.200} ({exc})") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise ContainerError(f"graph JSON: {where} {info.name!r} has no tensor dtype ({dtype})")
    if min(shape, default=0) < 0 or info.offset < 0 or info.offset + info.nbytes > limit:
        raise ContainerError(
            f"graph JSON: {where} {info.name!r} [{info.offset}, {info.offset + info.nbytes}) "
            f"lies outside the {limit_name} ({limit} bytes)"
        )
    return info


def _dynamic_info(
    raw: Mapping, where: str, limit: int, limit_name: str, symbols: Mapping[str, Symbol]
) -> TensorInfo:
    """:func:`tensor_info` of an entry with string dims (graph JSON version 2)."""
    try:
        name, dtype = str(raw["name"]), tensor_dtype(raw["dtype"])
        offset, nbytes = int(raw["offset"]), raw["max_nbytes"]
        shape = tuple(raw["shape"])
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise ContainerError(f"graph JSON: malformed {where} entry {raw!r:.200} ({exc})") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise ContainerError(f"graph JSON: {where} {name!r} has no tensor dtype ({dtype})")
    if type(nbytes) is not int or nbytes < 0:
        raise ContainerError(
            f"graph JSON: {where} {name!r}: max_nbytes {nbytes!r:.60} is no byte count"
        )
    top = dtype.itemsize
    for axis, d in enumerate(shape):
        what = f"{where} {name!r} axis {axis}"
        if type(d) is int:
            if d < 0:
                raise ContainerError(f"graph JSON: {what} has size {d}")
            top *= d
        elif not isinstance(d, str):
            raise ContainerError(f"graph JSON: {what} is {d!r:.60}, not an int or a string")
        elif where == "input":
            if d not in symbols:
                raise ContainerError(
                    f"graph JSON: {what} names {d!r:.60}, which is no declared symbol"
                )
            top *= symbols[d].last
        else:
            check_expression(d, symbols, what)
    if where == "input" and top > nbytes:
        raise ContainerError(
            f"graph JSON: {where} {name!r} takes {top} bytes at its upper bounds, more than "
            f"its max_nbytes {nbytes}"
        )
    if offset < 0 or offset + nbytes > limit:
        raise ContainerError(
            f"graph JSON: {where} {name!r} [{offset}, {offset + nbytes}) "
            f"lies outside the {limit_name} ({limit} bytes)"
        )
    return TensorInfo(name, shape, dtype, offset, nbytes)


def graph_layout(graph: Mapping) -> DynamicLayout | None:
    """The run-time-dim fields of a graph JSON (or head), checked; None for a
    version-1 graph (every dim static).

    Raises
    ------
    ContainerError
        A malformed ``symbols``, ``sym_offset``, ``shape_offset`` or
        ``specializations`` (see :func:`.symbols.dynamic_layout`).
    """
    if graph.get("version") != GRAPH_VERSION_DYNAMIC:
        return None
    return dynamic_layout(graph, _count(graph.get("arena_bytes"), "arena_bytes"))


def check_graph_json(graph: Mapping, params_nbytes: int | None) -> list[TensorInfo]:
    """Check the graph JSON's format, version and that every range fits.

    ``params_nbytes`` None: a factory without weights; the params table is checked
    against ``params_bytes`` instead of a blob. A head (no ``params`` table) checks
    as a graph JSON with an empty one.

    Returns
    -------
    list of TensorInfo
        The params table, in order (each range checked against the blob).

    Raises
    ------
    ContainerError
        Wrong format or version, missing keys, an input/output/param whose byte
        range lies outside the arena or the params blob, or (version 2) malformed
        run-time dims (:func:`graph_layout`, :func:`tensor_info`).
    """
    if not isinstance(graph, Mapping) or graph.get("format") != GRAPH_FORMAT:
        raise ContainerError(f'graph JSON: "format" is not {GRAPH_FORMAT!r}')
    if graph.get("version") not in GRAPH_VERSIONS:
        raise ContainerError(
            f"graph JSON: version {graph.get('version')!r} is not readable (reads {GRAPH_VERSIONS})"
        )
    for key in ("arena_bytes", "inputs", "outputs"):
        if key not in graph:
            raise ContainerError(f"graph JSON: missing {key!r}")
    declared = _count(graph.get("params_bytes", 0), "params_bytes")
    if params_nbytes is None:
        params_nbytes = declared
    if declared > params_nbytes:
        raise ContainerError(
            f"graph JSON: params_bytes {graph['params_bytes']} exceeds the "
            f"params blob ({params_nbytes} bytes)"
        )
    arena = _count(graph["arena_bytes"], "arena_bytes")
    layout = graph_layout(graph)
    symbols = None if layout is None else layout.by_name
    for kind in ("inputs", "outputs"):
        for raw in _list(graph[kind], kind):
            info = tensor_info(raw, kind[:-1], arena, "arena", symbols)
            spec_of(raw, info.nbytes)  # a sequence's layout fits its slot
    table = _list(graph.get("params", []), "params")
    return [tensor_info(raw, "param", params_nbytes, "params blob") for raw in table]


def _count(value: Any, key: str) -> int:
    """A graph JSON byte count: a non-negative integer (bool and Infinity refused)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ContainerError(f"graph JSON: {key} is {value!r:.100}, not a byte count >= 0")
    return value


def _list(value: Any, key: str) -> list:
    if not isinstance(value, list):
        raise ContainerError(f"graph JSON: {key} is a {type(value).__name__}, not a list")
    return value


def graph_head(graph: Mapping) -> dict:
    """The graph JSON without its ``nodes`` and ``params`` table: all an executor
    reads (format, version, arena size, inputs, outputs, device...)."""
    return {k: v for k, v in graph.items() if k not in LAZY_KEYS}


def from_json(data: Any) -> Any:
    """Parse a graph JSON (or head) section: ``str`` or UTF-8 bytes-like -> the
    decoded JSON value (a dict for a well-formed one; :func:`check_graph_json`
    checks the rest).

    Raises
    ------
    ContainerError
        Not UTF-8, not JSON, or nested too deeply to parse.
    """
    try:
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        return json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ContainerError(f"graph JSON is not valid UTF-8 JSON: {exc}") from None
    except RecursionError:  # "[[[[..." nested past the interpreter's stack
        raise ContainerError("graph JSON is nested too deeply") from None


def _ints(v: Any) -> bool:
    return isinstance(v, list) and all(type(d) is int for d in v)


def _dims(v: Any) -> bool:
    return isinstance(v, list) and all(type(d) is int or isinstance(d, str) for d in v)


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(d, str) for d in v)


def _byte_count(v: Any) -> bool:
    return type(v) is int and v >= 0


_TENSOR_FIELDS = {"shape": _ints, "dtype": lambda v: isinstance(v, str)}
#: a node's output stored other than row-major ("layout"; absent: row-major): NCHW16c is
#: [N][C/16][H][W][16] (backends/c/layout.py), only between two convs
NODE_LAYOUTS = ("NCHW16c",)
_NODE_FIELDS = {**_TENSOR_FIELDS, "op": lambda v: isinstance(v, str), "fused": _strs,
                "inputs": _strs, "outputs": _strs,
                "layout": lambda v: v in NODE_LAYOUTS}  # fmt: skip
_PARAM_FIELDS = {**_TENSOR_FIELDS, "nbytes": _byte_count}
# version 2: inputs, outputs and nodes may have run-time dims (strings)
_DYN_TENSOR_FIELDS = {**_TENSOR_FIELDS, "shape": _dims, "max_nbytes": _byte_count}
_DYN_NODE_FIELDS = {**_NODE_FIELDS, "shape": _dims}


def _check_entries(where: str, items: Any, fields: Mapping[str, Any]) -> None:
    if not isinstance(items, list):
        raise ContainerError(f"{where} is not a list")
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ContainerError(f"{where}[{i}] is not an object with a string name")
        for key, check in fields.items():
            if key in item and not check(item[key]):
                raise ContainerError(f"{where}[{i}] ({item['name']!r}): bad {key} {item[key]!r}")


def check_fields(graph: Any) -> dict:
    """Check the type of every field a reader of the whole graph JSON uses (the
    tools: ``inspect``, ``view``). Lenient about what is absent: a field is checked
    when present, ``name`` of every entry always; formats, versions and byte ranges
    are :func:`check_graph_json`'s job.

    Returns
    -------
    dict
        ``graph``, checked.

    Raises
    ------
    ContainerError
        ``graph`` is not an object, or names the first field of the wrong type
        (entries not lists of objects with a string ``name``, shapes not lists of
        ints (of ints or strings in version 2), byte counts not ints >= 0, aliases
        not a name -> name map).
    """
    if not isinstance(graph, dict):
        raise ContainerError("graph JSON is not an object")
    where = f"graph {graph.get('name', '')!r}"
    dyn = graph.get("version") == GRAPH_VERSION_DYNAMIC
    tensor_fields = _DYN_TENSOR_FIELDS if dyn else _TENSOR_FIELDS
    _check_entries(f"{where}: inputs", graph.get("inputs", []), tensor_fields)
    _check_entries(f"{where}: outputs", graph.get("outputs", []), tensor_fields)
    node_fields = _DYN_NODE_FIELDS if dyn else _NODE_FIELDS
    _check_entries(f"{where}: nodes", graph.get("nodes", []), node_fields)
    _check_entries(f"{where}: params", graph.get("params", []), _PARAM_FIELDS)
    for key in ("params_bytes", "arena_bytes"):
        if key in graph and not _byte_count(graph[key]):
            raise ContainerError(f"{where}: {key} {graph[key]!r} is not a byte count")
    aliases = graph.get("aliases", {})
    if not isinstance(aliases, dict) or not all(isinstance(v, str) for v in aliases.values()):
        raise ContainerError(f"{where}: aliases must map tensor names to tensor names")
    return graph


def factory_graphs(container: Any) -> dict[int, dict]:
    """The whole graph JSON of every graph executor factory module of a container,
    each checked with :func:`check_fields` (read while the container's buffer is
    alive: call it inside ``read_container``'s ``extract``).

    Parameters
    ----------
    container : monolib.abi.container.Container
        A parsed container.

    Returns
    -------
    dict of int -> dict
        Module index -> its graph JSON.

    Raises
    ------
    ContainerError
        A section's digest mismatches, or a graph JSON is not UTF-8 JSON or has a
        field of the wrong type (the message names the container and the module).
    """
    out = {}
    for i, mod in enumerate(container.modules):
        sec = next((s for s in mod.sections if s.name == GRAPH_SECTION), None)
        if mod.type_key != FACTORY or sec is None:
            continue
        container.check_section(i, sec)
        try:
            out[i] = check_fields(from_json(container.section_data(i, sec)))
        except ContainerError as exc:
            raise ContainerError(f"{container.source}: module {i}: {exc}") from None
    return out


# ---------------------------------------------------------------- writing


def to_json(graph: Mapping) -> bytes:
    """The compact UTF-8 JSON of a graph JSON or head: the bytes of its section."""
    return json.dumps(graph, separators=(",", ":")).encode("utf-8")


def tensor_entry(name: str, shape: Sequence[int | str], dtype: Any, offset: int,
                 max_nbytes: int | None = None,
                 sequence: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """An ``inputs``/``outputs`` entry: ``dtype`` is written by :func:`dtype_name`
    (``"float32"``, ``"bfloat16"``, ``"S16"``), ``offset`` is bytes into the arena.

    A tensor with run-time dims (version 2) gives ``shape`` entries as strings (an
    input's: symbol names; an output's: dim expressions) and ``max_nbytes``, its
    bytes at the upper bounds (the size of its arena slot).

    A sequence or optional (``sequence``: ``abi.sequences.spec_entry``) is its slot,
    ``uint8[slot bytes]``, with ``"sequence"`` describing the layout."""
    out = {"name": name, "shape": list(shape), "dtype": dtype_name(dtype), "offset": offset}
    if max_nbytes is not None:
        out["max_nbytes"] = int(max_nbytes)
    if sequence is not None:
        out["sequence"] = dict(sequence)
    return out


def node_entry(name: str, op: str, fused: Sequence[str], inputs: Iterable[str],
               outputs: Iterable[str], shape: Sequence[int | str], dtype: Any,
               offset: int) -> dict[str, Any]:
    """A ``nodes`` entry: fused op ``i`` (``monolib_run_op(i, ...)``), its op type and
    the elementwise types fused into it, the values it reads and writes, and the
    shape (a run-time dim as its dim expression string), dtype and arena ``offset``
    of its output 0 (where the debug executor reads it)."""
    return {
        "name": name,
        "op": op,
        "fused": list(fused),
        "inputs": list(inputs),
        "outputs": list(outputs),
        "shape": list(shape),
        "dtype": dtype_name(dtype),
        "offset": offset,
    }


def graph_document(
    name: str,
    *,
    arena_bytes: int,
    params_bytes: int,
    inputs: list[dict[str, Any]],
    outputs: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    params: list[dict[str, Any]],
    aliases: Mapping[str, str],
    constants: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
    device: str | None = None,
    symbols: Sequence[Mapping[str, Any]] | None = None,
    sym_offset: int | None = None,
    shape_offset: int | None = None,
    specializations: Sequence[Mapping[str, int]] = (),
) -> dict[str, Any]:
    """A graph JSON document, keys in the documented order: version 1 without
    ``symbols``, version 2 (run-time dims) with them.

    Parameters
    ----------
    name : str
        The model's name.
    arena_bytes, params_bytes : int
        Bytes of the arena and of the params blob.
    inputs, outputs : list of dict
        :func:`tensor_entry` of each graph input and output.
    nodes : list of dict
        :func:`node_entry` of each fused op, in run order.
    params : list of dict
        The params table: ``name``, ``shape``, ``dtype``, ``offset``, ``nbytes``.
    aliases : Mapping
        Values that share storage without code (Reshape, Squeeze, in-place Concat):
        name -> source name.
    constants, metadata : Mapping, optional
        Model constants and string metadata, copied.
    device : str, optional
        The device kind (``"opencl"``, ``"cuda"``) whose kernels run the nodes; None
        for the C library.
    symbols : sequence of dict, optional
        :func:`.symbols.symbol_entry` of each run-time dim, in the order of the int64
        values at ``sym_offset``. Given (non-empty): version 2, and ``sym_offset``
        (``int64_t[len(symbols)]``) and ``shape_offset`` (``int64_t[sum of output
        ranks]``, where ``monolib_run`` writes each output's actual shape) are
        required arena offsets, 8-byte aligned.
    specializations : sequence of dict
        ``{symbol name: value}`` (every symbol) of each shape compiled statically;
        written as ``[{"symbols": {...}}, ...]``.

    Raises
    ------
    ValueError
        ``symbols`` without ``sym_offset``/``shape_offset``, or offsets without symbols.
    """
    dynamic = bool(symbols)
    if dynamic != (sym_offset is not None) or dynamic != (shape_offset is not None):
        raise ValueError("graph_document: symbols, sym_offset and shape_offset go together")
    version = GRAPH_VERSION_DYNAMIC if dynamic else GRAPH_VERSION
    out: dict[str, Any] = {"format": GRAPH_FORMAT, "version": version, "name": name}
    if device is not None:
        out["device"] = device
    out.update({"arena_bytes": arena_bytes, "params_bytes": params_bytes})
    if dynamic:
        out.update({"symbols": [dict(s) for s in symbols], "sym_offset": sym_offset,
                    "shape_offset": shape_offset})
    out.update({
        "inputs": inputs,
        "outputs": outputs,
        "nodes": nodes,
        "params": params,
        "aliases": dict(aliases),
        "constants": dict(constants or {}),
        "metadata": dict(metadata or {}),
    })
    if dynamic:
        out["specializations"] = [{"symbols": dict(s)} for s in specializations]
    return out
