"""ONNX ``Unique`` (11, 28) (ONNX operator spec, "Unique"): the unique values of X (or
its unique slices along ``axis``), sorted ascending (``sorted=1``, slices compared
lexicographically) or in order of first occurrence (``sorted=0``), with int64
``indices`` (first occurrence), ``inverse_indices`` and ``counts``.

A constant X folds at compile time. A run-time X (issue 13): the number of unique
values ``U`` is a computed dim bounded by the number of elements (or of slices); the
kernel gathers the slices into rows, merge-sorts their indices (stable: equal rows keep
ascending index, so a run's first index is the first occurrence), walks the runs, and
writes ``U`` for the ops after it.
"""

from __future__ import annotations

import logging

import numpy as np

from ...backends.cstyle import ctype
from ...ir import Node, shape_size
from ...symbolic import Dim
from ..base import EmitContext, OpDef, OutType, register
from ._computed import count_dim, is_runtime, upper
from .loops import normalize_axis

__all__ = ["Unique"]

logger = logging.getLogger(__name__)

# Stable bottom-up merge sort of row indices by their rows (L values of type T each).
_SORT = """
static void ml_uniq_sort_{N}(int64_t* idx, int64_t* tmp, int64_t n, const {T}* rows, int64_t L) {{
  for (int64_t w = 1; w < n; w *= 2) {{
    for (int64_t lo = 0; lo < n; lo += 2 * w) {{
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {{
        const {T}* a = rows + idx[i] * L; const {T}* b = rows + idx[j] * L;
        int64_t t = 0;
        while (t < L && a[t] == b[t]) ++t;
        tmp[k++] = (t < L && b[t] < a[t]) ? idx[j++] : idx[i++];
      }}
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }}
    for (int64_t k = 0; k < n; ++k) idx[k] = tmp[k];
  }}
}}
"""


@register
class Unique(OpDef):
    """``Unique``: X -> Y, indices, inverse_indices, counts (outputs 1-3 optional)."""

    op_type, since_version = "Unique", 11
    also_versions = (28,)  # 28 only added bfloat16
    defaults = {"axis": None}

    def _axis(self, node: Node) -> int | None:
        axis = self.attr(node, "axis")
        if axis is None:
            return None
        return normalize_axis(int(axis), len(node.inputs[0].shape), f"Unique (node {node.name!r})")

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        i64 = np.dtype(np.int64)
        if not is_runtime(x):
            outs = self.reference(node, [x.const])
            return [(o.shape, o.dtype) for o in outs][: len(node.outputs)]
        axis = self._axis(node)
        rows = shape_size(x.shape) if axis is None else x.shape[axis]
        u = count_dim(node, 0, 0 if axis is None else axis, "unique", rows)
        y = (u,) if axis is None else (*x.shape[:axis], u, *x.shape[axis + 1:])
        return [(y, x.dtype), ((u,), i64), ((rows,), i64), ((u,), i64)][: len(node.outputs)]

    def reference(self, node: Node, inputs):
        x = np.asarray(inputs[0])
        axis = self._axis(node)
        y, first, inverse, counts = np.unique(x, return_index=True, return_inverse=True,
                                              return_counts=True, axis=axis)
        if not node.attrs["sorted"]:  # order of first occurrence
            order = np.argsort(first, kind="stable")
            rank = np.empty_like(order)
            rank[order] = np.arange(order.size)
            y = np.take(y, order, axis=0 if axis is None else axis)
            first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
        i64 = lambda a: np.asarray(a, np.int64).reshape(-1)
        return [y, i64(first), i64(inverse), i64(counts)]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        outs = list(node.outputs) + [None] * (4 - len(node.outputs))
        y = outs[0]
        axis = self._axis(node)
        u = y.shape[0 if axis is None else axis]
        if not isinstance(u, Dim):
            return ""  # X holds no element at any size
        T = ctype(x.dtype)
        tname = T.replace(" ", "_")
        ctx.helper(_SORT.format(N=tname, T=T))
        if axis is None:
            outer, rows, inner = 1, shape_size(x.shape), 1
        else:
            outer, rows, inner = (shape_size(x.shape[:axis]), x.shape[axis],
                                  shape_size(x.shape[axis + 1:]))
        L = 1 if axis is None else outer * inner
        n_hi = upper(rows)
        idx, tmp, first, cnt, order = (f"((int64_t*){ctx.scratch(8 * n_hi)})" for _ in range(5))
        xs = ctx.ptr(x)
        lines = ["{"]
        if axis is None:
            rows_ptr = xs
        else:  # row j = the slice x[:, j, :] made contiguous
            rows_ptr = f"(({T}*){ctx.scratch(upper(shape_size(x.shape)) * x.dtype.itemsize)})"
            lines.append(
                f"  for (int64_t o = 0; o < {outer}; ++o) for (int64_t j = 0; j < {rows}; ++j)"
                f" for (int64_t i = 0; i < {inner}; ++i)"
                f" {rows_ptr}[j * {L} + o * {inner} + i] = {xs}[(o * {rows} + j) * {inner} + i];"
            )
        inv = ctx.ptr(outs[2]) if outs[2] is not None else f"((int64_t*){ctx.scratch(8 * n_hi)})"
        sorted_ = bool(node.attrs["sorted"])
        lines += [
            f"  const int64_t n = {rows}, L = {L};",
            f"  for (int64_t j = 0; j < n; ++j) {idx}[j] = j;",
            f"  ml_uniq_sort_{tname}({idx}, {tmp}, n, {rows_ptr}, L);",
            "  int64_t nu = 0;",
            "  for (int64_t t = 0; t < n; ++t) {",
            f"    const {T}* a = {rows_ptr} + {idx}[t] * L;",
            "    int newrun = t == 0;",
            (f"    if (!newrun) {{ const {T}* b = {rows_ptr} + {idx}[t - 1] * L;"
            " for (int64_t q = 0; q < L; ++q) if (a[q] != b[q]) { newrun = 1; break; } }"),
            f"    if (newrun) {{ {first}[nu] = {idx}[t]; {cnt}[nu] = 0; ++nu; }}",
            f"    {cnt}[nu - 1] += 1; {inv}[{idx}[t]] = nu - 1;",
            "  }",
        ]
        if sorted_:
            lines.append(f"  for (int64_t k = 0; k < nu; ++k) {order}[k] = k;")
        else:  # by first occurrence: tmp[j] = 1 + the run whose first index is j
            lines += [
                f"  for (int64_t j = 0; j < n; ++j) {tmp}[j] = 0;",
                f"  for (int64_t k = 0; k < nu; ++k) {tmp}[{first}[k]] = k + 1;",
                "  { int64_t m = 0;",
                f"    for (int64_t j = 0; j < n; ++j)"
                f" if ({tmp}[j]) {order}[m++] = {tmp}[j] - 1; }}",
                f"  for (int64_t k = 0; k < nu; ++k) {tmp}[{order}[k]] = k;  /* run -> rank */",
                f"  for (int64_t j = 0; j < n; ++j) {inv}[j] = {tmp}[{inv}[j]];",
            ]
        ys = ctx.ptr(y)
        lines.append(
            f"  for (int64_t o = 0; o < {outer}; ++o) for (int64_t k = 0; k < nu; ++k)"
            f" for (int64_t i = 0; i < {inner}; ++i)"
            f" {ys}[(o * nu + k) * {inner} + i] ="
            f" {xs}[(o * n + {first}[{order}[k]]) * {inner} + i];"
        )
        if outs[1] is not None:
            lines.append(f"  for (int64_t k = 0; k < nu; ++k) "
                         f"{ctx.ptr(outs[1])}[k] = {first}[{order}[k]];")
        if outs[3] is not None:
            lines.append(f"  for (int64_t k = 0; k < nu; ++k) "
                         f"{ctx.ptr(outs[3])}[k] = {cnt}[{order}[k]];")
        lines += [f"  {ctx.set_symbol(u, 'nu')}", "}"]
        return "\n".join(lines)
