"""A 1x1 convolution and the depthwise convolution that reads it, run by bands of rows
(``conv_band.h``'s ``ml_pwdw``): the expanded tensor between them never leaves L2.

:func:`band_rows` says whether two fused ops (kind ``op``) make such a pair and how many
output rows a band has; :func:`emit_band` writes the C of a ``band`` fused op
(``passes/conv_bands.py`` makes them for the C backend).

Whether a pair pays was measured in models (Zen 4, 1 MiB L2 per core, 1 and 2 threads,
each op's time in a run of the whole model): the pairs whose intermediate is several
times L2 gained (PP-OCRv4 det's 16 -> 32 at 320 px, stride 2: 3.7 -> 2.7 ms at 1
thread, 2.1 -> 1.2 at 2; its 32 -> 48 at 160 px: 2.2 -> 1.7, 1.1 -> 0.8; MobileNetV2's
16 -> 96 at 112 px: 0.96 -> 0.74); those of 1-2 MB lost 5-30% (their intermediate
stayed in the caches anyway, and a band's GEMM and depthwise calls are smaller): see
:data:`BAND_MIN_BYTES`.
"""

from __future__ import annotations

from ...backends.c.epilogue import band_fits
from ...passes.fuse_elementwise import FusedOp
from ...symbolic import is_dim
from ..base import EmitContext
from ._common import epi_call
from ._gemm import bbuf_floats, include_gemm, pack_a
from .conv import (
    _VECTOR_WIDTHS,
    _dw_fast,
    _dw_scratch_floats,
    _pointwise,
    as_2d,
    conv_geometry,
    include_depthwise,
)
from .conv_cost import L2_BYTES

__all__ = ["BAND_FLOATS", "BAND_MIN_BYTES", "band_rows", "emit_band"]

#: An intermediate (the 1x1's output) below this many bytes is left to the plain
#: kernels: four times L2 (3.7 MB pairs still lost at 2 threads, 4.7 MB ones gained).
BAND_MIN_BYTES = 4 * L2_BYTES
#: Floats of expanded rows a band holds (all channels): half of L2, so the band, the
#: depthwise conv's output rows and the 1x1's input rows stay in it (a quarter and the
#: whole of it measured 2-10% slower on PP-OCRv4 det's pairs).
BAND_FLOATS = L2_BYTES // 8
#: ML_DW_R: the depthwise kernel's output rows per tile; a band is a multiple of it.
_DW_TILE = 4


def _conv(f: FusedOp):
    n = f.anchor
    if f.kind != "op" or n.op_type != "Conv" or len(n.outputs) != 1:
        return None
    x, w = n.inputs[0], n.inputs[1]
    b = n.input(2)
    if (len(x.shape) != 4 or any(is_dim(v) for v in (*x.shape, *n.outputs[0].shape))
            or w.const is None or (b is not None and b.const is None)
            or any(str(v.dtype) != "float32" for v in (x, w, n.outputs[0]))):
        return None
    return n


def band_rows(p: FusedOp, d: FusedOp) -> int | None:
    """Output rows per band when ``p`` (a 1x1 Conv, group 1, stride 1, no pads, constant
    weights, an epilogue of constants the same along the image) feeds ``d`` (a depthwise
    Conv that ``ml_dwconv2d``'s fast path takes: 3x3 or 5x5, strides 1 or 2) as its only
    input, and the intermediate is at least :data:`BAND_MIN_BYTES`; else None. In a
    band the depthwise conv always runs on that fast path (also where the rule or a
    tuned choice would take another kernel: the big maps that qualify are where the
    fast path does well). The caller checks that nothing else reads ``p``'s output."""
    pn, dn = _conv(p), _conv(d)
    if pn is None or dn is None or dn.inputs[0] is not p.out:
        return None
    x = pn.inputs[0]
    if int(pn.attrs["group"]) != 1 or not _pointwise(as_2d(list(x.shape[2:]), conv_geometry(pn))):
        return None
    if p.steps and not band_fits(p.steps, p.out, [[0], [1], [2, 3]]):
        return None
    c = p.out.shape[1]
    dd = as_2d(list(p.out.shape[2:]), conv_geometry(dn))
    if int(dn.attrs["group"]) != c or dn.outputs[0].shape[1] != c or not _dw_fast(dd):
        return None
    if 4 * p.out.size < BAND_MIN_BYTES:
        return None
    # rows of expanded input a band holds: BAND_FLOATS over the channels, at least a
    # window; output rows a multiple of the kernel's tile
    rows_in = max(BAND_FLOATS // (c * dd["W"]), dd["KH"] + dd["SH"])
    rows = max((rows_in - dd["KH"]) // dd["SH"] + 1, 1)
    rows = max(rows // _DW_TILE * _DW_TILE, _DW_TILE)
    return min(rows, -(-dd["OH"] // _DW_TILE) * _DW_TILE)


def band_scratch_floats(k: int, c: int, d: dict[str, int], rows: int, vw: int) -> int:
    """``ml_pwdw_scratch_floats`` of conv_band.h for vectors of ``vw`` floats."""
    mid_rows = (rows - 1) * d["SH"] + d["KH"]
    up16 = lambda n: -(-n // 16) * 16
    return (up16(c * mid_rows * d["W"]) + up16(bbuf_floats(k, mid_rows * d["W"]))
            + _dw_scratch_floats(d, vw))


def emit_band(fused: FusedOp, ctx: EmitContext) -> str:
    """C of a ``band`` fused op: ``ml_pwdw`` per image (conv_band.h)."""
    p, d = fused.parts
    pn, dn = p.anchor, d.anchor
    x, w1, b1 = pn.inputs[0], pn.inputs[1], pn.input(2)
    w2, b2 = dn.inputs[1], dn.input(2)
    n, k, h, w = x.shape
    c = w1.shape[0]
    dd = as_2d([h, w], conv_geometry(dn))
    rows = band_rows(p, d)
    if rows is None:
        raise AssertionError(f"{fused.name}: not a 1x1 + depthwise band pair")
    include_gemm(ctx)
    include_depthwise(ctx)
    ctx.include("conv_band.h")
    mid_rows = (rows - 1) * dd["SH"] + dd["KH"]
    pw_epi = epi_call(ctx.tile_epilogue([[0], [1], [2, 3]], p, band_ld=mid_rows * w))
    dw_epi = epi_call(ctx.tile_epilogue([[0], [1], [2, 3]], d))
    ap = ctx.param(pack_a(w1.const.reshape(c, k)), "packed_w")
    per_thread = max(band_scratch_floats(k, c, dd, rows, vw) for vw in _VECTOR_WIDTHS)
    scratch = ctx.scratch(4 * per_thread)
    y = ctx.ptr(d.out)
    units = f"ml_dw_units_{dd['KH']}_{dd['SH']}{dd['SW']}"
    bias1 = ctx.ptr(b1) if b1 is not None else "0"
    bias2 = ctx.ptr(b2) if b2 is not None else "0"
    oh, ow = dd["OH"], dd["OW"]
    return (
        f"for (int64_t n = 0; n < {n}; ++n)\n"
        f"  ml_pwdw({k}, {c}, {h}, {w}, {ctx.ptr(x)} + n * {k * h * w}, {ap}, {bias1}, {pw_epi},\n"
        f"    {oh}, {ow}, {dd['KH']}, {dd['SH']}, {dd['SW']}, {dd['PT']}, {dd['PL']}, "
        f"{ctx.ptr(w2)}, {bias2},\n"
        f"    {y} + n * {c * oh * ow}, {dw_epi}, {y}, n, {units}, {rows}, {per_thread}, "
        f"(float*){scratch});"
    )
