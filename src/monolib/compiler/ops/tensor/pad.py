"""ONNX ``Pad``: version 2 (``pads``/``value`` attributes), 11 and 13 (``pads`` and
optional ``constant_value`` inputs), 18 (optional ``axes`` input), 19 (``wrap`` mode).

``pads`` is ``[b_1, ..., b_n, e_1, ..., e_n]``; negative entries crop. Modes:
``constant`` (fill), ``reflect`` (mirror without repeating the edge), ``edge``
(repeat the edge), ``wrap`` (periodic). In C, each output dim's source index is
computed once per loop level; an index outside the input selects the constant (or
is mirrored/clamped/wrapped).
"""

from __future__ import annotations

import logging
from typing import ClassVar

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, shape_size
from ...symbolic import is_dim, is_one
from ..base import EmitContext, OutType, register
from ...backends.cstyle import c_literal, ctype
from .flat import FlatEpilogueOp
from .loops import const_ints, contiguous_strides, has_epilogue, linear_offset, normalize_axis

__all__ = ["Pad2", "Pad11", "Pad18", "pad_amounts"]

logger = logging.getLogger(__name__)

_MODES = ("constant", "reflect", "edge", "wrap")


def pad_amounts(
    rank: int, pads: list[int], axes: list[int] | None, where: str
) -> list[tuple[int, int]]:
    """``(begin, end)`` per dim.

    Raises
    ------
    ShapeError
        When ``pads`` does not have two entries per (selected) axis.
    """
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank, where) for a in axes]
    if len(pads) != 2 * len(axes):
        raise ShapeError(f"{where}: pads has {len(pads)} entries for {len(axes)} axes")
    out = [(0, 0)] * rank
    k = len(axes)
    for i, a in enumerate(axes):
        out[a] = (int(pads[i]), int(pads[i + k]))
    return out


def _map_index(s: str, n: int, mode: str) -> str:
    """C statements bringing source index ``s`` into ``[0, n)`` for ``mode``."""
    if mode == "edge":
        return f"if ({s} < 0) {s} = 0; else if ({s} >= {n}) {s} = {n - 1};"
    if mode == "wrap":
        return f"{s} %= {n}; if ({s} < 0) {s} += {n};"
    # reflect: period 2(n-1), then mirror the upper half
    p = 2 * (n - 1)
    reflect = f"{s} %= {p}; if ({s} < 0) {s} += {p}; if ({s} >= {n}) {s} = {p} - {s};"
    if is_dim(n):  # a run-time size may be 1 (period 0): decided when the op runs
        return f"if ({n} == 1) {s} = 0; else {{ {reflect} }}"
    return f"{s} = 0;" if n == 1 else reflect


class _Pad(FlatEpilogueOp):
    attrs_version: ClassVar[bool] = False

    def _config(self, node: Node):
        x = node.inputs[0]
        where = f"Pad (node {node.name!r})"
        mode = node.attrs["mode"]
        if mode not in _MODES:
            raise UnsupportedOpError(
                f"{where}: mode {mode!r} is not supported ({', '.join(_MODES)})"
            )
        if self.attrs_version:
            pads, axes = node.attrs["pads"], None
        else:
            pads, axes = const_ints(node, 1, "pads"), const_ints(node, 3, "axes")
        amounts = pad_amounts(len(x.shape), pads, axes, where)
        shape = tuple(n + b + e for n, (b, e) in zip(x.shape, amounts))
        if any(d < 0 for d in shape):
            raise ShapeError(f"{where}: pads {pads} crop more than the input {list(x.shape)}")
        if mode != "constant" and any(n == 0 and d > 0 for n, d in zip(x.shape, shape)):
            raise ShapeError(f"{where}: cannot {mode}-pad an empty dim")
        return mode, amounts, shape

    def infer(self, node: Node) -> list[OutType]:
        return [(self._config(node)[2], node.inputs[0].dtype)]

    def _value(self, node: Node):
        if self.attrs_version:
            return node.attrs["value"]
        v = node.input(2)
        if v is None:
            return 0
        return None if v.const is None else v.const.reshape(-1)[0].item()

    def reference(self, node: Node, inputs):
        x = inputs[0]
        mode, amounts, _ = self._config(node)
        crop = tuple(slice(max(-b, 0), x.shape[d] - max(-e, 0)) for d, (b, e) in enumerate(amounts))
        x = x[crop]
        widths = [(max(b, 0), max(e, 0)) for b, e in amounts]
        if mode == "constant":
            value = self._value(node)
            if value is None:
                value = inputs[2].reshape(-1)[0]
            return [np.pad(x, widths, mode="constant", constant_values=np.asarray(value, x.dtype))]
        return [np.pad(x, widths, mode=mode)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x, y = node.inputs[0], node.outputs[0]
        if y.size == 0:
            return ""
        mode, amounts, shape = self._config(node)
        rank = len(shape)
        ovars = [ctx.unique("o") for _ in range(rank)]
        svars = [ctx.unique("s") for _ in range(rank)]
        ok = ctx.unique("ok")
        lines = [f"int {ok}_0 = 1;"] if mode == "constant" else []
        for d in range(rank - 1):
            n, b = x.shape[d], amounts[d][0]
            o, s = ovars[d], svars[d]
            lines.append(f"for (int64_t {o} = 0; {o} < {shape[d]}; ++{o}) {{")
            lines.append(f"int64_t {s} = {o} - ({b});")
            if mode == "constant":
                lines.append(f"int {ok}_{d + 1} = {ok}_{d} && {s} >= 0 && {s} < {n};")
            else:
                lines.append(_map_index(s, n, mode))
        if rank:
            lines += self._last_axis(node, ctx, x, y, mode, amounts, shape, ovars, svars, ok)
        lines += ["}"] * (rank - 1)
        if rank == 0:
            src = f"{ctx.ptr(x)}[0]"
            if has_epilogue(ctx, rank):
                src = ctx.output_expr(src, ovars)
            return "{\n" + f"{ctx.ptr(y)}[0] = {src};" + "\n}"
        if rank == 1:  # one axis: its three runs on the calling thread
            return "{\n" + "\n".join(lines) + "\n}"
        # the first axis longer than one (those before it are 1 long) on the thread pool:
        # output rows are disjoint; its for-line becomes the task's range (a float written
        # and one read count 8 units of work)
        split = next((d for d in range(rank - 1) if not is_one(shape[d])), 0)
        head = f"for (int64_t {ovars[split]} = 0; {ovars[split]} < {shape[split]}; ++{ovars[split]}) {{"
        at = lines.index(head)
        body = lines[:at] + lines[at + 1 : -1]
        return ctx.parallel_for(ovars[split], shape[split], "{\n" + "\n".join(body) + "\n}",
                                shape_size(list(shape)) * 8)

    def _last_axis(self, node, ctx, x, y, mode, amounts, shape, ovars, svars, ok) -> list[str]:
        """The innermost axis as three runs: the pad before the input's first element
        and after its last (indices mapped by ``mode``), and between them the input
        row itself, read in order with no mapping (a copy gcc vectorises; mapped per
        element, reflect padding of 64 x 128 x 128 ran at 0.6 ns an element, 2.7x
        ONNX Runtime)."""
        rank = len(shape)
        d = rank - 1
        n, b = x.shape[d], amounts[d][0]
        o, s = ovars[d], svars[d]
        ist = contiguous_strides(x.shape)
        flat = linear_offset(ovars, contiguous_strides(shape))
        cval = None
        if mode == "constant":
            value = self._value(node)
            cval = f"{ctx.ptr(node.inputs[2])}[0]" if value is None else c_literal(value, y.dtype)
            if cval.endswith("f") and not any(c in cval for c in ".eEIN"):
                cval = cval[:-1] + ".0f"
        lo, hi = ctx.unique("lo"), ctx.unique("hi")
        # [0, lo): before the input; [lo, hi): the input's elements; [hi, end): after
        end = f"({b}) + ({n})"
        out = [f"const int64_t {lo} = {b} < 0 ? 0 : ({b} > {shape[d]} ? {shape[d]} : {b});",
               f"const int64_t {hi} = {end} < {lo} ? {lo} : ({end} > {shape[d]} ? {shape[d]} : {end});"]
        for first, last, inside in (("0", lo, False), (lo, hi, True), (hi, str(shape[d]), False)):
            src = f"{ctx.ptr(x)}[{linear_offset(svars, ist)}]"
            stmts = [f"int64_t {s} = {o} - ({b});"]
            if mode == "constant":
                ok_in = f"{ok}_{d}" if inside else "0"
                src = f"({ok_in} ? {src} : ({ctype(y.dtype)}){cval})"
            elif not inside:
                stmts.append(_map_index(s, n, mode))
            if has_epilogue(ctx, rank):
                src = ctx.output_expr(src, ovars)
            stmts.append(f"{ctx.ptr(y)}[{flat}] = {src};")
            out.append(f"for (int64_t {o} = {first}; {o} < {last}; ++{o}) {{")
            out += stmts + ["}"]
        return out


@register
class Pad2(_Pad):
    """``Pad`` 2: ``pads``, ``mode``, ``value`` attributes."""

    op_type, since_version, attrs_version = "Pad", 2, True


@register
class Pad11(_Pad):
    """``Pad`` 11, 13: ``pads`` and optional ``constant_value`` inputs."""

    op_type, since_version = "Pad", 11


@register
class Pad18(_Pad):
    """``Pad`` 18, 19, 21: adds the optional ``axes`` input (19: ``wrap`` mode)."""

    op_type, since_version = "Pad", 18
    also_versions = (23, 24, 25)  # new element types only
