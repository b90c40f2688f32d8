"""Device kernels, written ONCE as scalar C per output element (or per row).

Each entry of :data:`LOWERINGS` (keyed by ONNX op type) takes a node and a
:class:`~.generate.KernelContext` and returns a :class:`Kernel`: how many work items to
launch and the body lines. A body reads ``gid`` (the work item's flat index, already
checked against the count), reads inputs through ``ctx.ptr(value)`` and stores every
element with ``ctx.store(flat_index, value)``, which applies the fused elementwise
epilogue. The body is plain C: :mod:`.dialect` makes it OpenCL C or CUDA C.

Shapes, strides and windows come from the ops' own helpers (``conv_geometry``,
``pool_geometry``, ``softmax_view``, ``slice`` params...), so the semantics are those of
the C backend and the ONNX operator specs. Simple and correct first: no tiling, no
local memory (docs/devices.md).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....errors import UnsupportedOpError
from ...ir import Node
from ...ops.base import c_literal, ctype, op_of
from ...ops.nn._common import window_dims
from ...ops.tensor.loops import broadcast_strides, contiguous_strides, normalize_axis

__all__ = ["LOWERINGS", "Kernel", "decompose", "flat_of"]

logger = logging.getLogger(__name__)


@dataclass
class Kernel:
    """One kernel's work: ``items`` work items, each running ``body`` (C lines)."""

    items: int
    body: list[str]


def decompose(flat: str, shape: Sequence[int], prefix: str) -> list[str]:
    """C lines declaring ``prefix<d>``, the row-major index of ``flat`` in ``shape``."""
    strides = contiguous_strides(shape)
    lines = []
    for d, (n, s) in enumerate(zip(shape, strides)):
        expr = f"({flat}) / {s}" if s != 1 else f"({flat})"
        if d > 0:
            expr = f"({expr}) % {n}"
        lines.append(f"const idx_t {prefix}{d} = {expr};")
    return lines


def flat_of(index: Sequence[str], strides: Sequence[int]) -> str:
    """C expression ``sum(index[d] * strides[d])`` (0 strides skipped)."""
    terms = [i if s == 1 else f"{i} * {s}" for i, s in zip(index, strides) if s != 0]
    return " + ".join(terms) or "0"


def _acc_type(node: Node) -> str:
    return ctype(node.outputs[0].dtype)


def _elementwise_kernel(node: Node, ctx: Any, acc_lines: list[str]) -> Kernel:
    """A per-output-element kernel whose ``acc_lines`` set ``acc``."""
    return Kernel(node.outputs[0].size, [*acc_lines, *ctx.store("gid", "acc")])


# ---- nn -----------------------------------------------------------------------------


def conv(node: Node, ctx: Any) -> Kernel:
    """Conv (ONNX Conv 1/11): 1-D or 2-D, groups (depthwise), strides, dilations, pads,
    optional bias; one output element per work item."""
    from ...ops.nn.conv import conv_geometry

    x, w, b = node.inputs[0], node.inputs[1], node.input(2)
    y = node.outputs[0]
    if len(x.shape) not in (3, 4):
        raise UnsupportedOpError(
            f"device Conv (node {node.name!r}): only 1-D and 2-D, got {x.shape}"
        )
    g = window_dims(list(x.shape[2:]), conv_geometry(node))
    group = int(node.attrs.get("group", 1))
    C, OC = x.shape[1], y.shape[1]
    cg, ocg = C // group, OC // group
    T = _acc_type(node)
    i = decompose("gid", [y.shape[0], OC, g["OH"], g["OW"]], "i")
    pointwise = all(g[k] == 1 for k in ("KH", "KW", "SH", "SW")) and not any(
        g[k] for k in ("PT", "PB", "PL", "PR")
    )
    if pointwise:  # 1x1: a dot product over channels, neighbours read neighbours
        hw = g["H"] * g["W"]
        body = [
            *i,
            (
                f"{ctx.dialect.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)} + "
                f"(i0 * {C} + (i1 / {ocg}) * {cg}) * {hw} + i2 * {g['W']} + i3;"
            ),
            f"{ctx.dialect.pointer(ctype(w.dtype), True)} Wt = {ctx.ptr(w)} + i1 * {cg};",
            f"{T} acc = {ctx.ptr(b) + '[i1]' if b is not None else c_literal(0, y.dtype)};",
            f"for (int c = 0; c < {cg}; ++c) acc += X[c * {hw}] * Wt[c];",
        ]
        return _elementwise_kernel(node, ctx, body)
    body = [
        *i,
        f"{ctx.dialect.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)};",
        f"{ctx.dialect.pointer(ctype(w.dtype), True)} Wt = {ctx.ptr(w)};",
        f"{T} acc = {ctx.ptr(b) + '[i1]' if b is not None else c_literal(0, y.dtype)};",
        f"const idx_t c0 = (i1 / {ocg}) * {cg};",
        f"for (idx_t c = 0; c < {cg}; ++c) {{",
        f"  const idx_t xb = ((i0 * {C} + c0 + c) * {g['H']}) * {g['W']};",
        f"  const idx_t wb = ((i1 * {cg} + c) * {g['KH']}) * {g['KW']};",
        f"  for (idx_t kh = 0; kh < {g['KH']}; ++kh) {{",
        f"    const idx_t ih = i2 * {g['SH']} - {g['PT']} + kh * {g['DH']};",
        f"    if (ih < 0 || ih >= {g['H']}) continue;",
        f"    for (idx_t kw = 0; kw < {g['KW']}; ++kw) {{",
        f"      const idx_t iw = i3 * {g['SW']} - {g['PL']} + kw * {g['DW']};",
        f"      if (iw < 0 || iw >= {g['W']}) continue;",
        f"      acc += X[xb + ih * {g['W']} + iw] * Wt[wb + kh * {g['KW']} + kw];",
        "    }",
        "  }",
        "}",
    ]
    return _elementwise_kernel(node, ctx, body)


def pool(node: Node, ctx: Any) -> Kernel:
    """MaxPool / AveragePool (1-D, 2-D) and GlobalAveragePool / GlobalMaxPool: one
    output element per work item; AveragePool divides by the input elements in the
    window (``count_include_pad=0``) or the positions inside the padded input (1)."""
    from ...ops.nn.pool import pool_geometry

    x, y = node.inputs[0], node.outputs[0]
    if len(x.shape) not in (3, 4):
        raise UnsupportedOpError(f"device {node.op_type} (node {node.name!r}): 1-D or 2-D only")
    if node.op_type.startswith("Global"):
        sp = list(x.shape[2:])
        g = {
            "H": 1,
            "W": 1,
            "KH": 1,
            "KW": 1,
            "SH": 1,
            "SW": 1,
            "PT": 0,
            "PB": 0,
            "PL": 0,
            "PR": 0,
            "DH": 1,
            "DW": 1,
            "OH": 1,
            "OW": 1,
        }
        g["H"], g["W"] = (sp[0], sp[1]) if len(sp) == 2 else (1, sp[0])
        g["KH"], g["KW"] = g["H"], g["W"]
    else:
        g = window_dims(list(x.shape[2:]), pool_geometry(node))
    is_max = "Max" in node.op_type
    T = _acc_type(node)
    init = "(-INFINITY)" if is_max else c_literal(0, y.dtype)
    combine = "acc = fmaxf(acc, v);" if is_max else "acc += v; ++n;"
    if T == "double":
        combine = combine.replace("fmaxf", "fmax")
    body = [
        *decompose("gid", [y.shape[0] * y.shape[1], g["OH"], g["OW"]], "i"),
        f"{ctx.dialect.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)} + i0 * {g['H'] * g['W']};",
        f"{T} acc = {init};",
        "idx_t n = 0;",
        f"for (idx_t kh = 0; kh < {g['KH']}; ++kh) {{",
        f"  const idx_t ih = i1 * {g['SH']} - {g['PT']} + kh * {g['DH']};",
        f"  if (ih < 0 || ih >= {g['H']}) continue;",
        f"  for (idx_t kw = 0; kw < {g['KW']}; ++kw) {{",
        f"    const idx_t iw = i2 * {g['SW']} - {g['PL']} + kw * {g['DW']};",
        f"    if (iw < 0 || iw >= {g['W']}) continue;",
        f"    const {T} v = X[ih * {g['W']} + iw];",
        f"    {combine}",
        "  }",
        "}",
        "(void)n;",
    ]
    if not is_max:
        if node.attrs.get("count_include_pad", 0):
            # positions of the window inside [-PT, H + PB) x [-PL, W + PR)
            body += [
                f"const idx_t h0 = i1 * {g['SH']} - {g['PT']}, w0 = i2 * {g['SW']} - {g['PL']};",
                f"const idx_t h1 = min(h0 + {g['KH']}, (idx_t){g['H'] + g['PB']});",
                f"const idx_t w1 = min(w0 + {g['KW']}, (idx_t){g['W'] + g['PR']});",
                "n = (h1 - h0) * (w1 - w0);",
            ]
        body.append(f"acc = acc / ({T})n;")
    return _elementwise_kernel(node, ctx, body)


def _matmul_operand(v, k: int, is_a: bool) -> tuple[tuple[int, ...], int]:
    """(batch shape, matrix rows) of a MatMul operand, 1-D vectors promoted (numpy)."""
    if len(v.shape) == 1:
        return (), 1 if is_a else k
    return tuple(v.shape[:-2]), v.shape[-2]


def matmul(node: Node, ctx: Any) -> Kernel:
    """MatMul (numpy semantics: batch broadcast, 1-D operands): one output element per
    work item, a dot product over K."""
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    K = a.shape[-1]
    N = b.shape[-1] if len(b.shape) > 1 else 1
    ab, M = _matmul_operand(a, K, True)
    bb, _ = _matmul_operand(b, K, False)
    batch = tuple(np.broadcast_shapes(ab, bb))
    full = [*batch, M, N]
    T = _acc_type(node)
    idx = [f"i{d}" for d in range(len(full))]
    a_st = broadcast_strides(ab, batch) if batch else ()
    b_st = broadcast_strides(bb, batch) if batch else ()
    a_off = flat_of(idx[: len(batch)], [s * M * K for s in a_st])
    b_off = flat_of(idx[: len(batch)], [s * K * N for s in b_st])
    body = [
        *decompose("gid", full, "i"),
        f"{ctx.dialect.pointer(ctype(a.dtype), True)} A = {ctx.ptr(a)} + {a_off} + i{len(batch)} * {K};",
        f"{ctx.dialect.pointer(ctype(b.dtype), True)} B = {ctx.ptr(b)} + {b_off} + i{len(batch) + 1};",
        f"{T} acc = {c_literal(0, y.dtype)};",
        f"for (idx_t k = 0; k < {K}; ++k) acc += A[k] * B[k * {N}];",
    ]
    return _elementwise_kernel(node, ctx, body)


def gemm(node: Node, ctx: Any) -> Kernel:
    """Gemm (ONNX 7/9/11/13): ``alpha * A' @ B' + beta * C`` (C unidirectionally
    broadcast to ``[M, N]``), A' and B' transposed per ``transA`` / ``transB``."""
    a, b, c, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    M, N = y.shape
    ta, tb = int(node.attrs.get("transA", 0)), int(node.attrs.get("transB", 0))
    K = a.shape[0] if ta else a.shape[1]
    a_idx = f"k * {M} + i0" if ta else f"i0 * {K} + k"
    b_idx = f"i1 * {K} + k" if tb else f"k * {N} + i1"
    T = _acc_type(node)
    alpha = c_literal(node.attrs.get("alpha", 1.0), y.dtype)
    beta = c_literal(node.attrs.get("beta", 1.0), y.dtype)
    body = [
        *decompose("gid", [M, N], "i"),
        f"{ctx.dialect.pointer(ctype(a.dtype), True)} A = {ctx.ptr(a)};",
        f"{ctx.dialect.pointer(ctype(b.dtype), True)} B = {ctx.ptr(b)};",
        f"{T} acc = {c_literal(0, y.dtype)};",
        f"for (idx_t k = 0; k < {K}; ++k) acc += A[{a_idx}] * B[{b_idx}];",
        f"acc = {alpha} * acc;",
    ]
    if c is not None:
        st = broadcast_strides(c.shape, (M, N))
        body.append(f"acc += {beta} * {ctx.ptr(c)}[{flat_of(['i0', 'i1'], st)}];")
    return _elementwise_kernel(node, ctx, body)


# ---- math ---------------------------------------------------------------------------


def softmax(node: Node, ctx: Any) -> Kernel:
    """Softmax / LogSoftmax (1, 11: 2-D coercion; 13: one axis): one row per work item
    (max, sum of exponentials, normalize: the C backend's order of operations)."""
    from ...ops.math.softmax import softmax_view

    op = op_of(node)
    x = node.inputs[0]

    outer, n, inner = softmax_view(x.shape, node.attrs["axis"], op.coerce_2d)
    T = _acc_type(node)
    f = (lambda name: name + "f") if T == "float" else (lambda name: name)
    last = "v - m - L" if op.log else "e * inv"
    body = [
        f"const idx_t base = (gid / {inner}) * {n * inner} + gid % {inner};",
        f"{ctx.dialect.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)} + base;",
        f"{T} m = X[0];",
        f"for (idx_t j = 1; j < {n}; ++j) m = {f('fmax')}(m, X[j * {inner}]);",
        f"{T} s = 0;",
        f"for (idx_t j = 0; j < {n}; ++j) s += {f('exp')}(X[j * {inner}] - m);",
        f"const {T} inv = ({T})1 / s, L = {f('log')}(s);",
        "(void)inv; (void)L;",
        f"for (idx_t j = 0; j < {n}; ++j) {{",
        f"  const {T} v = X[j * {inner}], e = {f('exp')}(v - m);",
        "  (void)e;",
        *("  " + s for s in ctx.store(f"base + j * {inner}", last)),
        "}",
    ]
    return Kernel(outer * inner, body)


_REDUCE = {  # op -> (initial value, combine(acc, v), finish(acc, count))
    "ReduceMean": ("0", "acc + v", "acc / ({T})" + "{R}"),
    "ReduceSum": ("0", "acc + v", "acc"),
    "ReduceMax": ("(-INFINITY)", "(v > acc ? v : acc)", "acc"),
    "ReduceMin": ("INFINITY", "(v < acc ? v : acc)", "acc"),
    "ReduceProd": ("1", "acc * v", "acc"),
    "ReduceSumSquare": ("0", "acc + v * v", "acc"),
    "ReduceL1": ("0", "acc + (v < 0 ? -v : v)", "acc"),
}


def reduce(node: Node, ctx: Any) -> Kernel:
    """ReduceMean/Sum/Max/Min/Prod/SumSquare/L1 over any axes (float): one output
    element per work item, a loop over the reduced elements."""
    x = node.inputs[0]
    if x.dtype.kind != "f":
        raise UnsupportedOpError(f"device {node.op_type} (node {node.name!r}): floats only")
    axes = op_of(node).axes(node)
    kept = [1 if d in axes else n for d, n in enumerate(x.shape)]
    red = [x.shape[d] for d in axes]
    R = max(1, math.prod(red))
    st = contiguous_strides(x.shape)
    T = _acc_type(node)
    init, comb, fin = _REDUCE[node.op_type]
    inner = [f"  {line}" for line in decompose("r", red, "j")] if red else []
    base = flat_of([f"i{d}" for d in range(len(kept))], st)
    off = flat_of([f"j{k}" for k in range(len(red))], [st[d] for d in axes])
    body = [
        *decompose("gid", kept, "i"),
        f"{ctx.dialect.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)} + {base};",
        f"{T} acc = {init};",
        f"for (idx_t r = 0; r < {R if red else 1}; ++r) {{",
        *inner,
        f"  const {T} v = X[{off if red else '0'}];",
        f"  acc = {comb};",
        "}",
        f"acc = {fin.format(T=T, R=R)};",
    ]
    return _elementwise_kernel(node, ctx, body)


# ---- tensor -------------------------------------------------------------------------


def _gather_kernel(node: Node, ctx: Any, src_index: Callable[[list[str]], str]) -> Kernel:
    """out[i] = X[src_index(i)]: a data-movement op as one element per work item."""
    x, y = node.inputs[0], node.outputs[0]
    body = [
        *decompose("gid", y.shape, "i"),
        f"const {_acc_type(node)} acc = {ctx.ptr(x)}[{src_index([f'i{d}' for d in range(len(y.shape))])}];",
    ]
    return _elementwise_kernel(node, ctx, body)


def transpose(node: Node, ctx: Any) -> Kernel:
    """Transpose: ``out[i] = in[i permuted back]``."""
    from ...ops.tensor.transpose import transpose_perm

    perm = transpose_perm(node)
    st = contiguous_strides(node.inputs[0].shape)
    return _gather_kernel(node, ctx, lambda i: flat_of(i, [st[p] for p in perm]))


def slice_(node: Node, ctx: Any) -> Kernel:
    """Slice (1, 10, 11, 13): ``out[i] = in[start + i * step]`` per dim."""
    params = op_of(node).params(node)
    st = contiguous_strides(node.inputs[0].shape)

    def src(i: list[str]) -> str:
        terms = [str(sum(s * p[0] for s, p in zip(st, params)))]
        terms += [f"{v} * {s * p[1]}" for v, s, p in zip(i, st, params) if s * p[1] != 0]
        return " + ".join(terms)

    return _gather_kernel(node, ctx, src)


def concat(node: Node, ctx: Any) -> Kernel:
    """Concat: each output element reads the input whose range on ``axis`` holds it."""
    y = node.outputs[0]
    a = normalize_axis(node.attrs["axis"], len(y.shape), f"Concat (node {node.name!r})")
    idx = [f"i{d}" for d in range(len(y.shape))]
    T = _acc_type(node)
    body = [*decompose("gid", y.shape, "i"), f"{T} acc;"]
    start = 0
    for k, v in enumerate(node.inputs):
        n = v.shape[a]
        if n == 0:
            continue
        src = [i if d != a else f"({i} - {start})" for d, i in enumerate(idx)]
        cond = "" if k == len(node.inputs) - 1 else f"if (i{a} < {start + n}) "
        body.append(
            f"{'else ' if start else ''}{cond}acc = {ctx.ptr(v)}[{flat_of(src, contiguous_strides(v.shape))}];"
        )
        start += n
    return _elementwise_kernel(node, ctx, body)


#: op type -> lowering; merged per target as a table, never an if-chain
LOWERINGS: dict[str, Callable[[Node, Any], Kernel]] = {
    "Conv": conv,
    "MaxPool": pool,
    "AveragePool": pool,
    "GlobalAveragePool": pool,
    "GlobalMaxPool": pool,
    "MatMul": matmul,
    "Gemm": gemm,
    "Softmax": softmax,
    "LogSoftmax": softmax,
    "Transpose": transpose,
    "Slice": slice_,
    "Concat": concat,
    **{op: reduce for op in _REDUCE},
}
