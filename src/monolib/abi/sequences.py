"""ONNX sequences and optionals in the arena: the slot layout both sides read.

A sequence (``seq(tensor(T))``), an optional tensor and an optional sequence each live
in ONE arena slot of a size fixed at compile time (docs/ARCHITECTURE.md, "Sequences
and optionals")::

    int64  count                 elements held; -1: an empty optional (None)
    int64  shapes[capacity][1 + rank]   each element's record: its rank r, then its
                                  r dims (the rest unused)
    (pad to 64)
    T      data[capacity][stride / itemsize]   element k at data_offset + k * stride,
                                  contiguous row-major at its actual shape

``capacity`` (most elements), ``rank`` (every element's, or with ``mixed`` the
largest) and ``elem_max`` (each dim's largest size, counting a dim an element lacks as
1; an element's bytes never exceed ``prod(elem_max) * itemsize``) are compile-time
facts. An optional tensor is the same layout with capacity 1 (count 1:
present). The compiler writes a slot's description in the graph JSON entry of a
sequence/optional input or output as ``"sequence"`` (:func:`spec_entry`); the runtime
reads it back with :func:`spec_of` and packs/unpacks Python values with :func:`pack`
and :func:`unpack`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from ..errors import ContainerError, InputError

__all__ = ["KINDS", "SeqLayout", "SeqSpec", "pack", "spec_entry", "spec_of", "unpack"]

logger = logging.getLogger(__name__)

#: what a slot holds, as the graph JSON names it
KINDS = ("sequence", "optional_tensor", "optional_sequence")

_ALIGN = 64


def _align(n: int) -> int:
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class SeqLayout(NamedTuple):
    """Byte layout of a sequence slot (see the module docstring).

    Parameters
    ----------
    capacity : int
        Most elements the slot holds (>= 0).
    rank : int
        Rank of every element.
    elem_max : tuple of int
        Largest size of each element dim (``len == rank``).
    itemsize : int
        Bytes per element value.
    mixed : bool
        Elements of several ranks (up to ``rank``), their dims left-aligned.
    """

    capacity: int
    rank: int
    elem_max: tuple[int, ...]
    itemsize: int
    mixed: bool = False

    @property
    def shapes_offset(self) -> int:
        """Byte offset of the records ``int64 shapes[capacity][1 + rank]``."""
        return 8

    @property
    def data_offset(self) -> int:
        """Byte offset of element 0's data (64-byte aligned)."""
        return _align(8 + 8 * self.capacity * (1 + self.rank))

    @property
    def stride(self) -> int:
        """Bytes from one element's data to the next (64-byte aligned)."""
        return _align(math.prod(self.elem_max) * self.itemsize)

    @property
    def nbytes(self) -> int:
        """Bytes of the whole slot."""
        return self.data_offset + self.capacity * self.stride


class SeqSpec(NamedTuple):
    """What a sequence/optional graph input or output holds (its graph JSON
    ``"sequence"`` entry).

    Parameters
    ----------
    kind : str
        One of :data:`KINDS`.
    dtype : numpy.dtype
        Element type of the tensors.
    layout : SeqLayout
        The slot's layout.
    shapes : tuple of tuple of int, optional
        The element shapes the library was compiled for, when exact (an input given
        ``shapes={"x": [(2, 3), (4, 3)]}``): ``pack`` then takes exactly these.
    """

    kind: str
    dtype: np.dtype
    layout: SeqLayout
    shapes: tuple[tuple[int, ...], ...] | None = None


def spec_entry(spec: SeqSpec) -> dict[str, Any]:
    """The graph JSON ``"sequence"`` value of ``spec``."""
    lay = spec.layout
    out = {"kind": spec.kind, "dtype": np.dtype(spec.dtype).name, "capacity": lay.capacity,
           "rank": lay.rank, "elem_max": list(lay.elem_max)}
    if lay.mixed:
        out["mixed"] = True
    if spec.shapes is not None:
        out["shapes"] = [list(s) for s in spec.shapes]
    return out


def spec_of(entry: Mapping[str, Any], slot_nbytes: int) -> SeqSpec | None:
    """The :class:`SeqSpec` of an ``inputs``/``outputs`` entry; None for a tensor.

    Raises
    ------
    ContainerError
        A malformed ``"sequence"`` value, or a layout larger than the entry's slot.
    """
    raw = entry.get("sequence")
    if raw is None:
        return None
    try:
        kind = str(raw["kind"])
        dtype = np.dtype(raw["dtype"])
        cap, rank = int(raw["capacity"]), int(raw["rank"])
        elem_max = tuple(int(d) for d in raw["elem_max"])
        mixed = bool(raw.get("mixed", False))
        shapes = raw.get("shapes")
        shapes = None if shapes is None else tuple(tuple(int(d) for d in x) for x in shapes)
    except (KeyError, TypeError, ValueError) as exc:
        raise ContainerError(f"graph JSON: malformed sequence entry {raw!r:.200} ({exc})") from None
    if kind not in KINDS or cap < 0 or rank != len(elem_max) or min(elem_max, default=0) < 0:
        raise ContainerError(f"graph JSON: malformed sequence entry {raw!r:.200}")
    layout = SeqLayout(cap, rank, elem_max, dtype.itemsize, mixed)
    if layout.nbytes > slot_nbytes:
        raise ContainerError(
            f"graph JSON: sequence {entry.get('name')!r} needs {layout.nbytes} bytes, its "
            f"slot has {slot_nbytes}"
        )
    if shapes is not None and (len(shapes) > cap or any(
            not _fits(x, layout) for x in shapes)):
        raise ContainerError(f"graph JSON: sequence shapes {raw!r:.200} exceed its bounds")
    return SeqSpec(kind, dtype, layout, shapes)


def _check_element(name: str, k: int, arr: np.ndarray, spec: SeqSpec) -> None:
    lay = spec.layout
    if arr.dtype != spec.dtype:
        raise InputError(f"input {name!r} element {k} has dtype {arr.dtype}, the model "
                         f"expects {spec.dtype}")
    if not _fits(arr.shape, lay):
        ranks = f"rank <= {lay.rank}" if lay.mixed else f"rank {lay.rank}"
        raise InputError(
            f"input {name!r} element {k} has shape {list(arr.shape)}; the model takes "
            f"{ranks} elements of at most {list(lay.elem_max)}")


def _fits(shape, lay: SeqLayout) -> bool:
    """Whether an element of ``shape`` fits the layout's rank and bounds."""
    if len(shape) > lay.rank or (len(shape) < lay.rank and not lay.mixed):
        return False
    return all(0 <= d <= m for d, m in zip(shape, lay.elem_max))


def pack(spec: SeqSpec, value: Any, name: str, out: np.ndarray) -> None:
    """Write ``value`` into the slot bytes ``out`` (uint8, the slot's size).

    ``value`` is a list of arrays for a sequence; an array or None for an optional
    tensor; a list or None for an optional sequence.

    Raises
    ------
    InputError
        The wrong Python type for the kind, more elements than the capacity, an element
        of another dtype, rank, or larger than ``elem_max``; element shapes other than
        ``spec.shapes`` where the library was compiled for exact ones.
    """
    lay = spec.layout
    if value is None:
        if spec.kind == "sequence":
            raise InputError(f"input {name!r} is a sequence: give a list of arrays, not None")
        out[:8].view(np.int64)[0] = -1
        return
    if spec.kind == "optional_tensor":
        items = [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise InputError(f"input {name!r} is a {spec.kind}: give a list of arrays, "
                         f"not {type(value).__name__}")
    if len(items) > lay.capacity:
        raise InputError(f"input {name!r} has {len(items)} elements; the model was compiled "
                         f"for at most {lay.capacity}")
    arrays = [np.asarray(a) for a in items]
    for k, arr in enumerate(arrays):
        _check_element(name, k, arr, spec)
    if spec.shapes is not None and tuple(a.shape for a in arrays) != spec.shapes:
        raise InputError(f"input {name!r} has element shapes {[list(a.shape) for a in arrays]}"
                         f"; the model was compiled for exactly {[list(x) for x in spec.shapes]}")
    out[:8].view(np.int64)[0] = len(arrays)
    records = out[8:8 + 8 * lay.capacity * (1 + lay.rank)].view(np.int64)
    records = records.reshape(-1, 1 + lay.rank)
    for k, arr in enumerate(arrays):
        records[k, 0] = arr.ndim
        records[k, 1:1 + arr.ndim] = arr.shape
    for k, arr in enumerate(arrays):
        start = lay.data_offset + k * lay.stride
        dst = out[start:start + arr.nbytes].view(spec.dtype).reshape(arr.shape)
        np.copyto(dst, arr)


def unpack(spec: SeqSpec, data: np.ndarray, name: str) -> Any:
    """The Python value of a slot: a list of arrays (copies) for a sequence, an array
    or None for an optional tensor, a list or None for an optional sequence.

    Raises
    ------
    ContainerError
        A count or element shape the library wrote that does not fit the slot.
    """
    lay = spec.layout
    count = int(data[:8].view(np.int64)[0])
    if count < 0 and spec.kind != "sequence":
        return None
    if not 0 <= count <= lay.capacity:
        raise ContainerError(f"output {name!r}: count {count} outside 0..{lay.capacity}")
    records = data[8:8 + 8 * lay.capacity * (1 + lay.rank)].view(np.int64)
    records = records.reshape(-1, 1 + lay.rank)
    items: list[np.ndarray] = []
    for k in range(count):
        rank = int(records[k, 0])
        shape = tuple(int(d) for d in records[k, 1:1 + max(rank, 0)])
        if not 0 <= rank <= lay.rank or not _fits(shape, lay):
            raise ContainerError(f"output {name!r} element {k}: shape {list(shape)} exceeds "
                                 f"{list(lay.elem_max)}")
        start = lay.data_offset + k * lay.stride
        nbytes = math.prod(shape) * spec.dtype.itemsize
        items.append(data[start:start + nbytes].view(spec.dtype).reshape(shape).copy())
    if spec.kind == "optional_tensor":
        return items[0] if items else None
    return items
