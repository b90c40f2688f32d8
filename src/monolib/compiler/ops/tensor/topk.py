"""ONNX ``TopK`` (10, 11): the ``K`` largest (``largest=1``) or smallest elements along
``axis`` and their int64 indices, sorted; equal values keep the lower index first (the
spec's tie rule). A constant ``K`` gives a static shape; a run-time ``K`` (issue 13)
makes the output dim a computed symbol bounded by the axis length: the kernel reads
``K`` (clamped to ``[0, dim]``), keeps buffers for the whole axis and writes the symbol.

The emitter keeps a sorted buffer of the best ``K`` per (outer, inner) position and
inserts each element by shifting (``O(n K)``, fine for the small ``K`` of
classification heads and detectors)."""

from __future__ import annotations

import logging

import numpy as np

from ....errors import ShapeError
from ...backends.cstyle import ctype
from ...ir import Node, shape_size
from ...symbolic import Dim
from ..base import EmitContext, OpDef, OutType, register
from ._computed import count_dim, is_runtime, upper
from .loops import const_ints, normalize_axis

__all__ = ["TopK"]

logger = logging.getLogger(__name__)


@register
class TopK(OpDef):
    """``TopK``: outputs ``Values`` (input dtype) and ``Indices`` (int64).

    Raises
    ------
    ShapeError
        When a constant ``K`` is not in ``[0, dim]``.
    """

    op_type, since_version = "TopK", 10
    also_versions = (24,)  # 24 adds bfloat16 only
    defaults = {"largest": 1}

    def _view(self, node: Node) -> tuple:
        x = node.inputs[0]
        where = f"TopK (node {node.name!r})"
        a = normalize_axis(node.attrs["axis"], len(x.shape), where)
        outer, inner = shape_size(x.shape[:a]), shape_size(x.shape[a + 1 :])  # Dims kept
        if is_runtime(node.input(1)):  # the output dim is computed, K read at run time
            out = node.outputs[0].shape if node.outputs else ()
            k = out[a] if len(out) > a and isinstance(out[a], Dim) else None
            if k is None:
                k = count_dim(node, 0, a, "k", x.shape[a])
            return a, outer, x.shape[a], inner, k
        k = const_ints(node, 1, "K")
        if k is None or len(k) != 1 or not 0 <= k[0] <= x.shape[a]:
            raise ShapeError(f"{where}: K must be in [0, {x.shape[a]}], got {k}")
        return a, outer, x.shape[a], inner, k[0]

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        a, _, _, _, k = self._view(node)
        shape = x.shape[:a] + (k,) + x.shape[a + 1 :]
        return [(shape, x.dtype), (shape, np.dtype(np.int64))][: max(len(node.outputs), 1)]

    def reference(self, node: Node, inputs):
        x = inputs[0]
        a, _, _, _, k = self._view(node)
        key = -x if self.attr(node, "largest") else x
        if x.dtype.kind in "ub" and self.attr(node, "largest"):
            key = -x.astype(np.int64)
        order = np.argsort(key, axis=a, kind="stable")
        idx = np.take(order, np.arange(k), axis=a)
        return [np.take_along_axis(x, idx, axis=a), idx.astype(np.int64)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        _, outer, n, inner, k = self._view(node)
        runtime = is_runtime(node.input(1))
        if not isinstance(k, Dim) and k == 0 or outer * inner == 0:
            return ""
        ct = ctype(x.dtype)
        better = ">" if self.attr(node, "largest") else "<"
        o, i, j, p = (ctx.unique(s) for s in ("o", "i", "j", "p"))
        bv, bi, cnt, v = ctx.unique("bv"), ctx.unique("bi"), ctx.unique("cnt"), ctx.unique("v")
        cap = upper(n) if runtime else k  # buffer length
        kk = ctx.unique("k") if runtime else k
        vals = ctx.ptr(node.outputs[0])
        idxs = (
            ctx.ptr(node.outputs[1])
            if len(node.outputs) > 1 and node.outputs[1] is not None
            else None
        )
        out_off = f"({o}*{kk} + {p})*{inner} + {i}"
        stores = f"{vals}[{out_off}] = {bv}[{p}];" + (
            f" {idxs}[{out_off}] = {bi}[{p}];" if idxs else ""
        )
        head = ""
        if runtime:  # K clamped into [0, dim]; the computed dim is this K
            kv = f"(int64_t){ctx.ptr(node.inputs[1])}[0]"
            head = (f"int64_t {kk} = {kv}; if ({kk} < 0) {kk} = 0; if ({kk} > {n}) {kk} = {n};\n"
                    f"{ctx.set_symbol(k, kk)}\nif ({kk} > 0) ")
        # strict comparison: a later equal element never passes an earlier one
        return head + (
            f"{{\n{ct}* {bv} = ({ct}*){ctx.scratch(cap * x.dtype.itemsize)};\n"
            f"int64_t* {bi} = (int64_t*){ctx.scratch(cap * 8)};\n"
            f"for (int64_t {o} = 0; {o} < {outer}; ++{o}) for (int64_t {i} = 0; {i} < {inner}; ++{i}) {{\n"
            f"  int64_t {cnt} = 0;\n"
            f"  for (int64_t {j} = 0; {j} < {n}; ++{j}) {{\n"
            f"    {ct} {v} = {ctx.ptr(x)}[({o}*{n} + {j})*{inner} + {i}];\n"
            f"    if ({cnt} == {kk} && !({v} {better} {bv}[{kk} - 1])) continue;\n"
            f"    int64_t {p} = {cnt} < {kk} ? {cnt}++ : {kk} - 1;\n"
            f"    while ({p} > 0 && {v} {better} {bv}[{p} - 1]) {{ {bv}[{p}] = {bv}[{p} - 1]; {bi}[{p}] = {bi}[{p} - 1]; --{p}; }}\n"
            f"    {bv}[{p}] = {v}; {bi}[{p}] = {j};\n"
            f"  }}\n"
            f"  for (int64_t {p} = 0; {p} < {kk}; ++{p}) {{ {stores} }}\n"
            f"}}\n}}"
        )
