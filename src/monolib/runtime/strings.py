"""String tensors at the boundary: NumPy text arrays <-> fixed-width UTF-8 slots.

A string tensor lives in the arena as NumPy's fixed-width bytes type ``S<n>``: each
element ``n`` bytes of UTF-8, NUL padded (the graph JSON's dtype ``"S<n>"``,
docs/ARCHITECTURE.md "The graph JSON"). ``n`` is fixed when the model is compiled, so
memory planning and the arena ABI are those of any other tensor. NumPy drops trailing
NUL bytes of an ``S`` element: a string ending in ``"\\0"`` reads back without them.

``set_input`` takes ``str`` (``U``), ``bytes`` (``S``) and ``object`` arrays of either
(what ONNX Runtime and ONNX's test data use) and encodes them (:func:`to_utf8`);
``get_output`` returns an ``object`` array of ``str``, as ONNX Runtime does
(:func:`from_utf8`).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ..errors import InputError

__all__ = ["encode_input", "from_utf8", "to_utf8"]

logger = logging.getLogger(__name__)


def _utf8(x: Any) -> bytes:
    if isinstance(x, (bytes, np.bytes_)):
        return bytes(x)
    if isinstance(x, str):
        return x.encode("utf-8")
    raise TypeError(f"element {x!r:.40} is neither str nor bytes")


def to_utf8(value: Any, width: int | None = None) -> np.ndarray:
    """``value`` as an ``S<width>`` array (UTF-8).

    Parameters
    ----------
    value : array-like of str or bytes
        A ``U``, ``S`` or ``object`` array (of ``str``/``bytes``), a list, a scalar.
    width : int, optional
        Bytes per element; None: the longest element's (at least 1).

    Returns
    -------
    numpy.ndarray
        dtype ``S<width>``, ``value``'s shape. Elements longer than ``width`` are NOT
        checked here: see :func:`encode_input`.

    Raises
    ------
    TypeError
        An element is neither ``str`` nor ``bytes``.
    """
    arr = np.asarray(value, dtype=object if not isinstance(value, np.ndarray) else None)
    if arr.dtype.kind == "S" and (width is None or width == arr.dtype.itemsize):
        return arr
    items = arr.reshape(-1).tolist()
    try:  # the common case, all str: one comprehension (~0.3 us an element)
        flat = [x.encode("utf-8") for x in items]
    except AttributeError:  # bytes among them
        flat = [_utf8(x) for x in items]
    if width is None:
        width = max(1, max(map(len, flat), default=1))
    return np.array(flat, dtype=f"S{width}").reshape(arr.shape)


def encode_input(value: Any, name: str, width: int) -> np.ndarray:
    """A graph input's string array, encoded for its ``S<width>`` slot.

    Raises
    ------
    InputError
        ``value`` holds something other than text (named), or an element's UTF-8 is
        longer than ``width`` (the input, the element's index and its length named).
    """
    if isinstance(value, np.ndarray) and value.dtype.kind not in "OUS":
        raise InputError(
            f"input {name!r} is a string tensor (S{width}: {width} bytes of UTF-8 per "
            f"element); got a {value.dtype} array"
        )
    try:
        arr = to_utf8(value)
    except TypeError as exc:
        raise InputError(f"input {name!r} is a string tensor: {exc}") from None
    if arr.dtype.itemsize > width:
        lengths = np.char.str_len(arr).reshape(-1)
        i = int(np.argmax(lengths > width))
        index = tuple(int(k) for k in np.unravel_index(i, arr.shape)) if arr.ndim else ()
        raise InputError(
            f"input {name!r}: element {list(index)} is {int(lengths[i])} bytes of UTF-8, "
            f"longer than the {width} bytes per element the model was compiled with "
            f"(compile with a larger width: shapes={{{name!r}: {{'width': ...}}}})"
        )
    return arr.astype(f"S{width}")


def from_utf8(arr: np.ndarray) -> np.ndarray:
    """An ``S<n>`` array as an ``object`` array of ``str`` (ONNX Runtime's output
    type); bytes that are no valid UTF-8 become U+FFFD."""
    items = [b.decode("utf-8", "replace") for b in arr.reshape(-1).tolist()]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(arr.shape)
