"""The graph IR: typed tensors, nodes, graphs.

Everything after the ONNX frontend works on these three classes:

* :class:`Value` -- a tensor: name, ``shape`` (a tuple of ints and run-time
  :class:`~.symbolic.Dim` s, ``()`` for a scalar), NumPy ``dtype``, and ``const`` (the
  data, when known at compile time; an ``object`` array holding Dims for a shape
  computed from run-time dims, whose ``dtype`` stays the integer type).
* :class:`SeqType` -- what a sequence or optional value holds (``Value.seq``): such a
  value is ONE arena slot, typed ``uint8[slot bytes]`` (``abi/sequences.py`` layout).
* :class:`Node` -- one operator application: ONNX ``op_type`` and ``domain``, the
  ``opset`` version in force for that domain, ``inputs`` (``None`` for an omitted
  optional input), ``outputs``, and ``attrs`` with every schema default filled in.
* :class:`Graph` -- ``inputs``, ``outputs`` and ``nodes`` in topological order, the
  run-time ``symbols`` and the ``specializations`` asked for.

:func:`is_static`, :func:`max_shape` and :func:`nbytes_at_bounds` answer what memory
planning and the code generators ask of a shape that may hold run-time dims.

Attribute values are plain Python: ``int``, ``float``, ``str`` (ONNX bytes decoded as
UTF-8), lists of those, ``np.ndarray`` for TENSOR attributes and :class:`Graph` for
GRAPH attributes (``If`` branches).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import numpy as np

from ..abi.sequences import SeqLayout
from .computed_bounds import numel_hi
from .symbolic import Dim, DimLike, SymbolTable

__all__ = ["Graph", "Node", "SeqType", "Value", "bound_shapes", "is_static", "max_shape",
           "nbytes_at_bounds", "normalize_shape", "shape_array", "shape_size"]

_ids = itertools.count()


@dataclass(eq=False)
class Value:
    """A tensor of the graph.

    Parameters
    ----------
    name : str
        Unique name within the graph (the ONNX value name where there is one).
    shape : tuple of int or Dim
        ``()`` is a scalar. Each dim is an int >= 0 or a run-time :class:`~.symbolic.Dim`.
    dtype : numpy.dtype
        Element type (``float32``, ``int64``, ``bool``...).
    const : numpy.ndarray or None
        The data when it is known at compile time (initializers, ``Constant`` nodes,
        folded subgraphs). ``const.shape == shape`` and ``const.dtype == dtype``, except
        a symbolic shape computation: an ``object`` array of ints and Dims (its
        ``dtype`` the integer type it has at run time).
    seq : SeqType or None
        Set for an ONNX sequence or optional value: ``shape`` is then
        ``(slot bytes,)`` and ``dtype`` ``uint8`` (see :meth:`SeqType.slot`).
    """

    name: str
    shape: tuple[DimLike, ...]
    dtype: np.dtype
    const: np.ndarray | None = None
    uid: int = field(default_factory=lambda: next(_ids))
    seq: "SeqType | None" = None

    def __post_init__(self) -> None:
        self.shape = normalize_shape(self.shape)
        self.dtype = np.dtype(self.dtype)

    @property
    def is_const(self) -> bool:
        """True when the data is known at compile time."""
        return self.const is not None

    @property
    def is_symbolic_const(self) -> bool:
        """True for a constant computed from run-time dims (an ``object`` array)."""
        return self.const is not None and self.const.dtype == object

    @property
    def size(self) -> DimLike:
        """Number of elements (a Dim when the shape has run-time dims)."""
        return shape_size(self.shape)

    @property
    def nbytes(self) -> DimLike:
        """Size of the data in bytes (a Dim when the shape has run-time dims; see
        :func:`nbytes_at_bounds`)."""
        return self.size * self.dtype.itemsize

    @classmethod
    def constant(cls, name: str, array: np.ndarray) -> "Value":
        """A constant value holding ``array`` (kept as given, made C-contiguous)."""
        # np.ascontiguousarray would turn a 0-d scalar into shape (1,)
        array = np.asarray(array)
        if not array.flags.c_contiguous:
            array = array.copy(order="C")
        return cls(name, array.shape, array.dtype, array)

    def __repr__(self) -> str:
        kind = "const " if self.is_const else ""
        return f"Value({self.name!r}, {kind}{self.dtype}{list(self.shape)})"


@dataclass(frozen=True)
class SeqType:
    """What an ONNX ``sequence`` / ``optional`` value holds, known at compile time.

    The value is one arena slot laid out as ``abi/sequences.py`` documents (count,
    per-element shape records, elements at a fixed stride); C kernels read the count
    and the shapes at run time, so elements of one sequence may differ in shape.

    Parameters
    ----------
    kind : str
        ``"sequence"``, ``"optional_tensor"`` or ``"optional_sequence"``.
    elem_dtype : numpy.dtype
        Element type of the tensors.
    capacity : int
        Most elements the slot holds (1 for an optional tensor).
    elem_max : tuple of int
        Each element dim's largest size; its length is the elements' rank.
    shapes : tuple of tuple of int, optional
        Each element's shape, when the count and every shape are known at compile
        time (a SequenceConstruct of static tensors, a SplitToSequence...); ``None``
        when they are known only at run time (a sequence carried by a Loop).
    present : bool, optional
        For an optional: whether it holds a value, when known at compile time.
    mixed : bool
        Elements of several ranks (at most ``len(elem_max)``; dims left-aligned, a
        missing dim counted as 1 in ``elem_max``): ops that take an element out as a
        tensor refuse such a sequence.
    """

    kind: str
    elem_dtype: np.dtype
    capacity: int
    elem_max: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...] | None = None
    present: bool | None = None
    mixed: bool = False

    @property
    def rank(self) -> int:
        """Rank of every element (with ``mixed``: the largest)."""
        return len(self.elem_max)

    @property
    def count(self) -> int | None:
        """Number of elements when known at compile time, else None."""
        return None if self.shapes is None else len(self.shapes)

    @property
    def layout(self) -> SeqLayout:
        """The slot's byte layout."""
        return SeqLayout(self.capacity, self.rank, tuple(self.elem_max),
                         np.dtype(self.elem_dtype).itemsize, self.mixed)

    def slot(self) -> tuple[tuple[int], np.dtype]:
        """``(shape, dtype)`` of the value holding it: ``((slot bytes,), uint8)``; what
        an op's ``infer`` returns for a sequence output (after setting ``Value.seq``)."""
        return (self.layout.nbytes,), np.dtype(np.uint8)

    @staticmethod
    def of_shapes(kind: str, dtype: Any, shapes, capacity: int | None = None,
                  present: bool | None = None) -> "SeqType":
        """The SeqType of elements of the static ``shapes`` (capacity: their count,
        unless given larger; ``mixed`` when their ranks differ).

        Raises
        ------
        ValueError
            A capacity below the count.
        """
        shapes = tuple(tuple(int(d) for d in s) for s in shapes)
        cap = len(shapes) if capacity is None else capacity
        if cap < len(shapes):
            raise ValueError(f"capacity {cap} below {len(shapes)} elements")
        mixed = len({len(s) for s in shapes}) > 1
        return SeqType(kind, np.dtype(dtype), cap, bound_shapes(shapes), shapes, present, mixed)

    def join(self, other: "SeqType") -> "SeqType":
        """A SeqType able to hold either (the output of an If whose branches give these):
        the larger capacity and element bounds; shapes kept where they agree.

        Raises
        ------
        ValueError
            Different kinds or element types.
        """
        if (self.kind, np.dtype(self.elem_dtype)) != (other.kind, np.dtype(other.elem_dtype)):
            raise ValueError(f"{self.kind} of {self.elem_dtype} vs {other.kind} of "
                             f"{other.elem_dtype}")
        both = self.capacity and other.capacity
        elem_max = (bound_shapes([self.elem_max, other.elem_max]) if both
                    else (self.elem_max if self.capacity else other.elem_max))
        mixed = self.mixed or other.mixed or bool(both and self.rank != other.rank)
        return SeqType(self.kind, self.elem_dtype, max(self.capacity, other.capacity), elem_max,
                       self.shapes if self.shapes == other.shapes else None,
                       self.present if self.present == other.present else None, mixed)


def bound_shapes(shapes) -> tuple[int, ...]:
    """Each dim's largest size over static ``shapes`` of any ranks, left-aligned, a dim
    a shape lacks counted as 1 (so the product bounds every shape's element count)."""
    rank = max((len(s) for s in shapes), default=0)
    return tuple(max(int(s[a]) if a < len(s) else 1 for s in shapes) for a in range(rank))


def normalize_shape(shape) -> tuple[DimLike, ...]:
    """``shape`` as a tuple of Python ints and Dims (NumPy integers converted)."""
    return tuple(d if isinstance(d, Dim) else int(d) for d in shape)


def is_static(shape) -> bool:
    """True when every dim of ``shape`` is an int."""
    return not any(isinstance(d, Dim) for d in shape)


def shape_size(shape) -> DimLike:
    """Product of the dims (an int, or a Dim when one is a run-time dim)."""
    n: DimLike = 1
    for d in shape:
        n = n * d
    return n


def shape_array(shape) -> np.ndarray:
    """``shape`` as the data of a shape tensor: ``int64``, or an ``object`` array holding
    its run-time Dims (a symbolic constant, see ``passes/node_eval.make_const``)."""
    out = np.empty(len(shape), dtype=np.int64 if is_static(shape) else object)
    out[:] = list(shape)
    return out


def max_shape(shape) -> tuple[int, ...]:
    """``shape`` with each run-time dim at its upper bound (:attr:`Dim.hi`)."""
    return tuple(d.hi if isinstance(d, Dim) else int(d) for d in shape)


def nbytes_at_bounds(value: "Value") -> int:
    """Bytes of ``value`` at the upper bounds of its run-time dims: the size of its
    arena slot. Equal to ``value.nbytes`` for a static shape; jointly bounded computed
    dims (a Reshape to a run-time shape, :mod:`.computed_bounds`) count at their cap."""
    return numel_hi(value.shape) * value.dtype.itemsize


@dataclass(eq=False)
class Node:
    """One operator application.

    Parameters
    ----------
    op_type : str
        ONNX operator type (``"Conv"``) or a monolib-internal one.
    name : str
        Node name, unique in the graph (the ONNX node name, or a made-up one).
    inputs : list of Value or None
        Positional inputs; ``None`` marks an omitted optional input.
    outputs : list of Value
        Positional outputs.
    attrs : dict
        Attributes, with schema defaults filled in by the frontend.
    domain : str
        ONNX domain, ``""`` for the default ``ai.onnx``.
    opset : int
        The model's opset version for ``domain``.
    """

    op_type: str
    name: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    domain: str = ""
    opset: int = 17

    def input(self, i: int) -> Value | None:
        """Input ``i``, or ``None`` when it is omitted or past the end."""
        return self.inputs[i] if i < len(self.inputs) else None

    def __repr__(self) -> str:
        ins = ", ".join(v.name if v is not None else "-" for v in self.inputs)
        outs = ", ".join(v.name for v in self.outputs)
        return f"Node({self.op_type} {self.name!r}: ({ins}) -> ({outs}))"


@dataclass(eq=False)
class Graph:
    """A graph: inputs, outputs, nodes in topological order.

    Values are shared objects: a node's input *is* the producing node's output
    ``Value``. Rewiring a consumer means replacing the object in its ``inputs``.
    """

    name: str
    inputs: list[Value]
    outputs: list[Value]
    nodes: list[Node]
    metadata: dict[str, str] = field(default_factory=dict)
    #: the run-time dims of the inputs, in the order the arena holds their values
    symbols: SymbolTable = field(default_factory=SymbolTable)
    #: ``opt_shapes`` as ``{symbol name: value}`` per specialization
    specializations: list[dict[str, int]] = field(default_factory=list)
    #: the static graphs compiled for them (``pipeline.Specialized``), once prepared
    specialized: list = field(default_factory=list)

    def producers(self) -> dict[int, Node]:
        """Map ``Value.uid`` -> the node that produces it."""
        return {v.uid: n for n in self.nodes for v in n.outputs}

    def consumers(self) -> dict[int, list[Node]]:
        """Map ``Value.uid`` -> the nodes that read it (each node once)."""
        out: dict[int, list[Node]] = {}
        for n in self.nodes:
            seen: set[int] = set()
            for v in n.inputs:
                if v is not None and v.uid not in seen:
                    seen.add(v.uid)
                    out.setdefault(v.uid, []).append(n)
        return out

    def values(self) -> Iterator[Value]:
        """Every distinct value: graph inputs, node inputs and outputs."""
        seen: set[int] = set()
        for v in itertools.chain(
            self.inputs, (x for n in self.nodes for x in (*n.inputs, *n.outputs)), self.outputs
        ):
            if v is not None and v.uid not in seen:
                seen.add(v.uid)
                yield v

    def replace_uses(self, old: Value, new: Value, nodes: Iterable[Node] | None = None) -> None:
        """Make every reader of ``old`` (and the graph outputs) read ``new``."""
        for n in self.nodes if nodes is None else nodes:
            n.inputs = [new if v is old else v for v in n.inputs]
        self.outputs = [new if v is old else v for v in self.outputs]

    def op_counts(self) -> dict[str, int]:
        """How many nodes of each op type."""
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        return counts
