"""The debug executor: per-op profile and per-op outputs (TVM's
``tvm.contrib.debugger.debug_executor``, ``GraphModuleDebug``).

It runs the graph op by op through ``monolib_run_op(i, params, arena)`` (the ABI of
``docs/ARCHITECTURE.md``, "The generated C library"): :meth:`GraphModuleDebug.profile`
times each fused op (:meth:`GraphExecutor.profile`) and tabulates it;
:meth:`GraphModuleDebug.debug_get_output` runs ops ``0..i`` and copies op ``i``'s
output out of the arena.

Where op ``i`` writes its output: the node's ``"offset"`` in the graph JSON (every
node of a compiled graph carries it, see ``abi.graph_spec.node_entry``).
"""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

import numpy as np

from ..abi.symbols import evaluate
from .device import Device, cpu
from ..errors import ContainerError, ExecutionError, InputError
from .factory import GraphExecutorFactoryModule
from .graph_executor import GraphExecutor
from .graph_module import GraphModule
from .module import Module
from .ndarray import NDArray

__all__ = ["GraphModuleDebug", "ProfileRow", "ProfileTable", "create"]

logger = logging.getLogger(__name__)

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


class GraphModuleDebug(GraphModule):
    """A :class:`GraphModule` that also profiles each fused op and returns any fused
    op's output (TVM's ``debug_executor.GraphModuleDebug``).

    Parameters
    ----------
    module : GraphExecutor or GraphExecutorFactoryModule
        As for :class:`GraphModule`.
    """

    @property
    def nodes(self) -> list[dict]:
        """The graph JSON ``nodes`` (fused op ``i`` is ``nodes[i]``)."""
        return self.executor.factory.graph_json.get("nodes", [])

    def profile(self, repeat: int = 5, in_run: bool = False) -> ProfileTable:
        """Time every fused op on the current inputs, best of ``repeat`` runs each, or
        with ``in_run`` the median of ``repeat`` whole runs, each op as the ops before
        it left the caches (:meth:`GraphExecutor.profile`, which says what it raises).

        Returns
        -------
        ProfileTable
            :class:`ProfileRow` per op in run order (name, op types, output shape,
            ``time_ms`` in ms, ``share`` in % of the sum); ``print()`` it for a table.
        """
        return _profile_table(self.executor.profile(repeat=repeat, in_run=in_run))

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
        """Arena offset of op ``key``'s output: the node's ``"offset"`` in the graph JSON.

        Raises
        ------
        InputError
            Unknown node (see :meth:`node_index`).
        ContainerError
            The node has no ``"offset"`` (a graph JSON written before nodes carried
            one): compile and export the model again.
        """
        i = self.node_index(key)
        node = self.nodes[i]
        if "offset" not in node:
            raise ContainerError(
                f"graph JSON node {i} ({node.get('name')!r}) has no \"offset\": the graph "
                "predates per-node offsets; compile and export the model again"
            )
        return int(node["offset"])

    def debug_get_output(self, node: Any, out: np.ndarray | None = None) -> NDArray:
        """Run ops ``0..i`` on the current inputs (``monolib_run_op``) and return op
        ``i``'s output (a copy): shape and dtype of ``nodes[i]``, in NCHW where the
        library keeps it channel-blocked (the node's ``"layout"``).

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
            An op failed, or the node's output lies outside the arena (for a graph
            with run-time dims: its shape, evaluated at this run's dims).
        ContainerError
            The node has no ``"offset"`` (see :meth:`output_offset`).

        Notes
        -----
        The graph outputs hold stale values until the next :meth:`run`.
        """
        i = self.node_index(node)
        off = self.output_offset(i)
        spec = self.nodes[i]
        dtype = np.dtype(spec.get("dtype", "float32"))
        for k in range(i + 1):
            self.executor.run_op(k)  # binds the run-time dims first, if any
        shape = self._node_shape(i, spec.get("shape", []))
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not 0 <= off <= self.executor.arena_bytes - nbytes:
            raise ExecutionError(f"op {i}: output [{off}, {off + nbytes}) lies outside the arena")
        value = self.executor.arena[off : off + nbytes].view(dtype)
        if spec.get("layout") == "NCHW16c":  # [N][C/16][H][W][16] between two convs
            n, c, h, w = shape
            value = value.reshape(n, c // 16, h, w, 16).transpose(0, 1, 4, 2, 3)
        value = value.reshape(shape).copy()
        if out is not None:
            np.copyto(out, value)
        return NDArray(value, self.executor.device)

    def _node_shape(self, i: int, dims: list) -> tuple[int, ...]:
        """Op ``i``'s output shape: its dims, dim expressions evaluated at the
        symbol values of this run (a graph with run-time dims)."""
        shapes = self.executor.shapes
        if shapes is None:
            return tuple(int(d) for d in dims)
        values = shapes.symbol_values()
        try:
            return tuple(evaluate(d, values) for d in dims)
        except (ValueError, ZeroDivisionError) as exc:
            raise ExecutionError(f"op {i}: output shape {dims}: {exc}") from None


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
