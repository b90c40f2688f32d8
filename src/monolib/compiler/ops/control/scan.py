"""ONNX ``Scan`` (9, 11, 16, 19, 21, 23, 24, 25): a loop over slices of its scan inputs
with state variables. Spec: https://onnx.ai/onnx/operators/onnx__Scan.html.

The body (:mod:`.subgraph`) is compiled into the library; the op's C function is::

    state slots = initial states
    for (i = 0; i < T; ++i) {
        j = i, or T-1-i for a reversed input: scan input slot k = input k [.., j, ..]
        run the body's ops; state slots = state outputs (memmove)
        scan output k [.., i (or T-1-i), ..] = body scan output k
    }
    final states = state slots

``T`` is the length of the scan inputs along their scan axes (a run-time dim works:
it is read from ``S``). Slices along an inner axis are copied block by block.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...ir import Node, shape_size
from ...symbolic import same, same_shape
from ..base import OpDef, OutType, register
from .subgraph import compile_subgraph, evaluate_subgraph

__all__ = ["Scan"]

logger = logging.getLogger(__name__)


def _axes(values, given, name: str, where: str, extra: int = 0) -> list[int]:
    axes = list(given) if given is not None else [0] * len(values)
    if len(axes) != len(values):
        raise ShapeError(f"{where}: {name} has {len(axes)} entries for {len(values)} values")
    out = []
    for a, v in zip(axes, values):
        rank = len(v.shape) + extra
        a = int(a) + rank if int(a) < 0 else int(a)
        if not 0 <= a < rank:
            raise ShapeError(f"{where}: {name} {a} is out of range for rank {rank}")
        out.append(a)
    return out


def _slice_copy(slot: str, full: str, before, after, itemsize: int, reverse: bool,
                into_slot: bool) -> str:
    """C copying slice ``j`` (``i_``, or ``t_ - 1 - i_`` when ``reverse``) of the whole
    tensor at ``full`` (dims ``before``, the scan axis, dims ``after``) into the body's
    slot (``into_slot``), or the slot back into that slice: one block per index of
    ``before``."""
    j = "(t_ - 1 - i_)" if reverse else "i_"
    outer = shape_size(before)
    inner = f"(int64_t)({shape_size(after) * itemsize})"
    at_slot, at_full = f"{slot} + o_ * {inner}", f"{full} + (o_ * t_ + {j}) * {inner}"
    dst, src = (at_slot, at_full) if into_slot else (at_full, at_slot)
    return (f"    for (int64_t o_ = 0; o_ < {outer}; ++o_) memcpy((uint8_t*){dst}, "
            f"(const uint8_t*){src}, {inner});")


@register
class Scan(OpDef):
    """``Scan``: inputs the initial states then the scan inputs (then the captured
    values); attributes ``body``, ``num_scan_inputs``, ``scan_input_axes`` /
    ``scan_input_directions`` / ``scan_output_axes`` / ``scan_output_directions``.

    Raises
    ------
    ShapeError
        Scan inputs of different lengths, axes out of range, a body whose outputs do
        not match the states.
    """

    op_type = "Scan"
    since_version = 9
    also_versions = (11, 16, 19, 21, 23, 24, 25)
    defaults = {"scan_input_axes": None, "scan_input_directions": None,
                "scan_output_axes": None, "scan_output_directions": None}

    def _split(self, inputs, attrs):
        n_scan = int(attrs["num_scan_inputs"])
        return inputs[: len(inputs) - n_scan], inputs[len(inputs) - n_scan:]

    def body_types(self, inputs, attrs, key: str):
        """Types of the body's formal inputs: the states as given, then one slice of
        each scan input (its scan axis removed)."""
        states, scans = self._split(list(inputs), attrs)
        axes = _axes(scans, attrs.get("scan_input_axes"), "scan_input_axes", "Scan")
        sliced = [(tuple(d for i, d in enumerate(v.shape) if i != a), v.dtype)
                  for v, a in zip(scans, axes)]
        return [(v.shape, v.dtype) for v in states] + sliced

    def _parts(self, node: Node):
        formal = int(node.attrs.get("_formal", len(node.inputs)))
        states, scans = self._split(node.inputs[:formal], node.attrs)
        where = f"Scan {node.name!r}"
        in_axes = _axes(scans, self.attr(node, "scan_input_axes"), "scan_input_axes", where)
        body = node.attrs["body"]
        souts = body.outputs[len(states):]
        out_axes = _axes(souts, self.attr(node, "scan_output_axes"), "scan_output_axes",
                         where, extra=1)
        in_dirs = self.attr(node, "scan_input_directions") or [0] * len(scans)
        out_dirs = self.attr(node, "scan_output_directions") or [0] * len(souts)
        lengths = [v.shape[a] for v, a in zip(scans, in_axes)]
        if not lengths:
            raise ShapeError(f"{where}: no scan inputs")
        if not all(same(x, lengths[0]) for x in lengths):
            raise ShapeError(f"{where}: scan inputs of lengths {lengths}")
        return states, scans, in_axes, list(in_dirs), souts, out_axes, list(out_dirs), lengths[0]

    def infer(self, node: Node) -> list[OutType]:
        states, _, _, _, souts, out_axes, _, t = self._parts(node)
        body = node.attrs["body"]
        out: list[OutType] = []
        for k, (v, o) in enumerate(zip(states, body.outputs)):
            if v.dtype != o.dtype or not same_shape(v.shape, o.shape):
                raise ShapeError(
                    f"Scan {node.name!r}: state {k} enters as {v.dtype}{list(v.shape)} and "
                    f"leaves the body as {o.dtype}{list(o.shape)}")
            out.append((v.shape, v.dtype))
        for o, a in zip(souts, out_axes):
            out.append(((*o.shape[:a], t, *o.shape[a:]), o.dtype))
        return out

    def reference(self, node: Node, inputs):
        formal = int(node.attrs.get("_formal", len(inputs)))
        states, scans, in_axes, in_dirs, souts, out_axes, out_dirs, _ = self._parts(node)
        arrays = inputs[:formal]
        carried = list(arrays[: len(states)])
        xs = [np.moveaxis(np.asarray(x), a, 0) for x, a in zip(arrays[len(states):], in_axes)]
        xs = [x[::-1] if d else x for x, d in zip(xs, in_dirs)]
        t = xs[0].shape[0]
        collected: list[list[np.ndarray]] = [[] for _ in souts]
        for i in range(t):
            outs = evaluate_subgraph(node, "body", carried + [x[i] for x in xs],
                                     inputs[formal:])
            carried = outs[: len(states)]
            for k, y in enumerate(outs[len(states):]):
                collected[k].append(y)
        results = list(carried)
        for k, (o, a, d) in enumerate(zip(souts, out_axes, out_dirs)):
            ys = np.stack(collected[k]) if t else np.zeros((0, *o.shape), o.dtype)
            if d:
                ys = ys[::-1]
            results.append(np.moveaxis(ys, 0, a))
        return results

    def emit(self, node: Node, ctx) -> str:
        states, scans, in_axes, in_dirs, _, out_axes, out_dirs, t = self._parts(node)
        body = compile_subgraph(node, "body", ctx.plan_symbols)
        base = ctx.scratch_base + ctx.scratch_used
        ctx.scratch(body.arena_bytes)
        em = body.emit(ctx, base, None, f"{node.name}_body")
        n = len(states)
        slots, xslots = body.formal[:n], body.formal[n:]
        couts, souts = body.outputs[:n], body.outputs[n:]
        lines = ["  {", f"  const int64_t t_ = {t};"]
        for v, s in zip(states, slots):
            lines.append(f"  memcpy({em.ptr(s)}, {ctx.ptr(v)}, {v.nbytes});")
        lines.append("  for (int64_t i_ = 0; i_ < t_; ++i_) {")
        for x, s, a, d in zip(scans, xslots, in_axes, in_dirs):
            lines.append(_slice_copy(em.ptr(s), ctx.ptr(x), x.shape[:a], x.shape[a + 1:],
                                     x.dtype.itemsize, d, into_slot=True))
        lines.append(f"    {em.call}")
        for s, o in zip(slots, couts):
            if em.offset(o) != em.offset(s):
                lines.append(f"    memmove({em.ptr(s)}, {em.ptr(o)}, {o.nbytes});")
        for o, y, a, d in zip(souts, node.outputs[n:], out_axes, out_dirs):
            lines.append(_slice_copy(em.ptr(o), ctx.ptr(y), o.shape[:a], o.shape[a:],
                                     o.dtype.itemsize, d, into_slot=False))
        lines.append("  }")
        for s, y in zip(slots, node.outputs[:n]):
            lines.append(f"  memcpy({ctx.ptr(y)}, {em.ptr(s)}, {y.nbytes});")
        lines.append("  }")
        return "\n".join(lines)
