"""Params on their own: the safetensors format, read zero-copy (NumPy only).

The separate-artifact path (graph JSON + library + params file, TVM's
``graph_executor.create``) stores params as **safetensors**
(https://huggingface.co/docs/safetensors, format spec in its README): a little-endian
u64 header size ``N``, ``N`` bytes of UTF-8 JSON ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {str: str}}``, then the byte buffer;
offsets are relative to the buffer. :func:`load_params` maps the file and returns
read-only views (no copy); every range is checked first.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from .errors import ContainerError, LibraryLoadError

__all__ = ["SAFETENSORS_DTYPES", "load_params", "save_params"]

logger = logging.getLogger(__name__)

#: safetensors dtype code -> NumPy dtype (little endian)
SAFETENSORS_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
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
_CODES = {np.dtype(v): k for k, v in SAFETENSORS_DTYPES.items()}
# The buffer starts 64-byte aligned (the header is padded with spaces; the format asks
# for 8); tensors follow each other with no gaps, as the format requires.
_ALIGN = 64
_MAX_HEADER = 100 << 20


def save_params(
    path: str, params: Mapping[str, Any], metadata: Mapping[str, str] | None = None
) -> str:
    """Write ``{name: array}`` to ``path`` as safetensors (atomically).

    Parameters
    ----------
    path : str
        Output file (conventionally ``*.safetensors``).
    params : mapping of str -> array-like
        Tensors; dtypes must be among :data:`SAFETENSORS_DTYPES`.
    metadata : mapping of str -> str, optional
        Stored under ``"__metadata__"``.

    Raises
    ------
    ContainerError
        A dtype safetensors cannot represent.
    """
    arrays = {k: np.ascontiguousarray(v) for k, v in params.items()}
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    pos = 0
    for name, arr in arrays.items():
        code = _CODES.get(arr.dtype.newbyteorder("<") if arr.dtype.byteorder == ">" else arr.dtype)
        if code is None:
            raise ContainerError(f"param {name!r}: dtype {arr.dtype} has no safetensors code")
        header[name] = {
            "dtype": code,
            "shape": list(arr.shape),
            "data_offsets": [pos, pos + arr.nbytes],
        }
        pos += arr.nbytes
    blob = json.dumps(header, separators=(",", ":")).encode("utf-8")
    blob += b" " * ((-(8 + len(blob))) % _ALIGN)  # so the buffer starts aligned
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)) + blob)
            for name, arr in arrays.items():
                f.seek(8 + len(blob) + header[name]["data_offsets"][0])
                f.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())
            f.truncate(8 + len(blob) + pos)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def load_params(path: str) -> dict[str, np.ndarray]:
    """Read a safetensors file: ``{name: read-only ndarray}`` views of the mapped file.

    Raises
    ------
    LibraryLoadError
        Missing or unreadable file.
    ContainerError
        Truncated, malformed header, unknown dtype, or a range outside the buffer or
        not matching its shape.
    """
    try:
        mm = np.memmap(path, dtype=np.uint8, mode="r")
    except (OSError, ValueError) as exc:
        raise LibraryLoadError(f"{path}: cannot map params file: {exc}") from None
    if mm.size < 8:
        raise ContainerError(f"{path}: truncated safetensors file ({mm.size} bytes)")
    (n,) = struct.unpack("<Q", bytes(mm[:8]))
    if n > min(_MAX_HEADER, mm.size - 8):
        raise ContainerError(f"{path}: safetensors header size {n} exceeds the file")
    try:
        header = json.loads(bytes(mm[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ContainerError(f"{path}: safetensors header is not UTF-8 JSON: {exc}") from None
    buf = mm[8 + n :]
    out = {}
    for name, entry in header.items():
        if name != "__metadata__":
            out[name] = _view(buf, name, entry, path)
    return out


def _view(buf: np.ndarray, name: str, entry: Any, path: str) -> np.ndarray:
    try:
        dtype = np.dtype(SAFETENSORS_DTYPES[entry["dtype"]])
        shape = tuple(int(d) for d in entry["shape"])
        begin, end = (int(v) for v in entry["data_offsets"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ContainerError(f"{path}: tensor {name!r} has a malformed entry ({exc!r})") from None
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if not 0 <= begin <= end <= buf.size or end - begin != nbytes:
        raise ContainerError(
            f"{path}: tensor {name!r} range [{begin}, {end}) does not fit "
            f"its shape {list(shape)} {dtype} in a {buf.size}-byte buffer"
        )
    arr = buf[begin:end].view(dtype).reshape(shape)
    arr.flags.writeable = False
    return arr
