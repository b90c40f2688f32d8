"""Operator fusion: group the graph's nodes into *fused ops*, one C function each.

A fused op is an **anchor** node followed by a **chain** of elementwise nodes
(``OpDef.elementwise``) of the same output shape. Each chain node reads values of the
group (the anchor's output 0 or earlier chain outputs, at any input positions) plus
*side inputs* (constants or other values broadcast to that shape). The chain may be a
DAG (``x * HardSigmoid(x)``: the anchor's output feeds two chain nodes); it is cut to
the longest prefix, in topological order, where every group value but the last node's
output has all its readers inside the group and is not a graph output, so the
intermediates never need storage.

* The anchor is an elementwise node: the whole chain becomes ONE loop (kind
  ``"elementwise"``), the expressions of the nodes composed.
* The anchor accepts an epilogue (``OpDef.epilogue_groups(node)`` is not None, e.g. Conv):
  the chain runs in place on the anchor's output as a tile epilogue (kind ``"op"``). A
  side input then must fit the anchor's ``[B, M, N]`` view: on each group of output dims
  it is either broadcast on all of them or full on all of them with row-major strides.
* ``OpDef.alias`` nodes (Reshape, Squeeze...) become kind ``"alias"``: no code, the
  output shares the storage of input 0.
* A ``Concat`` whose inputs are each one contiguous block of its output (every output
  dim before the axis is 1) becomes kind ``"concat"``: no code, each input is computed
  in place inside the output (the memory plan places it at its byte offset), when every
  input is a fresh intermediate (not a constant, a graph input or output, an alias, or a
  member of another concat).
* Graph outputs that are constants, graph inputs, or share storage with an earlier graph
  output get a ``"copy"`` op writing a fresh value (``Fusion.outputs``), so every graph
  output has its own region of the arena.

This is an analysis: the graph itself is left unchanged. The idea of anchoring an
elementwise epilogue on a "complex-out-fusable" op follows TVM's FuseOps pass (facts
carry over, code does not).
"""

from __future__ import annotations

import heapq
import itertools
import logging
from dataclasses import dataclass, field

from ...errors import CompileError
from ..ir import Graph, Node, Value, is_static
from ..ops.base import OpDef, op_of
from ..symbolic import SymbolTable, is_one, same, same_shape
from .computed_symbols import writes_computed

__all__ = [
    "MAX_BAKED_ELEMENTS",
    "ChainStep",
    "FusedOp",
    "Fusion",
    "broadcast_strides",
    "fuse_elementwise",
    "group_strides",
    "is_scalar_const",
]

logger = logging.getLogger(__name__)

#: Largest non-scalar constant side input an epilogue of a non-elementwise anchor takes
#: (it is baked into the C source as a static array; bigger ones stay unfused).
MAX_BAKED_ELEMENTS = 1 << 12


@dataclass(eq=False)
class ChainStep:
    """One elementwise node of a chain.

    ``positions`` are the input positions that read a value of the group (empty for the
    head of an elementwise chain, whose inputs are all leaves).
    """

    node: Node
    op: OpDef
    positions: tuple[int, ...]

    def side_inputs(self) -> list[Value]:
        """The inputs that are not group values (omitted inputs skipped)."""
        return [
            v for i, v in enumerate(self.node.inputs) if v is not None and i not in self.positions
        ]


@dataclass(eq=False)
class FusedOp:
    """A group of nodes that becomes one C function (or no code: ``alias``).

    Attributes
    ----------
    kind : {"op", "elementwise", "alias", "concat", "copy", "band"}
        ``band``: ops of kind ``op`` run together by bands of rows (``parts``; made by
        :func:`~.conv_bands.fuse_conv_bands` for the C backend), the first's output
        never stored.
    anchor : Node or None
        The first node (``None`` for ``copy``; a band's first part's anchor).
    steps : list of ChainStep
        The elementwise nodes; for ``elementwise`` ``steps[0]`` is the anchor itself.
    out : Value
        The final value of output 0 (chain end, or the anchor's output 0; the copy's
        destination).
    src : Value or None
        The source of an ``alias`` or ``copy``.
    parts : list of FusedOp
        A band's ops in run order (its ``out`` is the last one's).
    """

    kind: str
    anchor: Node | None
    steps: list[ChainStep] = field(default_factory=list)
    out: Value | None = None
    src: Value | None = None
    parts: list[FusedOp] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.anchor.name if self.anchor is not None else f"copy_{self.out.name}"

    @property
    def op_type(self) -> str:
        return self.anchor.op_type if self.anchor is not None else "Copy"

    @property
    def fused_types(self) -> list[str]:
        """Op types of the chain nodes after the anchor."""
        if self.kind == "band":
            return [t for p in self.parts for t in [p.op_type, *p.fused_types]][1:]
        steps = self.steps[1:] if self.kind == "elementwise" else self.steps
        return [s.node.op_type for s in steps]

    @property
    def nodes(self) -> list[Node]:
        """Every graph node of the group, in order."""
        if self.kind == "band":
            return [n for p in self.parts for n in p.nodes]
        head = [] if self.kind in ("elementwise", "copy") else [self.anchor]
        return head + [s.node for s in self.steps]

    @property
    def has_code(self) -> bool:
        """False for ops that only share storage (``alias``, ``concat``)."""
        return self.kind not in ("alias", "concat")

    def reads(self) -> list[Value]:
        """Values the op reads (distinct, in order)."""
        if self.kind == "band":  # not what one part makes for the next
            made = {v.uid for p in self.parts for v in p.writes()}
            return _distinct(v for p in self.parts for v in p.reads() if v.uid not in made)
        if self.kind in ("alias", "copy"):
            vals = [self.src]
        elif self.kind == "concat":
            vals = list(self.anchor.inputs)
        else:
            head = [] if self.kind == "elementwise" else list(self.anchor.inputs)
            vals = head + [v for s in self.steps for v in s.side_inputs()]
        return _distinct(v for v in vals if v is not None)

    def writes(self) -> list[Value]:
        """Values the op writes: the final value, then the anchor's other outputs."""
        if self.kind == "band":
            return self.parts[-1].writes()
        rest = list(self.anchor.outputs[1:]) if self.kind == "op" else []
        return [self.out, *rest]


@dataclass
class Fusion:
    """The result of :func:`fuse_elementwise`: fused ops in run order, the graph inputs
    and the graph outputs (copy destinations where a copy was needed)."""

    ops: list[FusedOp]
    inputs: list[Value]
    outputs: list[Value]
    #: the graph's run-time dims (their values sit at the start of the arena)
    symbols: SymbolTable = field(default_factory=SymbolTable)
    #: uids of values the C backend stores channel-blocked (``backends/c/layout.py``)
    blocked: frozenset[int] = frozenset()


def _distinct(values) -> list[Value]:
    seen: set[int] = set()
    out = []
    for v in values:
        if v.uid not in seen:
            seen.add(v.uid)
            out.append(v)
    return out


def is_scalar_const(v: Value) -> bool:
    """A constant with one element: it becomes a C literal."""
    return v.is_const and not v.is_symbolic_const and same(v.size, 1)


def broadcast_strides(shape, out_shape) -> list[int]:
    """Element strides of a C-contiguous tensor of ``shape`` broadcast (numpy rules) to
    ``out_shape``: one per output dim, 0 where the tensor is broadcast or the dim is 1.
    A run-time dim is never broadcast (:func:`~..symbolic.is_one`): it must be the same
    expression in ``shape`` and ``out_shape``; its strides are C expressions' Dims.

    Raises
    ------
    CompileError
        When ``shape`` does not broadcast to ``out_shape``.
    """
    shape, out_shape = tuple(shape), tuple(out_shape)
    if len(shape) > len(out_shape):
        raise CompileError(f"shape {list(shape)} does not broadcast to {list(out_shape)}")
    pad = (1,) * (len(out_shape) - len(shape)) + shape
    strides = [0] * len(out_shape)
    step = 1
    for d in reversed(range(len(out_shape))):
        if same(pad[d], out_shape[d]) and not is_one(pad[d]):
            strides[d] = step
        elif not is_one(pad[d]):
            raise CompileError(f"shape {list(shape)} does not broadcast to {list(out_shape)}")
        step *= pad[d]
    return strides


def group_strides(strides, out_shape, groups) -> tuple[int, int, int] | None:
    """Per-group element stride of a side input in the ``[B, M, N]`` view.

    For each group, 0 when the input is broadcast on every dim of the group; the stride
    of the group's last non-unit dim when it is full on every dim with row-major
    strides; otherwise the input does not fit and ``None`` is returned. Output dims left
    out of the groups must have size 1.
    """
    covered = {d for g in groups for d in g}
    if any(not is_one(out_shape[d]) for d in range(len(out_shape)) if d not in covered):
        return None
    result = []
    for g in groups:
        dims = [d for d in g if not is_one(out_shape[d])]
        if not dims or all(same(strides[d], 0) for d in dims):
            result.append(0)
            continue
        if any(same(strides[d], 0) for d in dims):
            return None
        for a, b in itertools.pairwise(dims):
            if not same(strides[a], strides[b] * out_shape[b]):
                return None
        result.append(strides[dims[-1]])
    return tuple(result)


def _broadcasts(node: Node) -> bool:
    """Every given input broadcasts to output 0 (not so for e.g. CastLike's type donor);
    otherwise the node is emitted on its own by its op's ``emit``."""
    if len(node.outputs) != 1:
        return False
    try:
        for v in node.inputs:
            if v is not None:
                broadcast_strides(v.shape, node.outputs[0].shape)
    except CompileError:
        return False
    return True


def _valid_groups(groups, ndim: int) -> bool:
    if groups is None or len(groups) != 3:
        return False
    flat = [d for g in groups for d in g]
    return flat == sorted(flat) and len(set(flat)) == len(flat) and all(0 <= d < ndim for d in flat)


class _Fuser:
    """State of one fusion run over a graph."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.consumers = graph.consumers()
        self.position = {id(n): i for i, n in enumerate(graph.nodes)}
        self.output_uids = {v.uid for v in graph.outputs}
        self.input_uids = {v.uid for v in graph.inputs}
        self.producers = graph.producers()
        self.members: set[int] = set()  # values computed in place inside a concat
        self.claimed: set[int] = set()

    def run(self) -> list[tuple[int, FusedOp]]:
        placed = []
        for node in self.graph.nodes:
            if id(node) in self.claimed:
                continue
            self.claimed.add(id(node))
            fused = self._group(node)
            last = fused.nodes[-1]
            placed.append((self.position[id(last)], fused))
        placed.sort(key=lambda p: p[0])
        return placed

    def _group(self, node: Node) -> FusedOp:
        op = op_of(node)
        if op.alias and not writes_computed(node):  # else its code writes the size
            return FusedOp("alias", node, out=node.outputs[0], src=node.inputs[0])
        if self._concat_in_place(node):
            return FusedOp("concat", node, out=node.outputs[0])
        if op.elementwise and _broadcasts(node):
            head = ChainStep(node, op, ())
            fused = FusedOp("elementwise", node, [head], out=node.outputs[0])
            self._extend(fused, None)
            return fused
        groups = op.epilogue_groups(node)
        fused = FusedOp("op", node, [], out=node.outputs[0])
        if (
            groups is not None
            and node.outputs
            and _valid_groups(groups, len(node.outputs[0].shape))
        ):
            self._extend(fused, groups)
        return fused

    def _concat_in_place(self, node: Node) -> bool:
        """Whether ``node`` is a Concat whose inputs can live inside its output."""
        if (node.domain, node.op_type) != ("", "Concat") or len(node.outputs) != 1:
            return False
        y = node.outputs[0]
        if not all(is_static(v.shape) for v in (y, *node.inputs) if v is not None):
            return False  # members at byte offsets known only at run time
        axis = int(node.attrs.get("axis", 0))
        axis += len(y.shape) if axis < 0 else 0
        if any(d != 1 for d in y.shape[:axis]):
            return False
        uids = [v.uid for v in node.inputs if v is not None]
        if len(uids) != len(node.inputs) or len(set(uids)) != len(uids):
            return False
        if any(v.nbytes % 64 for v in node.inputs[:-1]):
            return False  # every member must start 64-byte aligned, like any region
        for v in node.inputs:
            producer = self.producers.get(v.uid)
            if (
                v.is_const
                or v.dtype != y.dtype
                or v.uid in self.input_uids
                or v.uid in self.output_uids
                or v.uid in self.members
                or producer is None
                or op_of(producer).alias
            ):
                return False
        self.members.update(uids)
        return True

    def _extend(self, fused: FusedOp, groups) -> None:
        """Grow the group over elementwise consumers (a DAG: a value may feed several
        group nodes), then keep the longest prefix where exactly one value leaves the
        group: the last node's output."""
        start = fused.out
        pending = {start.uid: len(self.consumers.get(start.uid, []))}
        queue = [(self.position[id(c)], id(c), c) for c in self.consumers.get(start.uid, [])]
        heapq.heapify(queue)
        added: list[ChainStep] = []
        valid = 0
        seen: set[int] = set()
        while queue and start.uid not in self.output_uids:
            _, key, node = heapq.heappop(queue)
            if key in seen:
                continue
            seen.add(key)
            step = self._candidate(fused, node, pending, groups)
            if step is None:
                break  # a group value now has an outside reader: no extension is valid
            added.append(step)
            for uid in {node.inputs[i].uid for i in step.positions}:
                pending[uid] -= 1  # consumers() lists a node once per value it reads
            out = node.outputs[0]
            pending[out.uid] = len(self.consumers.get(out.uid, []))
            if self._valid(fused, out, pending):
                valid = len(added)
            if out.uid in self.output_uids:
                break
            for c in self.consumers.get(out.uid, []):
                heapq.heappush(queue, (self.position[id(c)], id(c), c))
        for step in added[:valid]:
            fused.steps.append(step)
            self.claimed.add(id(step.node))
        if valid:
            fused.out = added[valid - 1].node.outputs[0]

    def _valid(self, fused: FusedOp, last: Value, pending: dict[int, int]) -> bool:
        if any(n and uid != last.uid for uid, n in pending.items()):
            return False
        return fused.kind != "op" or last.dtype == fused.anchor.outputs[0].dtype

    def _candidate(
        self, fused: FusedOp, node: Node, pending: dict[int, int], groups
    ) -> ChainStep | None:
        """``node`` as a group member, or None when it cannot join."""
        if id(node) in self.claimed:
            return None
        op = op_of(node)
        if not op.elementwise or len(node.outputs) != 1 or not _broadcasts(node):
            return None
        out = node.outputs[0]
        if not same_shape(out.shape, fused.out.shape):  # fused.out: the group's first value
            return None
        if out.dtype.kind == "S":  # strings (Where): no epilogue bakes their constants
            return None
        positions = tuple(
            i for i, v in enumerate(node.inputs) if v is not None and v.uid in pending
        )
        step = ChainStep(node, op, positions)
        if groups is not None and not self._fits_epilogue(fused, step, groups):
            return None
        if not self._order_ok(fused, node):
            return None
        return step

    def _fits_epilogue(self, fused: FusedOp, step: ChainStep, groups) -> bool:
        anchor = fused.anchor
        out = step.node.outputs[0]
        for v in step.side_inputs():
            if is_scalar_const(v):
                continue
            if v.is_const and v.size > MAX_BAKED_ELEMENTS:
                return False
            if any(v is o for o in anchor.outputs):
                return False
            try:
                strides = broadcast_strides(v.shape, out.shape)
            except CompileError:
                return False
            if group_strides(strides, out.shape, groups) is None:
                return False
        return True

    def _order_ok(self, fused: FusedOp, node: Node) -> bool:
        """The fused op runs at its last node's place: no reader of the anchor's other
        outputs may come before it."""
        if fused.kind != "op":
            return True
        pos = self.position[id(node)]
        for v in fused.anchor.outputs[1:]:
            for c in self.consumers.get(v.uid, []):
                if self.position[id(c)] < pos:
                    return False
        return True


def _storage_root(v: Value, alias_src: dict[int, Value]) -> Value:
    while v.uid in alias_src:
        v = alias_src[v.uid]
    return v


def _output_copies(graph: Graph, ops: list[FusedOp]) -> tuple[list[FusedOp], list[Value]]:
    """Copy ops for graph outputs that cannot own their region."""
    alias_src = {f.out.uid: f.src for f in ops if f.kind == "alias"}
    input_uids = {v.uid for v in graph.inputs}
    used_roots: set[int] = set()
    copies, outputs = [], []
    for v in graph.outputs:
        root = _storage_root(v, alias_src)
        if root.is_const or v.is_const or root.uid in input_uids or root.uid in used_roots:
            dst = Value(v.name, v.shape, v.dtype, seq=v.seq)  # a sequence stays one
            copies.append(FusedOp("copy", None, out=dst, src=v))
            outputs.append(dst)
        else:
            used_roots.add(root.uid)
            outputs.append(v)
    return copies, outputs


def fuse_elementwise(graph: Graph) -> Fusion:
    """Group ``graph``'s nodes into fused ops (see the module docstring).

    Parameters
    ----------
    graph : Graph
        Typed graph with static shapes, nodes in topological order.

    Returns
    -------
    Fusion
        Fused ops in run order, graph inputs, and graph outputs (copy destinations
        replace outputs that need a copy).

    Raises
    ------
    UnsupportedOpError
        When a node's op is not registered.
    """
    from .. import ops as _ops  # noqa: F401  (registers every op)

    ops = [f for _, f in _Fuser(graph).run()]
    copies, outputs = _output_copies(graph, ops)
    n_nodes = sum(len(f.nodes) for f in ops)
    logger.debug("fused %d nodes into %d ops (+%d output copies)", n_nodes, len(ops), len(copies))
    return Fusion(ops + copies, list(graph.inputs), outputs, graph.symbols)
