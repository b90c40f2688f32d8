"""ConvTranspose (ONNX opset 1 and 11): 1-D, 2-D and N-D, groups, output_padding, auto_pad.

Follows the ONNX spec: ``full = stride*(in-1) + output_padding + (kernel-1)*dilation + 1``
and ``out = full - pad_begin - pad_end``; when ``output_shape`` is given (or auto_pad is
SAME_*, which means ``out = in*stride``) the pads are derived from it, SAME_UPPER putting
the smaller half at the beginning.

Lowering: per image and group one GEMM ``cols[Cout_g*KH*KW, H*W] = W_g^T @ X_g`` (weights
transposed and packed at compile time), then ``ml_col2im_add`` scatters ``cols`` into the
bias-initialised output (3-D and up: the generic loop nest of ``col2im.py``), then the
epilogue runs once per image on ``[C_out, OH*OW]``. When the kernel tiles the output
(stride == kernel, no pads: U-Net / DB-head upsampling) each register tile of that GEMM
is scattered into ``y`` with the bias and the epilogue as it is computed
(``ml_tconv_exact``), so ``cols`` never exists.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...backends.cstyle import c_literal, ctype
from ...ir import Node, shape_size
from ...symbolic import same
from ..base import EmitContext, OpDef, OutType, register
from ._common import attr_ints, require_float32, window_dims
from ._gemm import MR, NR, bbuf_floats, gemm_call, include_gemm, pack_a
from .col2im import emit_col2im

__all__ = ["FUSED_MAX_A_BYTES", "ConvTranspose", "TGeometry", "tconv_geometry"]

logger = logging.getLogger(__name__)

# The fused kernel re-reads the whole packed A for every block of 16-32 input pixels:
# above this the GEMM + col2im path, which blocks A, is used. Measured on Zen 3 (1
# thread, 2x2 kernels): A of 32-128 KB fused 1.4x faster, 256 KB even, 1 MB 1.5x slower.
FUSED_MAX_A_BYTES = 256 * 1024


@dataclass
class TGeometry:
    """Geometry of a transposed convolution (one entry per spatial dim)."""

    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    begin: list[int]
    end: list[int]
    full: list[int]
    out: list[int]


def tconv_geometry(node: Node) -> TGeometry:
    """Pads and output sizes of a ConvTranspose node (ONNX spec formulas).

    Raises
    ------
    ShapeError
        On inconsistent shapes, attribute lengths or a negative output size.
    """
    x, w = node.inputs[0], node.inputs[1]
    group = int(node.attrs["group"])
    if (
        x is None
        or w is None
        or len(x.shape) < 3
        or len(w.shape) != len(x.shape)
        or x.shape[1] != w.shape[0]
        or group < 1
        or w.shape[0] % group
    ):
        raise ShapeError(
            f"ConvTranspose node {node.name!r}: X {x and x.shape}, W "
            f"{w and w.shape}, group {group} disagree (W is [C_in, C_out/group, ...])"
        )
    nd = len(x.shape) - 2
    ins = list(x.shape[2:])
    kernel = attr_ints(node, "kernel_shape", list(w.shape[2:]))
    strides = attr_ints(node, "strides", [1] * nd)
    dil = attr_ints(node, "dilations", [1] * nd)
    opad = attr_ints(node, "output_padding", [0] * nd)
    pads = attr_ints(node, "pads", [0] * 2 * nd)
    oshape = attr_ints(node, "output_shape", [])[-nd:] if node.attrs.get("output_shape") else []
    if (
        kernel != list(w.shape[2:])
        or not (len(strides) == len(dil) == len(opad) == nd)
        or len(pads) != 2 * nd
    ):
        raise ShapeError(
            f"ConvTranspose node {node.name!r}: attribute lengths do not match "
            f"{nd} spatial dims / W {w.shape}"
        )
    full = [
        s * (i - 1) + o + (k - 1) * d + 1 for s, i, o, k, d in zip(strides, ins, opad, kernel, dil)
    ]
    auto = node.attrs["auto_pad"] or "NOTSET"
    if oshape or auto in ("SAME_UPPER", "SAME_LOWER"):
        target = oshape or [i * s for i, s in zip(ins, strides)]
        total = [f - t for f, t in zip(full, target)]
        if auto == "SAME_UPPER":
            begin, end = [t // 2 for t in total], [t - t // 2 for t in total]
        else:
            begin, end = [t - t // 2 for t in total], [t // 2 for t in total]
    elif auto == "VALID":
        begin, end = [0] * nd, [0] * nd
    elif auto == "NOTSET":
        begin, end = pads[:nd], pads[nd:]
    else:
        raise UnsupportedOpError(f"ConvTranspose node {node.name!r}: auto_pad {auto!r}")
    out = [f - b - e for f, b, e in zip(full, begin, end)]
    if any(o < 1 for o in out):
        raise ShapeError(f"ConvTranspose node {node.name!r}: output size {out} < 1")
    return TGeometry(kernel, strides, dil, begin, end, full, out)


def tconv_reference(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, geo: TGeometry, group: int
) -> np.ndarray:
    """N-D grouped transposed convolution in NumPy (scatter of one einsum per tap)."""
    n, c = x.shape[:2]
    mg = w.shape[1]
    cg = c // group
    size = [max(f, bb + o) for f, bb, o in zip(geo.full, geo.begin, geo.out)]
    canvas = np.zeros((n, group, mg, *size), np.float32)
    wg = w.reshape(group, cg, mg, *geo.kernel)
    xg = x.reshape(n, group, cg, *x.shape[2:])
    for tap in np.ndindex(*geo.kernel):
        sl = tuple(
            slice(k * d, k * d + (i - 1) * s + 1, s)
            for k, d, i, s in zip(tap, geo.dilations, x.shape[2:], geo.strides)
        )
        canvas[(slice(None),) * 3 + sl] += np.einsum(
            "gcm,ngc...->ngm...", wg[(Ellipsis,) + tap], xg
        )
    crop = tuple(slice(bb, bb + o) for bb, o in zip(geo.begin, geo.out))
    y = canvas[(slice(None),) * 3 + crop].reshape(n, group * mg, *geo.out)
    if b is not None:
        y = y + b.reshape(1, -1, *([1] * len(geo.out)))
    return np.ascontiguousarray(y, np.float32)


@register
class ConvTranspose(OpDef):
    """ONNX ``ConvTranspose``: X ``[N, C_in, *S]``, W ``[C_in, C_out/group, *K]``, B
    ``[C_out]`` -> Y ``[N, C_out, *O]``; float32. The C backend emits 1-D and 2-D."""

    op_type = "ConvTranspose"
    since_version = 1
    also_versions = (22,)  # 22 adds bfloat16 only

    def infer(self, node: Node) -> list[OutType]:
        geo = tconv_geometry(node)
        x, w = node.inputs[0], node.inputs[1]
        cout = w.shape[1] * int(node.attrs["group"])
        b = node.input(2)
        if b is not None and b.shape != (cout,):
            raise ShapeError(f"ConvTranspose node {node.name!r}: B {b.shape} != ({cout},)")
        return [((x.shape[0], cout, *geo.out), x.dtype)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        b = inputs[2] if len(inputs) > 2 else None
        y = tconv_reference(
            inputs[0], inputs[1], b, tconv_geometry(node), int(node.attrs["group"])
        )
        return [y]

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        return [[0], [1], list(range(2, len(node.outputs[0].shape)))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0, 1, 2)
        geo = tconv_geometry(node)
        include_gemm(ctx)
        ctx.include("conv.h")
        epi = ctx.tile_epilogue(self.epilogue_groups(node))
        return _emit(node, ctx, geo, epi)

    def emit_device(self, node: Node, ctx: Any) -> Any:
        """Device ConvTranspose: 1-D or 2-D, groups, strides, dilations, pads,
        output_padding, bias; one output element per work item, the sum over the
        group's input channels of the kernel taps that land on it (output ``o`` gets tap
        ``k`` from input ``(o + pad - k * dilation) / stride`` when that divides).

        Raises
        ------
        UnsupportedOpError
            For more than 2 spatial dims.
        """
        from ...backends.device.lowerings import decompose, element_kernel

        x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
        if len(x.shape) not in (3, 4):
            raise UnsupportedOpError(
                f"device ConvTranspose (node {node.name!r}): only 1-D and 2-D, got {x.shape}"
            )
        g = window_dims(list(x.shape[2:]), tconv_geometry(node))
        group = int(node.attrs["group"])
        C, OC, mg = x.shape[1], y.shape[1], w.shape[1]
        cg = C // group
        T = ctype(y.dtype)
        xp = ctx.language.pointer(ctype(x.dtype), True)
        wp = ctx.language.pointer(ctype(w.dtype), True)
        acc0 = f"{ctx.ptr(b)}[i1]" if b is not None else c_literal(0, y.dtype)
        H, W, KH, KW = g["H"], g["W"], g["KH"], g["KW"]
        body = [
            *decompose("gid", [y.shape[0], OC, g["OH"], g["OW"]], "i"),
            f"{xp} X = {ctx.ptr(x)};",
            f"{wp} Wt = {ctx.ptr(w)};",
            f"{T} acc = {acc0};",
            f"const idx_t c0 = (i1 / {mg}) * {cg};",  # the group's first input channel
            f"const idx_t m = i1 % {mg};",
            f"for (idx_t kh = 0; kh < {KH}; ++kh) {{",
            f"  const idx_t th = i2 + {g['PT']} - kh * {g['DH']};",
            f"  if (th < 0 || th % {g['SH']} != 0 || th / {g['SH']} >= {H}) continue;",
            f"  for (idx_t kw = 0; kw < {KW}; ++kw) {{",
            f"    const idx_t tw = i3 + {g['PL']} - kw * {g['DW']};",
            f"    if (tw < 0 || tw % {g['SW']} != 0 || tw / {g['SW']} >= {W}) continue;",
            (f"    const idx_t xo = (i0 * {C} + c0) * {H * W} + (th / {g['SH']}) * {W} "
             f"+ tw / {g['SW']};"),
            f"    const idx_t wo = ((c0 * {mg} + m) * {KH} + kh) * {KW} + kw;",
            f"    for (idx_t c = 0; c < {cg}; ++c)",
            f"      acc += X[xo + c * {H * W}] * Wt[wo + c * {mg * KH * KW}];",
            "  }",
            "}",
        ]
        return element_kernel(node, ctx, body)


def _tiles_exactly(d: dict[str, int]) -> bool:
    """Whether the kernel tiles the output (stride == kernel, no dilation, no pads or
    cropping): every output pixel then gets exactly one tap, y is written once."""
    return (
        d["SH"] == d["KH"]
        and d["SW"] == d["KW"]
        and d["DH"] == d["DW"] == 1
        and same(d["OH"], d["H"] * d["KH"])
        and same(d["OW"], d["W"] * d["KW"])
        and d["PT"] == d["PL"] == 0
    )


def _emit(node: Node, ctx: EmitContext, geo: TGeometry, epi: str) -> str:
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    group = int(node.attrs["group"])
    nd = len(x.shape) > 4  # 3-D and up: the generic col2im of col2im.py
    d = window_dims(x.shape[2:], geo) if not nd else None
    n, c = x.shape[:2]
    cg, mg = c // group, w.shape[1]
    cout = mg * group
    rows = mg * int(np.prod(geo.kernel))  # GEMM M: (co, ky, kx)
    hw, ohw = shape_size(x.shape[2:]), shape_size(geo.out)
    per_group = -(-rows // MR) * MR * cg
    code = ""
    if w.const is not None:
        wt = w.const.reshape(group, cg, rows).transpose(0, 2, 1)
        ap = ctx.param(
            np.concatenate([pack_a(wt[g]) for g in range(group)]), f"{node.name}.packed_w"
        )
    else:
        buf = ctx.scratch(4 * per_group * group)
        ap = f"((const float*){buf})"
        code = (
            f"for (int64_t g = 0; g < {group}; ++g)\n"
            f"  ml_pack_a({rows}, {cg}, {ctx.ptr(w)} + g * {cg * rows}, 1, {rows}, "
            f"(float*){buf} + g * {per_group});\n"
        )
    yp, xp = ctx.ptr(y), ctx.ptr(x)
    exact = d is not None and _tiles_exactly(d)
    bias = f"{ctx.ptr(b)} + g * {mg}" if b is not None else "0"
    epi_fn = "(ml_epi_fn)0" if epi == "0" else f"(ml_epi_fn){epi}"
    if exact and 4 * per_group <= FUSED_MAX_A_BYTES:
        # GEMM tiles scattered straight into y (conv_transpose.h ml_tconv_exact): no cols buffer
        ctx.include("conv_transpose.h")
        buf = ctx.scratch(4 * cg * 2 * NR)
        return (
            code + f"for (int64_t n = 0; n < {n}; ++n)\n"
            f"  for (int64_t g = 0; g < {group}; ++g)\n"
            f"    ml_tconv_exact({rows}, {cg}, {d['KH']}, {d['KW']}, {d['H']}, {d['W']}, "
            f"{ap} + g * {per_group}, {xp} + (n * {c} + g * {cg}) * {hw}, {bias}, "
            f"{yp} + (n * {cout} + g * {mg}) * {ohw}, (float*){buf}, {epi_fn}, {yp}, n, "
            f"g * {mg});"
        )
    col = ctx.scratch(4 * rows * hw)
    bbuf = ctx.scratch(4 * bbuf_floats(cg, hw))
    init = f"{ctx.ptr(b)}[co]" if b is not None else "0.0f"
    gemm = gemm_call(
        {
            "M": str(rows),
            "N": str(hw),
            "K": str(cg),
            "a": f"{ap} + g * {per_group}",
            "c": f"(float*){col}",
            "bbuf": f"(float*){bbuf}",
        },
        {
            "kind": "ML_B_STRIDED",
            "p": f"{xp} + (n * {c} + g * {cg}) * {hw}",
            "ldk": str(hw),
            "ldn": "1",
        },
    )
    epi_line = f"  {epi}({yp}, n, 0, {cout}, 0, {ohw});\n" if epi != "0" else ""
    if nd:
        scatter = emit_col2im(ctx, f"((const float*){col})", f"(yn + g * {mg * ohw})", mg,
                              geo.kernel, list(x.shape[2:]), geo.out, geo.strides, geo.begin,
                              geo.dilations)
        return (
            code + f"for (int64_t n = 0; n < {n}; ++n) {{\n"
            f"  float* yn = {yp} + n * {cout * ohw};\n"
            f"  for (int64_t co = 0; co < {cout}; ++co)\n"
            f"    for (int64_t i = 0; i < {ohw}; ++i) yn[co * {ohw} + i] = {init};\n"
            f"  for (int64_t g = 0; g < {group}; ++g) {{\n{gemm}\n{scatter}\n"
            f"  }}\n{epi_line}}}"
        )
    geo_args = ", ".join(
        str(d[k]) for k in ("KH", "KW", "H", "W", "OH", "OW", "SH", "SW", "PT", "PL", "DH", "DW")
    )
    if exact:  # every output pixel gets exactly one tap: write y once
        # col2im and the epilogue per channel / row block, on the thread pool when large
        return (
            code + f"for (int64_t n = 0; n < {n}; ++n) {{\n"
            f"  float* yn = {yp} + n * {cout * ohw};\n"
            f"  for (int64_t g = 0; g < {group}; ++g) {{\n{gemm}\n"
            f"    ml_col2im_exact_epi({mg}, {d['KH']}, {d['KW']}, {d['H']}, {d['W']}, "
            f"(const float*){col}, {bias}, yn + g * {mg * ohw}, {epi_fn}, {yp}, n, g * {mg});\n"
            f"  }}\n}}"
        )
    return (
        code + f"for (int64_t n = 0; n < {n}; ++n) {{\n"
        f"  float* yn = {yp} + n * {cout * ohw};\n"
        f"  for (int64_t co = 0; co < {cout}; ++co)\n"
        f"    for (int64_t i = 0; i < {ohw}; ++i) yn[co * {ohw} + i] = {init};\n"
        f"  for (int64_t g = 0; g < {group}; ++g) {{\n{gemm}\n"
        f"    ml_col2im_add({mg}, {geo_args}, (const float*){col}, yn + g * {mg * ohw});\n"
        f"  }}\n{epi_line}}}"
    )
