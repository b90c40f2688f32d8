"""MaxPool, AveragePool, LpPool, GlobalAveragePool, GlobalMaxPool (ONNX opsets 1..22).

Sliding windows per the ONNX spec: ``pads``/``auto_pad``, ``strides``, ``dilations``,
``ceil_mode`` (a window never starts in the end padding). AveragePool divides by the
number of input elements in the window (``count_include_pad=0``) or by the number of
window positions inside the explicitly padded input (``count_include_pad=1``; positions
beyond the padding, reachable only with ``ceil_mode``, never count). MaxPool's optional
``Indices`` output is the flat index into X, row-major (``storage_order=0``) or
column-major over the spatial dims (``storage_order=1``, the ONNX reference's rule).
MaxPool takes float32, float64, int8 and uint8; AveragePool float32.

Emitted as direct loops over N-D windows (1-D, 2-D, 3-D...), writing each output through
``ctx.output_expr`` so a fused elementwise epilogue costs nothing extra.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node, shape_size
from ...symbolic import Dim
from ..base import EmitContext, OpDef, OutType, op_of, register
from ...backends.cstyle import c_literal, ctype
from .._constants import include_checked
from ._common import Geometry, geometry, require_float32, window_dims

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = ["AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "MaxPool", "pool_geometry"]

logger = logging.getLogger(__name__)


def pool_geometry(node: Node) -> Geometry:
    """Window geometry of a MaxPool/AveragePool node.

    Raises
    ------
    ShapeError
        When X is not ``[N, C, ...]`` or the window does not fit.
    """
    x = node.inputs[0]
    if x is None or len(x.shape) < 3:
        raise ShapeError(
            f"{node.op_type} node {node.name!r}: X must be [N, C, ...], got {x and x.shape}"
        )
    kernel = [int(k) for k in node.attrs.get("kernel_shape") or []]
    if len(kernel) != len(x.shape) - 2:
        raise ShapeError(
            f"{node.op_type} node {node.name!r}: kernel_shape {kernel} does not match X {x.shape}"
        )
    return geometry(node, list(x.shape[2:]), kernel, bool(op_of(node).attr(node, "ceil_mode")))


def _windows(x: np.ndarray, geo: Geometry, fill: float) -> tuple[np.ndarray, np.ndarray]:
    """(taps ``[T, N, C, *out]`` of x padded with ``fill``, flat input index per tap or -1)."""
    nd = len(geo.out)
    need = [
        (o - 1) * s + (k - 1) * d + 1
        for o, s, k, d in zip(geo.out, geo.strides, geo.kernel, geo.dilations)
    ]
    ends = [max(0, nd_ - i - b) for nd_, i, b in zip(need, x.shape[2:], geo.begin)]
    pad = [(0, 0), (0, 0)] + list(zip(geo.begin, ends))
    xp = np.pad(x, pad, constant_values=fill)
    flat = np.arange(x.size, dtype=np.int64).reshape(x.shape)
    ip = np.pad(flat, pad, constant_values=-1)
    taps, idx = [], []
    for tap in np.ndindex(*geo.kernel):
        sl = (slice(None),) * 2 + tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, o, s in zip(tap, geo.dilations, geo.out, geo.strides)
        )
        taps.append(xp[sl])
        idx.append(ip[sl])
    del nd
    return np.stack(taps), np.stack(idx)


def _divisor(x_shape: tuple[int, ...], geo: Geometry) -> np.ndarray:
    """count_include_pad divisor: window positions inside input + explicit pads."""
    counts = []
    for i, (size, o, s, k, d, b, e) in enumerate(
        zip(x_shape[2:], geo.out, geo.strides, geo.kernel, geo.dilations, geo.begin, geo.end)
    ):
        start = np.arange(o) * s - b
        pos = start[:, None] + np.arange(k)[None, :] * d
        cnt = ((pos >= -b) & (pos < size + e)).sum(axis=1)
        shape = [1] * len(geo.out)
        shape[i] = o
        counts.append(cnt.reshape(shape))
    total = counts[0]
    for c in counts[1:]:
        total = total * c
    return total.astype(np.float32)


def _device_pool(node: Node, ctx: Any) -> Kernel:
    """Device MaxPool / AveragePool (1-D, 2-D) and GlobalAveragePool / GlobalMaxPool:
    one output element per work item; AveragePool divides by the input elements in the
    window (``count_include_pad=0``) or the positions inside the padded input (1)."""
    from ...backends.device.lowerings import decompose, element_kernel

    x, y = node.inputs[0], node.outputs[0]
    if len(x.shape) not in (3, 4):
        raise UnsupportedOpError(f"device {node.op_type} (node {node.name!r}): 1-D or 2-D only")
    if node.op_type.startswith("Global"):  # one window covering the whole plane
        sp = list(x.shape[2:])
        H, W = (sp[0], sp[1]) if len(sp) == 2 else (1, sp[0])
        g = dict(H=H, W=W, KH=H, KW=W, SH=1, SW=1, PT=0, PB=0, PL=0, PR=0, DH=1, DW=1, OH=1, OW=1)
    else:
        g = window_dims(list(x.shape[2:]), pool_geometry(node))
    is_max = "Max" in node.op_type
    T = ctype(y.dtype)
    init = "(-INFINITY)" if is_max else c_literal(0, y.dtype)
    combine = "acc = fmaxf(acc, v);" if is_max else "acc += v; ++n;"
    if T == "double":
        combine = combine.replace("fmaxf", "fmax")
    body = [
        *decompose("gid", [y.shape[0] * y.shape[1], g["OH"], g["OW"]], "i"),
        f"{ctx.language.pointer(ctype(x.dtype), True)} X = {ctx.ptr(x)} + i0 * {g['H'] * g['W']};",
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
        if node.op_type == "AveragePool" and op_of(node).attr(node, "count_include_pad"):
            # positions of the window inside [-PT, H + PB) x [-PL, W + PR)
            body += [
                f"const idx_t h0 = i1 * {g['SH']} - {g['PT']}, w0 = i2 * {g['SW']} - {g['PL']};",
                f"const idx_t h1 = min(h0 + {g['KH']}, (idx_t){g['H'] + g['PB']});",
                f"const idx_t w1 = min(w0 + {g['KW']}, (idx_t){g['W'] + g['PR']});",
                "n = (h1 - h0) * (w1 - w0);",
            ]
        body.append(f"acc = acc / ({T})n;")
    return element_kernel(node, ctx, body)


class _Pool(OpDef):
    """Shared infer/emit of the windowed pools."""

    kind = ""

    def infer(self, node: Node) -> list[OutType]:
        geo = pool_geometry(node)
        x = node.inputs[0]
        shape = (*x.shape[:2], *geo.out)
        outs = [(shape, x.dtype)]
        if len(node.outputs) > 1:
            outs.append((shape, np.dtype(np.int64)))
        return outs

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        return [[0], [1], list(range(2, len(node.outputs[0].shape)))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        x = node.inputs[0]
        self._check_dtype(node)
        geo = pool_geometry(node)
        sizes = [v if isinstance(v, Dim) else int(v) for v in x.shape[2:]]  # run-time too
        nd = len(sizes)
        n, c = x.shape[:2]
        if _plane_kernel(node, ctx, geo, sizes):
            return _emit_pool2d(node, ctx, geo, sizes)
        ty = ctype(x.dtype)
        ov = [f"o{i}" for i in range(nd)]
        index = [f"(nc / {c})", f"(nc % {c})"] + ov
        head = f"  const {ty}* xc = {ctx.ptr(x)} + nc * {shape_size(sizes)};\n"
        for i in range(nd):
            head += f"  for (int64_t o{i} = 0; o{i} < {geo.out[i]}; ++o{i}) {{\n"
            head += f"  int64_t s{i} = o{i} * {geo.strides[i]} - {geo.begin[i]};\n"
        flat = "nc"
        for i in range(nd):
            flat = f"({flat}) * {geo.out[i]} + o{i}"
        head += f"    int64_t o = {flat};\n"
        loop, lin = "", "0"
        for i in range(nd):
            loop += (
                f"    for (int64_t k{i} = 0; k{i} < {geo.kernel[i]}; ++k{i}) {{\n"
                f"      int64_t i{i} = s{i} + k{i} * {geo.dilations[i]};\n"
                f"      if (i{i} < 0 || i{i} >= {sizes[i]}) continue;\n"
            )
            lin = f"({lin}) * {sizes[i]} + i{i}" if i else "i0"
        loop += f"        {ty} v = xc[{lin}];\n"
        body, tail = self._body(node, ctx, geo, sizes, index)
        closes = "    }\n" * nd
        # planes (n, c) on the thread pool: a tap counts one unit of work
        work = shape_size([n * c, *geo.out]) * (shape_size(geo.kernel) + 4)
        return ctx.parallel_for(
            "nc", n * c, head + body[0] + loop + body[1] + closes + tail + "  }\n" * nd, work
        )


#: Output rows narrower than one vector of eight stay the generic loops, whose
#: compile-time window gcc unrolls: measured at 1 thread, 272 planes 14x14 -> 7x7 (3x3/2)
#: took 22 us generic vs 126 us in ml_pool2d's scalar path (AveragePool); from 8 wide
#: ml_pool2d is ahead (13 wide: 77 vs 85 us, 27: 120 vs 153, 56: 81 vs 1,476 on random
#: data, where the generic NaN-aware compare mispredicts).
_PLANE_MIN_OW = 8
#: ... unless pool.h's flat path takes the planes (stride 1, output the input's size,
#: H * W * KW within its tables: this bound is inside ML_POOL_FLAT's): 1024 planes 7x7
#: 3x3/1 AveragePool ran 132 us in the generic loops (ONNX Runtime 36).
_FLAT_MAX = 2048


def _flat_plane(geo: Geometry, sizes: list) -> bool:
    """Whether pool.h's flat path (``ml_pool2d_flat_ok``) takes these planes."""
    if any(isinstance(v, Dim) for v in (*sizes, *geo.out)):
        return False
    return (
        tuple(geo.strides) == (1, 1)
        and list(geo.out) == list(sizes)
        and sizes[0] * sizes[1] * geo.kernel[1] <= _FLAT_MAX
    )


#: pool.h's ML_POOL_SEP_ROW (checked at compile time): the stride-2 max path's two row
#: buffers
_S2_ROW = 1024


def _s2_plane(node: Node, geo: Geometry, sizes: list) -> bool:
    """Whether pool.h's stride-2 max path (``ml_pool2d_s2_ok``) takes these planes, which
    it does at any output width: 256 planes 13x13 -> 6x6 (3x3/2, pads 0, 0, 1, 1) in 16 us
    against 26 in the generic loops (1 thread)."""
    if node.op_type != "MaxPool" or any(isinstance(v, Dim) for v in (*sizes, *geo.out)):
        return False
    (h, w), (oh, ow) = sizes, geo.out
    (kh, kw), (sh, sw), (pt, pl) = geo.kernel, geo.strides, geo.begin
    length = 2 * (-(-ow // 8) * 8) + kw + 16
    return (sw == 2 and sh >= 2 and 2 <= kw <= 8 and w >= 8 and pl < kw and pt < kh
            and pl + w <= length <= _S2_ROW // 2 and (oh - 1) * sh - pt < h
            and (ow - 1) * 2 - pl < w)


def _plane_kernel(node: Node, ctx: EmitContext, geo: Geometry, sizes: list) -> bool:
    """Whether pool.h's ``ml_pool2d`` runs ``node``: a 2-D float32 MaxPool without
    Indices or AveragePool, dilation 1, whose fused epilogue (if any) stays float32."""
    fused = getattr(ctx, "fused", None)
    out = getattr(fused, "out", None)
    return (
        node.op_type in ("MaxPool", "AveragePool")
        and len(geo.kernel) == 2
        and node.inputs[0].dtype == np.float32
        and (len(node.outputs) < 2 or node.outputs[1] is None)
        and all(d == 1 for d in geo.dilations)
        and (out is None or out.dtype == np.float32)
        and not isinstance(geo.out[1], Dim)
        and (geo.out[1] >= _PLANE_MIN_OW or _flat_plane(geo, sizes) or _s2_plane(node, geo, sizes))
    )


def _emit_pool2d(node: Node, ctx: EmitContext, geo: Geometry, sizes: list) -> str:
    """A call of pool.h's ``ml_pool2d`` (row-wise, vectorised interior, planes split
    over the thread pool), the fused epilogue applied per plane."""
    include_checked(ctx, "pool.h", {"ML_POOL_SEP_ROW": _S2_ROW}, "ops/nn/pool.py")
    x = node.inputs[0]
    n, c = x.shape[:2]
    include_pad = node.op_type == "AveragePool" and bool(op_of(node).attr(node, "count_include_pad"))
    epi = ctx.tile_epilogue([[0], [1], [2, 3]])
    fields = {
        "planes": n * c, "H": sizes[0], "W": sizes[1], "OH": geo.out[0], "OW": geo.out[1],
        "KH": geo.kernel[0], "KW": geo.kernel[1], "SH": geo.strides[0], "SW": geo.strides[1],
        "PT": geo.begin[0], "PL": geo.begin[1], "PB": geo.end[0], "PR": geo.end[1],
        "is_max": int(node.op_type == "MaxPool"), "include_pad": int(include_pad),
        "x": ctx.ptr(x), "y": ctx.ptr(node.outputs[0]), "channels": c,
    }
    init = ", ".join(f".{k} = {v}" for k, v in fields.items())
    return f"  {{ ml_pool2d_args pa_ = {{{init}, .epi = {epi}}};\n    ml_pool2d(&pa_); }}"


def _storage_index(node: Node, sizes: list[int]) -> str:
    """C expression of MaxPool's Indices value from the argmax coordinates ``a0..``:
    row-major over the spatial dims (``storage_order=0``) or column-major (1), plus
    the ``nc`` plane's offset (the ONNX reference's rule)."""
    nd = len(sizes)
    plane = shape_size(sizes)
    if op_of(node).attr(node, "storage_order"):
        terms = [f"a{i} * {shape_size(sizes[:i])}" for i in range(nd)]
    else:
        terms = [f"a{i} * {shape_size(sizes[i + 1:])}" for i in range(nd)]
    return f"nc * {plane} + " + " + ".join(terms)


@register
class MaxPool(_Pool):
    """ONNX ``MaxPool``: X ``[N, C, *S]`` -> Y ``[N, C, *O]`` (float32), optional
    Indices (int64, flat row-major index into X)."""

    op_type = "MaxPool"
    since_version = 1
    # 22 adds bfloat16 and states that a window starting in the end padding is
    # dropped (ceil_mode), which pool_geometry already does
    also_versions = (22,)
    # ceil_mode came in 10, storage_order in 8
    defaults = {"ceil_mode": 0, "storage_order": 0}

    def _check_dtype(self, node: Node) -> None:
        x = node.inputs[0]
        if x.dtype not in (np.float32, np.float64, np.int8, np.uint8):
            raise UnsupportedOpError(
                f"MaxPool node {node.name!r}: X is {x.dtype}; monolib's MaxPool takes "
                "float32, float64, int8 and uint8"
            )

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        geo = pool_geometry(node)
        low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
        taps, idx = _windows(x, geo, low)
        y = taps.max(axis=0).astype(x.dtype)
        outs = [y]
        if len(node.outputs) > 1:
            # first maximum among the taps inside the input (padding never wins a tie)
            masked = np.where(idx >= 0, taps.astype(np.float64), -np.inf)
            flat = np.take_along_axis(idx, masked.argmax(axis=0)[None], 0)[0]
            if self.attr(node, "storage_order"):
                sizes = x.shape[2:]
                plane = int(np.prod(sizes))
                col = np.arange(plane).reshape(sizes[::-1]).transpose().reshape(-1)
                flat = flat // plane * plane + col[flat % plane]
            outs.append(flat.astype(np.int64))
        return outs

    def _body(self, node: Node, ctx: EmitContext, geo, sizes: list[int], index: list[str]):
        ty = ctype(node.inputs[0].dtype)
        nd = len(sizes)
        coords = " ".join(f"a{i} = i{i};" for i in range(nd))
        low = "-INFINITY" if node.inputs[0].dtype.kind == "f" else "0"  # a window all in padding
        pre = f"    {ty} acc = {low}; int64_t {', '.join(f'a{i} = 0' for i in range(nd))}; int arg = 0;\n"
        # a NaN wins (NumPy's max; ONNX Runtime drops it by position), the first one counts
        nan = " || (v != v && acc == acc)" if node.inputs[0].dtype.kind == "f" else ""
        inner = f"        if (v > acc || !arg{nan}) {{ acc = v; arg = 1; {coords} }}\n"
        tail = f"    {ctx.ptr(node.outputs[0])}[o] = {ctx.output_expr('acc', index)};\n"
        if len(node.outputs) > 1 and node.outputs[1] is not None:
            tail += f"    {ctx.ptr(node.outputs[1])}[o] = {_storage_index(node, sizes)};\n"
        return (pre, inner), tail

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """One output element per work item (:func:`_device_pool`)."""
        return _device_pool(node, ctx)


@register
class AveragePool(_Pool):
    """ONNX ``AveragePool``: X ``[N, C, *S]`` -> Y ``[N, C, *O]``; float32."""

    op_type = "AveragePool"
    since_version = 1
    # 22 adds bfloat16 and states that a window starting in the end padding is
    # dropped (ceil_mode), which pool_geometry already does
    also_versions = (22,)
    # ceil_mode came in 10, count_include_pad in 7
    defaults = {"ceil_mode": 0, "count_include_pad": 0}

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        geo = pool_geometry(node)
        taps, idx = _windows(x, geo, 0.0)
        total = taps.sum(axis=0, dtype=np.float32)
        if self.attr(node, "count_include_pad"):
            div = _divisor(x.shape, geo)
        else:
            div = (idx >= 0).sum(axis=0).astype(np.float32)
        return [(total / np.maximum(div, 1)).astype(x.dtype)]

    def _check_dtype(self, node: Node) -> None:
        require_float32(node, 0)

    def _body(self, node: Node, ctx: EmitContext, geo, sizes: list[int], index: list[str]):
        pre = "    float acc = 0.0f; int64_t cnt = 0;\n"
        inner = "        acc += v; ++cnt;\n"
        tail = ""
        if self.attr(node, "count_include_pad"):
            # window positions inside the explicitly padded input: a product over dims
            tail = "    cnt = 1;\n"
            for i, size in enumerate(sizes):
                tail += (
                    f"    {{ int64_t m = 0; for (int64_t k = 0; k < {geo.kernel[i]}; ++k) {{ "
                    f"int64_t p = s{i} + k * {geo.dilations[i]}; "
                    f"m += p >= -{geo.begin[i]} && p < {size + geo.end[i]}; }} cnt *= m; }}\n"
                )
        val = "(acc / (float)(cnt > 0 ? cnt : 1))"
        tail += f"    {ctx.ptr(node.outputs[0])}[o] = {ctx.output_expr(val, index)};\n"
        return (pre, inner), tail

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """One output element per work item (:func:`_device_pool`)."""
        return _device_pool(node, ctx)


@register
class LpPool(_Pool):
    """ONNX ``LpPool``: Y = (sum over the window of ``|x|^p``)^(1/p), padding adding
    nothing; X ``[N, C, *S]`` float32 (versions 2..22; 18 added ceil_mode and
    dilations, 22 only types)."""

    op_type = "LpPool"
    since_version = 2
    also_versions = (22,)
    defaults = {"ceil_mode": 0}  # ceil_mode came in 18

    def _check_dtype(self, node: Node) -> None:
        require_float32(node, 0)

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        p = float(node.attrs["p"])
        taps, _ = _windows(x, pool_geometry(node), 0.0)
        total = (np.abs(taps.astype(np.float64)) ** p).sum(axis=0)
        return [(total ** (1.0 / p)).astype(x.dtype)]

    def _body(self, node: Node, ctx: EmitContext, geo, sizes: list[int], index: list[str]):
        p = float(node.attrs["p"])
        term = {1.0: "fabsf(v)", 2.0: "v * v"}.get(p, f"powf(fabsf(v), {c_literal(p, np.float32)})")
        val = {1.0: "acc", 2.0: "sqrtf(acc)"}.get(p, f"powf(acc, {c_literal(1.0 / p, np.float32)})")
        pre = "    float acc = 0.0f;\n"
        inner = f"        acc += {term};\n"
        tail = f"    {ctx.ptr(node.outputs[0])}[o] = {ctx.output_expr(val, index)};\n"
        return (pre, inner), tail


class _GlobalPool(OpDef):
    """Shared parts of the global pools: Y ``[N, C, 1, ...]`` from X ``[N, C, ...]``."""

    def infer(self, node: Node) -> list[OutType]:
        x = node.inputs[0]
        if x is None or len(x.shape) < 3:
            raise ShapeError(
                f"{node.op_type} node {node.name!r}: X must be [N, C, ...], got {x and x.shape}"
            )
        return [((*x.shape[:2], *([1] * (len(x.shape) - 2))), x.dtype)]

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        return [[0], [1], list(range(2, len(node.outputs[0].shape)))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0)
        x = node.inputs[0]
        n, c = x.shape[:2]
        hw = shape_size(x.shape[2:])
        count = f"(float)({hw})" if isinstance(hw, Dim) else c_literal(float(hw), np.float32)
        ctx.include("pool.h")
        is_max = int(self.op_type == "GlobalMaxPool")
        y = ctx.ptr(node.outputs[0])
        # the reductions (split over channels on the thread pool when large), then the
        # fused epilogue on the N*C results
        code = f"ml_global_pool({n * c}, {hw}, {ctx.ptr(x)}, {y}, {is_max}, {count});"
        index = [f"(nc / {c})", f"(nc % {c})"] + ["0"] * (len(x.shape) - 2)
        val = ctx.output_expr(f"{y}[nc]", index)
        if val != f"{y}[nc]":
            code += f"\nfor (int64_t nc = 0; nc < {n * c}; ++nc) {y}[nc] = {val};"
        return code

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """One output element per work item (:func:`_device_pool`)."""
        return _device_pool(node, ctx)


@register
class GlobalAveragePool(_GlobalPool):
    """ONNX ``GlobalAveragePool``: mean over all spatial dims; float32."""

    op_type = "GlobalAveragePool"
    since_version = 1
    also_versions = (22,)  # 22 adds bfloat16 only

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float32)]


@register
class GlobalMaxPool(_GlobalPool):
    """ONNX ``GlobalMaxPool``: max over all spatial dims; float32."""

    op_type = "GlobalMaxPool"
    since_version = 1
    also_versions = (22,)  # 22 adds bfloat16 only

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x = inputs[0]
        return [x.max(axis=tuple(range(2, x.ndim)), keepdims=True)]
