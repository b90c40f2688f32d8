"""The debug executor: per-op profile and per-op outputs (TVM's
``tvm.contrib.debugger.debug_executor``, ``GraphModuleDebug``).

It runs the graph op by op through ``monolib_run_op(i, params, arena)`` (the ABI of
``docs/ARCHITECTURE.md``, "The generated C library"): :meth:`GraphModuleDebug.profile`
times each fused op (:meth:`GraphExecutor.profile`) and tabulates it;
:meth:`GraphModuleDebug.debug_get_output` runs ops ``0..i`` and copies op ``i``'s
output out of the arena.

Where op ``i`` writes its output: the node's ``"offset"`` in the graph JSON when the
compiler records it, or the offset of a graph output; otherwise it is located once per
op by probing (see :func:`locate_output`), which needs no compiler help.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .device import Device, cpu
from ..errors import ExecutionError, InputError
from .graph_executor import ALIGN, GraphExecutor, GraphExecutorFactoryModule, GraphModule
from .module import Module
from .ndarray import NDArray

__all__ = ["GraphModuleDebug", "ProfileRow", "ProfileTable", "create", "locate_output"]

logger = logging.getLogger(__name__)

# Arena fill bytes of the probe: two different patterns tell written bytes from
# untouched ones. Corrupting a block to test whether later ops read it uses these and
# more: as float32, 0x71/0xF1 are huge (+/-1e30), 0x3F/0xBF moderate (+/-0.75), since a
# saturating op (Clip, HardSigmoid, Sigmoid) can absorb one kind of change but not all.
_FILL = (0x71, 0xF1)
_CORRUPT = (0x71, 0xF1, 0x3F, 0xBF, 0x00)


class ProfileRow(NamedTuple):
    """One fused op of a profile: index, node name, ONNX op types (the anchor op,
    then the fused ones), output shape, best time in milliseconds, share of the sum
    of all ops' times in percent."""

    index: int
    name: str
    ops: tuple[str, ...]
    shape: tuple[int, ...]
    time_ms: float
    share: float


class ProfileTable(list):
    """The rows of :meth:`GraphModuleDebug.profile` (a list of :class:`ProfileRow`,
    in run order); ``str()`` gives a fixed-width table, slowest first."""

    @property
    def total_ms(self) -> float:
        """Sum of the ops' times (ms)."""
        return float(sum(r.time_ms for r in self))

    def top(self, n: int = 10) -> list[ProfileRow]:
        """The ``n`` slowest rows."""
        return sorted(self, key=lambda r: -r.time_ms)[:n]

    def __str__(self) -> str:
        head = ("#", "name", "ops", "shape", "ms", "share")
        body = [
            (
                str(r.index),
                r.name,
                "+".join(r.ops),
                str(list(r.shape)),
                f"{r.time_ms:.3f}",
                f"{r.share:.1f}%",
            )
            for r in self.top(len(self))
        ]
        widths = [max(len(row[k]) for row in [head, *body]) for k in range(len(head))]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [head, *body]
        ]
        lines.append(f"{len(self)} ops, sum {self.total_ms:.3f} ms")
        return "\n".join(lines)


def _profile_table(ops: list[dict[str, Any]]) -> ProfileTable:
    total = sum(o["time_ms"] for o in ops) or 1.0
    return ProfileTable(
        ProfileRow(
            o["index"],
            o["name"],
            (o["op"], *o["fused"]),
            tuple(o["shape"] or ()),
            o["time_ms"],
            100.0 * o["time_ms"] / total,
        )
        for o in ops
    )


class _Probe:
    """Replays the ops of one executor from an arena filled with a byte pattern."""

    def __init__(self, executor: GraphExecutor) -> None:
        self.ex = executor
        self.inputs = [executor.input_view(k).copy() for k in range(len(executor.inputs))]

    def restore_inputs(self) -> None:
        for k, value in enumerate(self.inputs):
            np.copyto(self.ex.input_view(k), value)

    def start(self, fill: int, stop: int) -> None:
        """Fill the arena with ``fill``, put the inputs back, run ops ``[0, stop)``."""
        self.ex.arena.fill(fill)
        self.restore_inputs()
        self.run(0, stop)

    def run(self, start: int, stop: int) -> None:
        for k in range(start, stop):
            self.ex.run_op(k)

    def outputs(self) -> bytes:
        return b"".join(self.ex.output_view(k).tobytes() for k in range(len(self.ex.outputs)))


class _Liveness:
    """Which 64-byte arena blocks op ``i`` wrote, and whether a block is read later:
    corrupting it (from the arena state right after op ``i``) changes a graph output."""

    def __init__(self, probe: _Probe, i: int, written: np.ndarray) -> None:
        self.probe, self.i = probe, i
        self.state = probe.ex.arena.copy()
        probe.run(i + 1, probe.ex.num_ops())
        self.want = probe.outputs()
        pad = (-written.size) % ALIGN
        self.written = np.concatenate([written, np.zeros(pad, bool)]).reshape(-1, ALIGN).any(1)
        self._seen: dict[int, bool] = {}

    def __call__(self, block: int) -> bool:
        """Block ``block`` was written by op ``i`` and reaches a graph output."""
        if not 0 <= block < self.written.size or not self.written[block]:
            return False
        return self.reads(block)

    def reads(self, block: int) -> bool:
        """Block ``block`` (written by op ``i`` or not) reaches a graph output."""
        if not 0 <= block < self.written.size:
            return False
        if block not in self._seen:
            self._seen[block] = self._changes_outputs(block * ALIGN)
        return self._seen[block]

    def _changes_outputs(self, start: int) -> bool:
        ex = self.probe.ex
        for fill in _CORRUPT:
            ex.arena[:] = self.state
            ex.arena[start : start + ALIGN] = fill
            self.probe.run(self.i + 1, ex.num_ops())
            if self.probe.outputs() != self.want:
                return True
        return False


def _first_block(live: _Liveness, span: int) -> tuple[int, int] | None:
    """(first block of the live written run holding the output, a block inside it)
    for an output of ``span`` blocks."""
    # Any ``span`` consecutive blocks hold one index divisible by ``span``: probing
    # those finds a block inside the output; scratch written by the op is dead.
    hit = next((b for b in range(0, live.written.size, span) if live(b)), None)
    if hit is None:  # blocks rewritten with their old value hid the one probed: all
        hit = next((int(b) for b in np.flatnonzero(live.written) if live(b)), None)
    if hit is None:
        return None
    lo, hi = max(0, hit - span + 1), hit
    while lo < hi:  # blocks before the output are dead or not written by the op
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if live(mid) else (mid + 1, hi)
    return lo, hit


def _starts(block_start: int, written: np.ndarray, itemsize: int) -> list[int]:
    """Output starts to try in the first output block: the block start (the planner
    aligns values to 64 bytes; an unwritten first element is a value written over an
    equal one), then the first written element (a value placed inside another's)."""
    hits = np.flatnonzero(written[block_start : block_start + ALIGN])
    inner = block_start + int(hits[0]) // itemsize * itemsize if hits.size else block_start
    return [block_start] if inner == block_start else [block_start, inner]


def locate_output(executor: GraphExecutor, i: int, in_place: Sequence[int] = ()) -> int:
    """The arena offset of fused op ``i``'s output, found by probing (the graph JSON of
    a library has no per-node offsets).

    Ops ``0..i`` run twice from arenas filled with two byte patterns: the bytes that
    differ before and after op ``i`` in either run were written by it (its output and
    its scratch). Of those, the output's 64-byte blocks are the ones the later ops
    read: corrupting one changes a graph output. The output is the run of such blocks
    (found with ``O(written / size + log size)`` partial runs).

    Parameters
    ----------
    executor : GraphExecutor
    i : int
        The fused op.
    in_place : sequence of int
        Offsets of op ``i``'s inputs of its output's size: if the written blocks do
        not form the output (an op computed in place rewrites some bytes with their
        old value, unseen), an input window holding a block it wrote whose both end
        blocks are read later is the output.

    Returns
    -------
    int
        Byte offset into the arena. The arena is left in an arbitrary state.

    Raises
    ------
    ExecutionError
        The output was not found: probing cannot see bytes an op rewrites with their
        old value, so an op computed in place (``y = x * s`` over ``x`` with
        ``s == 1`` in places) can hide its output's extent. The window returned has
        both end blocks read by later ops (a value placed inside another's at an
        offset not 64-byte aligned may still be misplaced: give offsets instead).
    """
    node = executor.factory.graph_json["nodes"][i]
    dtype = np.dtype(node.get("dtype", "float32"))
    nbytes = int(np.prod(node.get("shape", []), dtype=np.int64)) * dtype.itemsize
    probe = _Probe(executor)
    written = np.zeros(executor.arena_bytes, dtype=bool)
    for fill in _FILL:
        probe.start(fill, i)
        before = executor.arena.copy()
        executor.run_op(i)
        written |= executor.arena != before
    live = _Liveness(probe, i, written)
    span = max(1, nbytes // ALIGN)
    found = _first_block(live, span)
    if found is not None:
        first, hit = found
        # A start from the written blocks must end in a written block read later; an
        # input's window (in place) in any block read later.
        tries = [(off, live) for off in _starts(first * ALIGN, written, dtype.itemsize)]
        tries += [(h, live.reads) for h in in_place if h <= hit * ALIGN < h + nbytes]
        for off, ends_ok in tries:
            end = (off + nbytes - 1) // ALIGN
            if off + nbytes <= executor.arena_bytes and ends_ok(off // ALIGN) and ends_ok(end):
                logger.debug("op %d (%s): output at arena offset %d", i, node.get("name"), off)
                return off
    raise ExecutionError(
        f"cannot locate the output of op {i} ({node.get('name')!r}) in the arena by "
        "probing: its written bytes reaching a graph output do not form one "
        f"{nbytes}-byte window (an op computed in place whose output equals its input "
        'in places); a graph JSON whose nodes carry "offset" needs no probing'
    )


class GraphModuleDebug(GraphModule):
    """A :class:`GraphModule` that also profiles each fused op and returns any fused
    op's output (TVM's ``debug_executor.GraphModuleDebug``).

    Parameters
    ----------
    module : GraphExecutor or GraphExecutorFactoryModule
        As for :class:`GraphModule`.
    """

    def __init__(self, module: Any) -> None:
        super().__init__(module)
        self._offsets: dict[int, int] = {}

    @property
    def nodes(self) -> list[dict]:
        """The graph JSON ``nodes`` (fused op ``i`` is ``nodes[i]``)."""
        return self.executor.factory.graph_json.get("nodes", [])

    def profile(self, repeat: int = 5) -> ProfileTable:
        """Time every fused op on the current inputs, best of ``repeat`` runs each
        (:meth:`GraphExecutor.profile`).

        Returns
        -------
        ProfileTable
            :class:`ProfileRow` per op in run order (name, op types, output shape,
            ``time_ms`` in ms, ``share`` in % of the sum); ``print()`` it for a table.
        """
        return _profile_table(self.executor.profile(repeat=repeat))

    def node_index(self, key: Any) -> int:
        """Index of the fused op ``key``: an index, a node name or an output tensor name.

        Raises
        ------
        InputError
            Out of range or unknown; the message gives some node names.
        """
        nodes = self.nodes
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if 0 <= key < len(nodes):
                return int(key)
            raise InputError(f"node index {key} out of range: the graph has {len(nodes)} ops")
        for i, node in enumerate(nodes):
            if key == node.get("name") or key in node.get("outputs", []):
                return i
        sample = ", ".join(repr(n.get("name")) for n in nodes[:5])
        raise InputError(f"unknown node {key!r}: nodes are {sample}, ... ({len(nodes)} in all)")

    def output_offset(self, key: Any) -> int:
        """Arena offset of op ``key``'s output: the node's ``"offset"`` in the graph
        JSON, a graph output's offset, or found once by :func:`locate_output`."""
        i = self.node_index(key)
        node = self.nodes[i]
        if "offset" in node:
            return int(node["offset"])
        outs = {t.name: t.offset for t in self.executor.outputs}
        if node.get("outputs") and node["outputs"][0] in outs:
            return outs[node["outputs"][0]]
        if i not in self._offsets:
            saved = _Probe(self.executor)
            try:
                self._offsets[i] = self._locate(i, saved)
            finally:
                saved.restore_inputs()
        return self._offsets[i]

    def _locate(self, i: int, saved: _Probe) -> int:
        try:
            return locate_output(self.executor, i)
        except ExecutionError:
            saved.restore_inputs()  # the inputs' own offsets are found from clean inputs
            hints = self._same_size_inputs(i)
            saved.restore_inputs()
            if not hints:
                raise
            return locate_output(self.executor, i, in_place=hints)

    def _same_size_inputs(self, i: int) -> list[int]:
        """Offsets of the outputs of earlier ops that op ``i`` reads, of its output's
        size (where an op computed in place writes)."""
        size = tuple(self.nodes[i].get("shape", [])), self.nodes[i].get("dtype")
        producers = {n["outputs"][0]: j for j, n in enumerate(self.nodes[:i]) if n.get("outputs")}
        out = []
        for name in self.nodes[i].get("inputs", []):
            j = producers.get(name)
            if (
                j is None
                or (tuple(self.nodes[j].get("shape", [])), self.nodes[j].get("dtype")) != size
            ):
                continue
            try:
                out.append(self.output_offset(j))
            except ExecutionError:
                logger.debug("op %d: input op %d not located either", i, j)
        return out

    def debug_get_output(self, node: Any, out: np.ndarray | None = None) -> NDArray:
        """Run ops ``0..i`` on the current inputs (``monolib_run_op``) and return op
        ``i``'s output (a copy): shape and dtype of ``nodes[i]``.

        Parameters
        ----------
        node : int or str
            Op index, node name (``"Conv@3"``) or its output tensor name (the ONNX
            value name, ``nodes[i]["outputs"][0]``).
        out : np.ndarray, optional
            Also copied into this array.

        Raises
        ------
        InputError
            Unknown node, or params missing.
        ExecutionError
            An op failed, or the output could not be located.

        Notes
        -----
        The graph outputs hold stale values until the next :meth:`run`.
        """
        i = self.node_index(node)
        off = self.output_offset(i)
        spec = self.nodes[i]
        dtype = np.dtype(spec.get("dtype", "float32"))
        shape = tuple(int(d) for d in spec.get("shape", []))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not 0 <= off <= self.executor.arena_bytes - nbytes:
            raise ExecutionError(f"op {i}: output [{off}, {off + nbytes}) lies outside the arena")
        for k in range(i + 1):
            self.executor.run_op(k)
        value = self.executor.arena[off : off + nbytes].view(dtype).reshape(shape).copy()
        if out is not None:
            np.copyto(out, value)
        return NDArray(value, self.executor.device)


def create(
    factory_or_graph_json: Any,
    lib: Module | None = None,
    device: Device | None = None,
    params: Any = None,
) -> GraphModuleDebug:
    """A :class:`GraphModuleDebug` (TVM's ``debug_executor.create``).

    Parameters
    ----------
    factory_or_graph_json : GraphExecutorFactoryModule, GraphExecutor, str or dict
        A factory (compiled or loaded), an executor, or a graph JSON (then ``lib`` is
        needed, as for :func:`monolib.runtime.graph_executor.create`).
    lib : Module, optional
        The library module (graph JSON only).
    device : Device, optional
        Default ``cpu()``.
    params : optional
        Params for the graph JSON path (see ``graph_executor.create``).

    Raises
    ------
    InputError
        A graph JSON without ``lib``.
    """
    from .graph_executor import create as create_graph

    obj = factory_or_graph_json
    if isinstance(obj, GraphExecutorFactoryModule):
        return GraphModuleDebug(obj.default(device or cpu()))
    if isinstance(obj, (GraphExecutor, GraphModule)):
        return GraphModuleDebug(getattr(obj, "executor", obj))
    if lib is None:
        raise InputError("debug_executor.create: a graph JSON needs the library module (lib)")
    return GraphModuleDebug(create_graph(obj, lib, device, params).executor)
