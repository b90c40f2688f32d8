"""The graph JSON: the one reader (validating) and the one writer.

The graph JSON is section ``"graph"`` of the ``"graph_executor_factory"`` module
(docs/ARCHITECTURE.md, "The graph JSON")::

    {"format": "monolib.graph", "version": 1, "name": ..., ["device": ...,]
     "arena_bytes": ..., "params_bytes": ..., "inputs": [...], "outputs": [...],
     "nodes": [...], "params": [...], "aliases": {...}, "constants": {...},
     "metadata": {...}}

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

__all__ = [
    "GRAPH_FORMAT",
    "GRAPH_VERSION",
    "GRAPH_VERSIONS",
    "LAZY_KEYS",
    "TensorInfo",
    "check_fields",
    "check_graph_json",
    "factory_graphs",
    "from_json",
    "graph_document",
    "graph_head",
    "node_entry",
    "tensor_dtype",
    "tensor_entry",
    "tensor_info",
    "to_json",
]

logger = logging.getLogger(__name__)

GRAPH_FORMAT = "monolib.graph"
#: The version this writer produces.
GRAPH_VERSION = 1
#: The versions this reader accepts.
GRAPH_VERSIONS = (1,)
#: Graph JSON keys an executor does not need: they stay unparsed in a loaded factory
#: and are left out of the head section.
LAZY_KEYS = ("nodes", "params")


# ---------------------------------------------------------------- reading


class TensorInfo(NamedTuple):
    """A graph input, output or param: name, shape, dtype, byte offset, byte size."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    offset: int
    nbytes: int

    def describe(self) -> str:
        """``"name: dtype[shape]"``, for messages."""
        return f"{self.name}: {self.dtype}{list(self.shape)}"


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


def tensor_info(raw: Any, where: str, limit: int, limit_name: str) -> TensorInfo:
    """One ``inputs``/``outputs``/``params`` entry, checked.

    Parameters
    ----------
    raw : Mapping
        The entry: ``name``, ``shape``, ``dtype``, ``offset``.
    where : str
        What it is, for messages (``"input"``, ``"output"``, ``"param"``).
    limit : int
        Bytes of the buffer it lies in; ``limit_name`` names that buffer.

    Raises
    ------
    ContainerError
        A missing or malformed field, a dtype that is no tensor dtype, or a byte range
        outside ``[0, limit)``.
    """
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
        Wrong format or version, missing keys, or an input/output/param whose byte
        range lies outside the arena or the params blob.
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
    for kind in ("inputs", "outputs"):
        for raw in _list(graph[kind], kind):
            tensor_info(raw, kind[:-1], arena, "arena")
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


def _strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(d, str) for d in v)


def _byte_count(v: Any) -> bool:
    return type(v) is int and v >= 0


_TENSOR_FIELDS = {"shape": _ints, "dtype": lambda v: isinstance(v, str)}
_NODE_FIELDS = {**_TENSOR_FIELDS, "op": lambda v: isinstance(v, str), "fused": _strs,
                "inputs": _strs, "outputs": _strs}  # fmt: skip
_PARAM_FIELDS = {**_TENSOR_FIELDS, "nbytes": _byte_count}


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
        ints, byte counts not ints >= 0, aliases not a name -> name map).
    """
    if not isinstance(graph, dict):
        raise ContainerError("graph JSON is not an object")
    where = f"graph {graph.get('name', '')!r}"
    _check_entries(f"{where}: inputs", graph.get("inputs", []), _TENSOR_FIELDS)
    _check_entries(f"{where}: outputs", graph.get("outputs", []), _TENSOR_FIELDS)
    _check_entries(f"{where}: nodes", graph.get("nodes", []), _NODE_FIELDS)
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


def tensor_entry(name: str, shape: Sequence[int], dtype: Any, offset: int) -> dict[str, Any]:
    """An ``inputs``/``outputs`` entry: ``dtype`` is written by its NumPy name
    (``"float32"``, ``"bfloat16"``), ``offset`` is bytes into the arena."""
    return {"name": name, "shape": list(shape), "dtype": tensor_dtype(dtype).name,
            "offset": offset}


def node_entry(name: str, op: str, fused: Sequence[str], inputs: Iterable[str],
               outputs: Iterable[str], shape: Sequence[int], dtype: Any,
               offset: int) -> dict[str, Any]:
    """A ``nodes`` entry: fused op ``i`` (``monolib_run_op(i, ...)``), its op type and
    the elementwise types fused into it, the values it reads and writes, and the
    shape, dtype and arena ``offset`` of its output 0 (where the debug executor
    reads it)."""
    return {
        "name": name,
        "op": op,
        "fused": list(fused),
        "inputs": list(inputs),
        "outputs": list(outputs),
        "shape": list(shape),
        "dtype": tensor_dtype(dtype).name,
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
) -> dict[str, Any]:
    """A graph JSON document, keys in the documented order.

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
    """
    out: dict[str, Any] = {"format": GRAPH_FORMAT, "version": GRAPH_VERSION, "name": name}
    if device is not None:
        out["device"] = device
    out.update({
        "arena_bytes": arena_bytes,
        "params_bytes": params_bytes,
        "inputs": inputs,
        "outputs": outputs,
        "nodes": nodes,
        "params": params,
        "aliases": dict(aliases),
        "constants": dict(constants or {}),
        "metadata": dict(metadata or {}),
    })
    return out
