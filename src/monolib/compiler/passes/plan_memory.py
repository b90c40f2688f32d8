"""Static memory plan: where every activation lives in the arena.

Liveness runs over the fused ops in order (see :mod:`.fuse_elementwise`):

* graph inputs and outputs get their own regions, never reused, so ``run()`` twice
  with the same inputs gives the same outputs;
* an intermediate is allocated when its op runs and freed after its last reader;
  freed regions are reused best-fit by size (offsets and sizes 64-byte aligned);
  an op's outputs are allocated before its inputs are freed, so an op never writes
  over what it reads (side inputs of a fused epilogue included), with one exception:
  a fused elementwise loop writes in place over an input of its shape and dtype that
  dies there (each element is read before it is written, at the same index);
* an ``alias`` value (Reshape...) shares its source's region and extends its lifetime;
* the inputs of an in-place ``concat`` live inside its output's region at their byte
  offsets; the output's region lives from the first input's birth to its last reader;
* constants live in the params blob, not in the arena;
* per-op scratch buffers (``ctx.scratch``, sizes measured by a first emission) are
  allocated while their op runs, after its outputs and before its inputs are freed,
  and released right after it, so they reuse the space of dead activations;
* per-op state (``OpDef.state_bytes``: the random ops' generator) gets a region of its
  own for the life of the arena, never reused: it carries over from run to run;
* run-once ("init") ops (:func:`init_ops`: every read a static constant or another init
  op's output, e.g. a ``ConstantOfShape`` too big to fold, see
  ``node_eval.MAX_FOLD_BYTES``) get their outputs in regions of their own, never
  reused, and an ``int32`` flag (``init_offset``, zero in a fresh arena): ``monolib_run``
  runs them while the flag is 0, then sets it, so later runs skip them (ONNX Runtime
  computes such constant subgraphs once at session creation). An op that reads their
  outputs may ask for a kept region (``FusedOp.keep_bytes``, ``plan.keep``) to derive
  data from them once per arena (a GEMM packs such a weight on the first run).

Run-time dims (issue 12): every region is sized at the upper bounds
(:func:`~..ir.nbytes_at_bounds`), so the offsets are static and valid for every
in-bound size (a tensor uses the first bytes of its region). A graph with run-time
dims first reserves ``int64_t sym[n]`` (the symbol values the executor writes,
``sym_offset``) and ``int64_t out_shapes[sum of output ranks]`` (the code writes each
output's shape there, ``shape_offset``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from ...errors import CompileError
from ..ir import Value, is_static, nbytes_at_bounds
from ..ops.base import op_of
from ..symbolic import same, same_shape
from .fuse_elementwise import Fusion

__all__ = ["ALIGN", "MemoryPlan", "align", "init_ops", "plan_memory"]

logger = logging.getLogger(__name__)

#: Alignment of every region, in bytes (a cache line; AVX-512 loads).
ALIGN = 64


def align(n: int, a: int = ALIGN) -> int:
    """``n`` rounded up to a multiple of ``a``."""
    return (n + a - 1) // a * a


@dataclass
class MemoryPlan:
    """Offsets of values in the arena.

    Attributes
    ----------
    offsets : dict
        ``Value.uid`` -> byte offset (alias values included; constants absent).
    roots : dict
        ``Value.uid`` -> the value whose storage it shares (itself when not an alias).
    arena_bytes : int
        Planned arena size in bytes (a multiple of 64).
    buffers : int
        Number of distinct regions allocated (reused regions count once).
    scratch : dict
        Index of the fused op -> byte offset of its scratch block.
    scratch_sizes : dict
        Index of the fused op -> bytes of scratch planned for it.
    sym_offset, shape_offset : int or None
        Arena offsets of the symbol values and of the output shapes (int64 each);
        ``None`` for a graph without run-time dims.
    state : dict
        Node name -> byte offset of the op's persistent state (``OpDef.state_bytes``).
    init_ops : set of int
        Indices in ``fusion.ops`` of the run-once ops (:func:`init_ops`).
    init_offset : int or None
        Arena offset of the ``int32`` flag saying the init ops have run (None
        without init ops).
    init_made : set of int
        ``Value.uid`` of every value the run-once ops make (their outputs, and aliases
        and in-place concats of them): an op reading one may derive data from it once
        per arena (e.g. pack a weight) into a kept region.
    keep : dict
        Index of the fused op -> byte offset of its kept region (``keep_bytes`` of the
        op, set when its scratch was measured): never reused, so what the op writes
        there on the first run (the init flag still 0) is there on later runs.
    """

    offsets: dict[int, int] = field(default_factory=dict)
    roots: dict[int, Value] = field(default_factory=dict)
    arena_bytes: int = 0
    buffers: int = 0
    scratch: dict[int, int] = field(default_factory=dict)
    scratch_sizes: dict[int, int] = field(default_factory=dict)
    sym_offset: int | None = None
    shape_offset: int | None = None
    state: dict[str, int] = field(default_factory=dict)
    init_ops: set[int] = field(default_factory=set)
    init_offset: int | None = None
    init_made: set[int] = field(default_factory=set)
    keep: dict[int, int] = field(default_factory=dict)

    def root(self, v: Value) -> Value:
        """The value whose storage ``v`` shares."""
        return self.roots.get(v.uid, v)

    def offset(self, v: Value) -> int:
        """Byte offset of ``v`` in the arena.

        Raises
        ------
        CompileError
            When ``v`` has no region (a constant, or a value outside the plan).
        """
        try:
            return self.offsets[v.uid]
        except KeyError:
            raise CompileError(f"value {v.name!r} has no place in the memory plan") from None


class _Allocator:
    """First the persistent regions, then best-fit reuse of freed blocks."""

    def __init__(self) -> None:
        self.end = 0
        self.free: list[tuple[int, int]] = []  # (offset, size), sorted by offset
        self.regions = 0

    def alloc(self, nbytes: int) -> int:
        size = align(max(nbytes, 1))
        fits = [(s, o) for o, s in self.free if s >= size]
        if fits:
            s, o = min(fits)
            self.free.remove((o, s))
            if s > size:
                self._insert(o + size, s - size)
            return o
        # Grow, absorbing a free block that ends at the arena's end.
        if self.free and sum(self.free[-1]) == self.end:
            o, _ = self.free.pop()
            self.end = o
        off = self.end
        self.end += size
        self.regions += 1
        return off

    def release(self, off: int, nbytes: int) -> None:
        self._insert(off, align(max(nbytes, 1)))

    def _insert(self, off: int, size: int) -> None:
        self.free.append((off, size))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for o, s in self.free:
            if merged and sum(merged[-1]) == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((o, s))
        self.free = merged


def _roots(fusion: Fusion) -> dict[int, Value]:
    roots: dict[int, Value] = {}
    for f in fusion.ops:
        if f.kind == "alias":
            roots[f.out.uid] = roots.get(f.src.uid, f.src)
    return roots


class _Owners:
    """Where a value's bytes live: ``(owner, delta)``, the value that owns the region
    (through aliases and in-place concats) and the byte offset inside it."""

    def __init__(self, fusion: Fusion, roots: dict[int, Value]):
        self.roots = roots
        self.member: dict[int, tuple[Value, int]] = {}
        for f in fusion.ops:
            if f.kind == "concat":
                off = 0
                for v in f.anchor.inputs:  # static shapes (fuse_elementwise checks)
                    self.member[v.uid] = (f.out, off)
                    off += v.nbytes
        #: owners and members of concats: never handed over in place
        self.shared = set(self.member) | {y.uid for y, _ in self.member.values()}

    def __call__(self, v: Value) -> tuple[Value, int]:
        r, delta = self.roots.get(v.uid, v), 0
        while r.uid in self.member:
            y, d = self.member[r.uid]
            r, delta = self.roots.get(y.uid, y), delta + d
        return r, delta


def _lifetimes(fusion: Fusion, owner: _Owners):
    """Per owner: (first op writing it, last op reading or writing it)."""
    born: dict[int, int] = {}
    dies: dict[int, int] = {}
    values: dict[int, Value] = {}
    for t, f in enumerate(fusion.ops):
        if f.kind == "alias":
            continue
        for v in f.writes():
            r, _ = owner(v)
            values[r.uid] = r
            born.setdefault(r.uid, t)
            dies[r.uid] = max(dies.get(r.uid, t), t)
        for v in f.reads():
            r, _ = owner(v)
            dies[r.uid] = max(dies.get(r.uid, t), t)
    return born, dies, values


def init_ops(fusion: Fusion) -> set[int]:
    """Indices in ``fusion.ops`` of the ops that need to run only once per arena.

    An op qualifies when it has code of its own (``op`` or ``elementwise``), every
    node in it is ``foldable`` with no state, it reads at least one value, every value
    it reads is a constant (not a symbolic one) or written by an op that qualified
    (through aliases and in-place concats of such values too), and every value it
    writes has a static shape. A value computed in place inside a concat shares the
    concat's region: its op qualifies only when every member of that region does.
    Such ops are what folding left because their outputs were too large to store
    (``node_eval.MAX_FOLD_BYTES``); their results do not depend on the inputs.
    """
    return _init_split(fusion)[0]


def _init_split(fusion: Fusion) -> tuple[set[int], set[int]]:
    """(:func:`init_ops`, the uids of every value they make)."""
    owner = _Owners(fusion, _roots(fusion))
    banned: set[int] = set()
    while True:  # drop the members of mixed concats until none is left
        out, made = _once(fusion, banned)
        mixed = {t for t in out for v in fusion.ops[t].writes()
                 if v.uid in owner.member and owner(v)[0].uid not in made}
        if not mixed:
            return out, made
        banned |= mixed


def _once(fusion: Fusion, banned: set[int]) -> tuple[set[int], set[int]]:
    """(the ops that qualify, not counting ``banned``; the uids of what they make)."""
    made: set[int] = set()
    out: set[int] = set()
    for t, f in enumerate(fusion.ops):
        if f.kind == "alias":
            if f.src.uid in made:
                made.add(f.out.uid)
        elif f.kind == "concat":
            if all(v.uid in made for v in f.anchor.inputs):
                made.add(f.out.uid)
        elif t not in banned and f.kind in ("op", "elementwise") and _runs_once(f, made):
            out.add(t)
            made.update(v.uid for v in f.writes())
    return out, made


def _runs_once(f, made: set[int]) -> bool:
    for n in f.nodes:
        op = op_of(n)
        if not op.foldable or op.state_bytes(n):
            return False
    reads = f.reads()
    if not reads:
        return False
    for v in reads:
        if v.uid not in made and (
            not v.is_const or v.is_symbolic_const or not is_static(v.shape)
        ):
            return False
    return all(v.seq is None and is_static(v.shape) for v in f.writes())


def plan_memory(
    fusion: Fusion, scratch: Mapping[int, int] | None = None, init: bool = True
) -> MemoryPlan:
    """Plan the arena for ``fusion``'s ops (see the module docstring).

    Parameters
    ----------
    fusion : Fusion
        The fused ops in run order, with the graph inputs and outputs.
    scratch : dict, optional
        Index in ``fusion.ops`` -> bytes of scratch the op needs while it runs.
    init : bool
        Give the run-once ops (:func:`init_ops`) regions of their own and a flag
        (``plan.init_ops``, ``plan.init_offset``); False plans them like any op.

    Returns
    -------
    MemoryPlan
        Offsets (bytes, 64-aligned) of every non-constant value, and ``arena_bytes``.
    """
    roots = _roots(fusion)
    owner = _Owners(fusion, roots)
    plan = MemoryPlan(roots=roots)
    alloc = _Allocator()
    if len(fusion.symbols):
        plan.sym_offset = alloc.alloc(8 * len(fusion.symbols))
        plan.shape_offset = alloc.alloc(8 * sum(len(v.shape) for v in fusion.outputs))
    for f in fusion.ops:
        need = op_of(f.anchor).state_bytes(f.anchor) if f.kind == "op" else 0
        if need:
            plan.state[f.anchor.name] = alloc.alloc(need)
    root_off: dict[int, int] = {}
    for v in [*fusion.inputs, *fusion.outputs]:
        r, _ = owner(v)
        if r.is_const or r.uid in root_off:
            continue
        root_off[r.uid] = alloc.alloc(nbytes_at_bounds(r))
    plan.init_ops, plan.init_made = _init_split(fusion) if init else (set(), set())
    if plan.init_ops:
        plan.init_offset = alloc.alloc(4)
        for t, f in enumerate(fusion.ops):  # data derived once from init values
            if getattr(f, "keep_bytes", 0) > 0:
                plan.keep[t] = alloc.alloc(f.keep_bytes)
        for t in sorted(plan.init_ops):
            for v in fusion.ops[t].writes():
                r, _ = owner(v)  # an in-place concat's member: the concat's region
                if r.uid not in root_off:  # a graph output already has its own region
                    root_off[r.uid] = alloc.alloc(nbytes_at_bounds(r))
        logger.info("%d run-once ops", len(plan.init_ops))
    persistent = set(root_off)

    born, dies, values = _lifetimes(fusion, owner)
    frees: dict[int, list[int]] = {}
    for uid, t in dies.items():
        frees.setdefault(t, []).append(uid)
    for t, f in enumerate(fusion.ops):
        kept = _in_place(f, t, owner, root_off, persistent, dies, born)
        for uid in [u for u, b in born.items() if b == t]:
            if uid not in root_off and not values[uid].is_const:
                root_off[uid] = alloc.alloc(nbytes_at_bounds(values[uid]))
        need = int((scratch or {}).get(t, 0))
        if need > 0:
            plan.scratch[t] = alloc.alloc(need)
            plan.scratch_sizes[t] = need
            alloc.release(plan.scratch[t], need)
        for uid in frees.get(t, []):
            if uid in root_off and uid not in persistent and uid in values and uid != kept:
                alloc.release(root_off[uid], nbytes_at_bounds(values[uid]))

    _assign(fusion, plan, owner, root_off)
    plan.arena_bytes = align(alloc.end)
    plan.buffers = alloc.regions
    logger.debug("arena: %d bytes, %d regions", plan.arena_bytes, plan.buffers)
    return plan


def _in_place(f, t, owner: _Owners, root_off, persistent, dies, born) -> int | None:
    """Let an elementwise loop write over an input that dies in it (same shape and
    dtype: element i is read before it is written, at the same index). Returns the uid
    of the root whose region passed to the output (not to be freed), or None."""
    if f.kind != "elementwise":
        return None
    out, _ = owner(f.out)
    if born.get(out.uid) != t or out.uid in root_off or out.uid in owner.shared:
        return None
    for v in f.reads():
        r, delta = owner(v)
        if (
            r.uid in root_off
            and delta == 0
            and r.uid not in owner.shared
            and r.uid not in persistent
            and dies.get(r.uid) == t
            and same_shape(v.shape, f.out.shape)
            and v.dtype == f.out.dtype
            and same(r.nbytes, out.nbytes)
        ):
            root_off[out.uid] = root_off[r.uid]
            return r.uid
    return None


def _assign(fusion: Fusion, plan: MemoryPlan, owner: _Owners, root_off) -> None:
    """Give every non-constant value of the plan its owner's offset (+ its delta)."""
    every = [*fusion.inputs, *fusion.outputs]
    for f in fusion.ops:
        every += f.reads() + f.writes()
    for v in every:
        r, delta = owner(v)
        if r.uid in root_off:
            plan.offsets[v.uid] = root_off[r.uid] + delta
        elif not r.is_const:
            raise CompileError(f"value {v.name!r} is read but never written by any op")
