"""Params on their own: the safetensors format, read zero-copy (NumPy only).

The separate-artifact path (graph JSON + library + params file, TVM's
``graph_executor.create`` + ``load_params``) stores params as **safetensors**
(https://huggingface.co/docs/safetensors, format spec in its README):

* a little-endian u64 header length ``N``;
* ``N`` bytes of UTF-8 JSON ``{name: {"dtype": "F32", "shape": [..], "data_offsets":
  [begin, end]}, "__metadata__": {str: str}}`` (the spec allows trailing spaces, which
  we use to pad the data start to 64 bytes so every view is aligned);
* the data buffer; offsets are relative to its start; tensors are packed with no gap.

:func:`load_params` maps a file (or views a bytes object) and returns read-only
views: no copy. Every number in the header is checked against the buffer first, so a
corrupt file gives a :class:`ParamsError` naming the file and the tensor, never a
crash. :func:`params_blob` packs tensors into a factory's params blob (what
``GraphExecutor.load_params`` needs).
"""

from __future__ import annotations

import itertools
import json
import logging
import mmap
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import ParamsError, ParamsFileError
from .files import write_atomic

__all__ = [
    "SAFETENSORS_DTYPES",
    "load_params",
    "params_blob",
    "params_metadata",
    "save_params",
]

logger = logging.getLogger(__name__)


#: safetensors dtype code -> NumPy dtype (little endian). The codes of the
#: ``safetensors`` package; BF16 and F8 need ``ml_dtypes`` (see :func:`_dtype_of`).
SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "C64": "<c8",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U64": "<u8",
    "U32": "<u4",
    "U16": "<u2",
    "U8": "u1",
    "BOOL": "?",
}
# Codes NumPy has no type for: the ml_dtypes name of each (imported only when met).
_ML_DTYPES = {"BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}
_ALIGN = 64  # the data start; the format asks for 8
_MAX_HEADER = 100 << 20  # the reference implementation's limit too
_KEYS = {"dtype", "shape", "data_offsets"}


def _dtype_of(code: Any, where: str) -> np.dtype:
    """NumPy dtype of a safetensors code; ParamsError if unknown or unavailable."""
    if isinstance(code, str) and code in SAFETENSORS_DTYPES:
        return np.dtype(SAFETENSORS_DTYPES[code])
    if isinstance(code, str) and code in _ML_DTYPES:
        try:
            import ml_dtypes  # optional: the runtime needs NumPy only
        except ImportError:
            raise ParamsError(f"{where}: dtype {code} needs the ml_dtypes package") from None
        return np.dtype(getattr(ml_dtypes, _ML_DTYPES[code]))
    raise ParamsError(f"{where}: unknown safetensors dtype {code!r}")


def _code_of(dtype: np.dtype, name: str) -> str:
    """safetensors code of a NumPy dtype (either byte order)."""
    le = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
    for code, np_name in SAFETENSORS_DTYPES.items():
        if np.dtype(np_name) == le:
            return code
    for code, ml_name in _ML_DTYPES.items():
        if le.name == ml_name:
            return code
    raise ParamsError(f"param {name!r}: dtype {dtype} has no safetensors code")


def _layout(params: Mapping[str, Any], metadata: Mapping[str, str] | None):
    """(header bytes padded to 64, [(array, begin)], data bytes) for ``params``."""
    if metadata is not None and not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise ParamsError("params metadata must map str to str (safetensors __metadata__)")
    arrays = {}
    for name, value in params.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise ParamsError(f"param name {name!r} is not allowed in safetensors")
        arr = np.asarray(value)
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # keeps 0-d
        _code_of(arr.dtype, name)
        arrays[name] = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
    # Widest items first (stable: the caller's order otherwise), as the reference
    # writer does: tensors are packed with no gap, so this keeps every view aligned.
    order = sorted(arrays, key=lambda n: -arrays[n].dtype.itemsize)
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    placed, pos = [], 0
    for name in order:
        arr = arrays[name]
        header[name] = {
            "dtype": _code_of(arr.dtype, name),
            "shape": list(arr.shape),
            "data_offsets": [pos, pos + arr.nbytes],
        }
        placed.append((arr, pos))
        pos += arr.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * ((-(8 + len(blob))) % _ALIGN)  # the data start 64-byte aligned
    return blob, placed, pos


def save_params(
    tensors: Mapping[str, Any], path: Any = None, metadata: Mapping[str, str] | None = None
) -> bytes | None:
    """Write ``{name: array}`` in safetensors format, to ``path`` or to bytes.

    Parameters
    ----------
    tensors : mapping of str -> array-like
        Tensors of any shape; dtypes among :data:`SAFETENSORS_DTYPES` (``bfloat16``
        and ``float8`` of ml_dtypes too). Big-endian arrays are stored little endian.
    path : str or os.PathLike, optional
        Output file (conventionally ``*.safetensors``), written atomically (a temp
        file renamed over it). ``None``: return the bytes instead.
    metadata : mapping of str -> str, optional
        Stored under ``"__metadata__"``.

    Returns
    -------
    bytes or None
        The file's bytes when ``path`` is None, else None.

    Raises
    ------
    ParamsError
        ``tensors`` is not a mapping (the order is ``save_params(tensors, path)``),
        a dtype safetensors cannot represent, a bad name or metadata.
    ParamsFileError
        The file cannot be written (no such folder, no permission, disk full).
    """
    if not isinstance(tensors, Mapping):
        raise ParamsError(
            f"save_params(tensors, path): the first argument must be a mapping of name "
            f"to array, got {type(tensors).__name__}"
        )
    blob, placed, nbytes = _layout(tensors, metadata)
    start = 8 + len(blob)
    if path is None:
        out = bytearray(start + nbytes)
        out[:start] = struct.pack("<Q", len(blob)) + blob
        view = np.frombuffer(out, np.uint8)
        for arr, begin in placed:
            view[start + begin : start + begin + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        del view  # a bytearray cannot be converted while exported
        return bytes(out)
    path = os.fspath(path)
    head = struct.pack("<Q", len(blob)) + blob
    # packed in order: no seek needed
    chunks = [head, *(memoryview(arr.reshape(-1).view(np.uint8)) for arr, _ in placed)]
    try:
        write_atomic(path, chunks)
    except OSError as exc:
        raise ParamsFileError(f"{path}: cannot write params file: {exc.strerror}") from None
    return None


def _map_file(path: str) -> np.ndarray:
    """The file mapped read-only as a uint8 array (an empty array for an empty file)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return np.zeros(0, np.uint8)
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as exc:
        raise ParamsFileError(f"{path}: cannot map params file: {exc}") from None
    return np.frombuffer(mm, dtype=np.uint8)  # the array keeps the mapping alive


def _no_duplicates(pairs: list) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ParamsError(f"duplicate key {dup!r}")
    return dict(pairs)


def _read_header(buf: np.ndarray, where: str) -> tuple[dict, int]:
    """(header dict, data start) of the safetensors buffer ``buf``."""
    if buf.size < 8:
        raise ParamsError(f"{where}: truncated safetensors file ({buf.size} bytes)")
    (n,) = struct.unpack("<Q", buf[:8].tobytes())
    if n > min(_MAX_HEADER, buf.size - 8):
        raise ParamsError(
            f"{where}: safetensors header size {n} exceeds the file "
            f"({buf.size} bytes) or the {_MAX_HEADER}-byte limit"
        )
    try:
        header = json.loads(
            buf[8 : 8 + n].tobytes().decode("utf-8"), object_pairs_hook=_no_duplicates
        )
    except ParamsError as exc:
        raise ParamsError(f"{where}: safetensors header has a {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ParamsError(f"{where}: safetensors header is not UTF-8 JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ParamsError(f"{where}: safetensors header is not a JSON object")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ParamsError(f"{where}: __metadata__ must map str to str")
    return header, 8 + n


def _entry(name: str, entry: Any, size: int, where: str) -> tuple[np.dtype, tuple, int, int]:
    """(dtype, shape, begin, end) of one header entry, checked against the buffer."""
    at = f"{where}: tensor {name!r}"
    if not isinstance(entry, dict) or set(entry) != _KEYS:
        raise ParamsError(f"{at} has a malformed entry (want keys {sorted(_KEYS)}): {entry!r}")
    dtype = _dtype_of(entry["dtype"], at)
    shape, offs = entry["shape"], entry["data_offsets"]
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ParamsError(f"{at} has a malformed shape {shape!r}")
    if not isinstance(offs, list) or len(offs) != 2 or not all(type(v) is int for v in offs):
        raise ParamsError(f"{at} has malformed data_offsets {offs!r}")
    begin, end = offs
    count = 1
    for d in shape:  # Python ints: no overflow however large the dims
        count *= d
    if not 0 <= begin <= end <= size or end - begin != count * dtype.itemsize:
        raise ParamsError(
            f"{at} range [{begin}, {end}) does not fit its shape {shape} "
            f"{dtype} ({count * dtype.itemsize} bytes) in a {size}-byte buffer"
        )
    return dtype, tuple(shape), begin, end


def _source(source: Any) -> tuple[np.ndarray, str]:
    """(uint8 view, name for messages) of a file path or a bytes-like object."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")  # a typed or multi-dimensional buffer: its bytes
        return np.frombuffer(
            view, dtype=np.uint8
        ), f"<{type(source).__name__} of {view.nbytes} bytes>"
    if not isinstance(source, (str, os.PathLike)):
        raise ParamsError(f"params source must be a path or bytes, not {type(source).__name__}")
    where = os.fspath(source)
    return _map_file(where), where


def params_metadata(source: Any) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file or buffer (``{}`` if none).

    Parameters
    ----------
    source : str, os.PathLike, bytes, bytearray or memoryview
        As for :func:`load_params`; only the header is read.

    Raises
    ------
    ParamsFileError, ParamsError
        As :func:`load_params` for the header.
    """
    buf, where = _source(source)
    header, _ = _read_header(buf, where)
    return dict(header.get("__metadata__", {}))


def load_params(source: Any) -> dict[str, np.ndarray]:
    """Read safetensors: ``{name: read-only ndarray}`` views, no copy.

    Parameters
    ----------
    source : str, os.PathLike, bytes, bytearray or memoryview
        A file (mapped read-only with ``mmap``; the views keep the mapping alive)
        or a buffer holding the file's bytes (viewed in place).

    Returns
    -------
    dict of str -> np.ndarray
        In header order (``__metadata__`` left out). Views lie inside the mapped
        file or the given buffer; a file written by :func:`save_params` gives
        64-byte aligned data.

    Raises
    ------
    ParamsFileError
        Missing or unreadable file.
    ParamsError
        Truncated; header size beyond the file; header not UTF-8 JSON or with
        duplicate keys; unknown dtype; a shape or range that is malformed, outside
        the buffer, not matching its byte size, or overlapping another tensor; a
        BOOL tensor holding bytes other than 0 and 1.
    """
    buf, where = _source(source)
    header, start = _read_header(buf, where)
    data = buf[start:]
    entries = {
        name: _entry(name, e, data.size, where)
        for name, e in header.items()
        if name != "__metadata__"
    }
    _check_overlap(entries, where)
    out = {}
    for name, (dtype, shape, begin, end) in entries.items():
        raw = data[begin:end]
        if dtype == np.bool_ and raw.size and int(raw.max()) > 1:
            raise ParamsError(f"{where}: tensor {name!r} is BOOL but holds bytes other than 0/1")
        arr = raw.view(dtype).reshape(shape)
        arr.flags.writeable = False
        out[name] = arr
    return out


def _check_overlap(entries: dict, where: str) -> None:
    """ParamsError if two non-empty tensors share bytes (the format packs them)."""
    spans = sorted((b, e, n) for n, (_, _, b, e) in entries.items() if e > b)
    for (_, e0, n0), (b1, _, n1) in itertools.pairwise(spans):
        if b1 < e0:
            raise ParamsError(f"{where}: tensors {n0!r} and {n1!r} overlap (at byte {b1})")


def params_blob(graph_json: Mapping, tensors: Mapping[str, Any], base: Any = None) -> np.ndarray:
    """Pack ``tensors`` into a new params blob laid out as ``graph_json["params"]``.

    What ``GraphExecutor.load_params`` does with a loaded file: the factory's blob
    may be a read-only view of the mapped library, so a fresh blob is filled.

    Parameters
    ----------
    graph_json : mapping
        The graph JSON (``params``: name, shape, dtype, offset, nbytes; ``params_bytes``).
    tensors : mapping of str -> array-like
        New values, e.g. :func:`load_params` of a file. Names not in the graph are
        an error; params not given keep their bytes from ``base`` (zeros if None).
    base : np.ndarray of uint8, optional
        The current blob.

    Returns
    -------
    np.ndarray of uint8, 1-D, 64-byte aligned, ``params_bytes`` long.

    Raises
    ------
    ParamsError
        An unknown name, or a tensor whose shape or dtype differs from the graph's.
    """
    specs = {p["name"]: p for p in graph_json.get("params", [])}
    unknown = sorted(set(tensors) - set(specs))
    if unknown:
        raise ParamsError(f"params not in the graph: {unknown[:5]}")
    size = int(graph_json.get("params_bytes", 0))
    raw = np.zeros(size + _ALIGN, np.uint8)
    blob = raw[(-raw.ctypes.data) % _ALIGN :][:size]
    if base is not None:
        blob[: min(size, np.asarray(base).size)] = np.asarray(base).reshape(-1)[:size]
    for name, value in tensors.items():
        spec, arr = specs[name], np.asarray(value)
        want = (tuple(spec["shape"]), np.dtype(spec["dtype"]))
        if (arr.shape, arr.dtype) != want:
            raise ParamsError(
                f"param {name!r}: got {list(arr.shape)} {arr.dtype}, the graph has "
                f"{list(want[0])} {want[1]}"
            )
        off = int(spec["offset"])
        if not 0 <= off <= size - arr.nbytes:
            raise ParamsError(f"param {name!r}: offset {off} lies outside the {size}-byte blob")
        blob[off : off + arr.nbytes] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return blob
