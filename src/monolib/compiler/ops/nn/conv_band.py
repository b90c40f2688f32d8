"""A depthwise convolution with the 1x1 convolution before it ("expansion") and/or the one
after it ("projection"), run by bands of rows (``conv_band.h``'s ``ml_conv_band``): the
tensors between them never leave L2.

:func:`band_chain` says which fused ops (kind ``op``) from a position make such a chain
and :func:`emit_band` writes the C of a ``band`` fused op (``passes/conv_bands.py``
makes them for the C backend).

Whether a chain pays was measured in models (Zen 4, 1 MiB L2 per core, 1 and 2 threads,
each op's time in a run of the whole model): links whose tensor is several times L2
gained (PP-OCRv4 det's 16 -> 32 at 320 px, stride 2: 3.7 -> 2.7 ms at 1 thread, 2.1 ->
1.2 at 2; its 32 -> 48 at 160 px: 2.2 -> 1.7, 1.1 -> 0.8; MobileNetV2's 16 -> 96 at
112 px: 0.96 -> 0.74); those of 1-2 MB lost 5-30% (the tensor stayed in the caches
anyway, and a band's GEMMs and depthwise calls are smaller): see :data:`BAND_MIN_BYTES`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...backends.c.epilogue import band_fits
from ...ir import Node, Value
from ...passes.fuse_elementwise import FusedOp
from ...symbolic import is_dim
from ..base import EmitContext
from ._common import epi_call
from ._gemm import bbuf_floats, include_gemm, pack_a
from .conv import _pointwise, as_2d, conv_geometry
from .conv_dw_along_w import VECTOR_WIDTHS, dw_fast, dw_scratch_floats, include_depthwise
from .conv_cost import L2_BYTES

__all__ = ["BAND_FLOATS", "BAND_MIN_BYTES", "band_chain", "band_rows", "emit_band"]

#: A tensor between two links below this many bytes is left to the plain kernels: four
#: times L2 (3.7 MB links still lost at 2 threads, 4.7 MB ones gained).
BAND_MIN_BYTES = 4 * L2_BYTES
#: Floats of rows a band holds per tensor in scratch (all channels): half of L2 (a
#: quarter and the whole of it measured 2-10% slower on PP-OCRv4 det's pairs).
BAND_FLOATS = L2_BYTES // 8
#: ML_DW_R: the depthwise kernel's output rows per tile; a band is a multiple of it.
_DW_TILE = 4
#: The [B, M, N] view of a Conv output's epilogue.
_GROUPS = [[0], [1], [2, 3]]


def _conv(f: FusedOp) -> Node | None:
    """The anchor of ``f`` when it is a float32 2-D Conv of static shapes with constant
    weights and bias."""
    n = f.anchor
    if f.kind != "op" or n is None or n.op_type != "Conv" or len(n.outputs) != 1:
        return None
    x, w, b = n.inputs[0], n.inputs[1], n.input(2)
    if (len(x.shape) != 4 or any(is_dim(v) for v in (*x.shape, *n.outputs[0].shape))
            or w.const is None or (b is not None and b.const is None)
            or any(str(v.dtype) != "float32" for v in (x, w, n.outputs[0]))):
        return None
    return n


def _pointwise_conv(f: FusedOp, reads: Value | None = None) -> Node | None:
    """``f``'s Conv when it is 1x1, stride 1, unpadded, group 1 (and reads ``reads``)."""
    n = _conv(f)
    if n is None or (reads is not None and n.inputs[0] is not reads):
        return None
    geo = as_2d(list(n.inputs[0].shape[2:]), conv_geometry(n))
    return n if int(n.attrs["group"]) == 1 and _pointwise(geo) else None


def _depthwise_conv(f: FusedOp, reads: Value | None = None) -> Node | None:
    """``f``'s Conv when it is depthwise on ``ml_dwconv2d``'s fast path (3x3 or 5x5,
    strides 1 or 2, small pads; and reads ``reads``)."""
    n = _conv(f)
    if n is None or (reads is not None and n.inputs[0] is not reads):
        return None
    c = n.inputs[0].shape[1]
    geo = as_2d(list(n.inputs[0].shape[2:]), conv_geometry(n))
    ok = int(n.attrs["group"]) == c == n.outputs[0].shape[1] and dw_fast(geo)
    return n if ok else None


def _link(f: FusedOp, alone: Callable[[Value], bool]) -> bool:
    """Whether ``f``'s output can stay in a band: big (one image of it: a band chain runs
    image by image; PP-OCR's recognizer at batch 6 had 460 KB per image taken as 2.8 MB,
    and its 3-row maps ran as bands one image at a time, 1.0x from 1 to 2 threads), read
    by the next link alone, its epilogue constants the same along the image."""
    image = int(np.prod(f.out.shape[1:], dtype=np.int64))
    return (4 * image >= BAND_MIN_BYTES and alone(f.out)
            and (not f.steps or band_fits(f.steps, f.out, _GROUPS)))


def band_chain(ops: Sequence[FusedOp], i: int,
               alone: Callable[[Value], bool]) -> list[FusedOp] | None:
    """The fused ops from ``ops[i]`` that run as one band chain, or None: an expansion
    (a 1x1 Conv) and the depthwise Conv after it, a depthwise Conv and the projection
    (a 1x1 Conv) after it, or all three, next to each other in run order. Each tensor
    between two links must be at least :data:`BAND_MIN_BYTES`, read by the next link
    alone (``alone(value)``: no other reader, not a graph output) and made by an
    epilogue of constants the same along the image (:func:`band_fits`). The depthwise
    conv then always runs on ``ml_dwconv2d``'s fast path (also where the rule or a tuned
    choice would take another kernel: the big maps that qualify are where it does well).
    """
    at = list(ops[i:i + 3])
    chain: list[FusedOp] = []
    if len(at) >= 2 and _pointwise_conv(at[0]) and _depthwise_conv(at[1], at[0].out) \
            and _link(at[0], alone):
        chain, at = at[:2], at[1:]
    elif not at or not _depthwise_conv(at[0]):
        return None
    if len(at) >= 2 and _pointwise_conv(at[1], at[0].out) and _link(at[0], alone):
        chain = chain[:1] + at[:2] if chain else at[:2]
    return chain or None


def _parts(band: FusedOp) -> tuple[FusedOp | None, FusedOp, FusedOp | None]:
    """(expansion or None, depthwise, projection or None) of a band op."""
    p = band.parts
    if _depthwise_conv(p[0]):
        return None, p[0], (p[1] if len(p) > 1 else None)
    return p[0], p[1], (p[2] if len(p) > 2 else None)


def band_rows(band: FusedOp) -> int:
    """Output rows per band: the expanded input rows (or, without an expansion, the
    depthwise output rows) of every channel within :data:`BAND_FLOATS`, at least a
    window; a multiple of the depthwise kernel's tile."""
    p, d, _ = _parts(band)
    dd = _geometry(d)
    c = d.out.shape[1]
    if p is not None:
        rows_in = max(BAND_FLOATS // (c * dd["W"]), dd["KH"] + dd["SH"])
        rows = (rows_in - dd["KH"]) // dd["SH"] + 1
    else:
        rows = BAND_FLOATS // (c * dd["OW"])
    rows = max(rows // _DW_TILE * _DW_TILE, _DW_TILE)
    return min(rows, -(-dd["OH"] // _DW_TILE) * _DW_TILE)


def _geometry(d: FusedOp) -> dict[str, int]:
    return as_2d(list(d.anchor.inputs[0].shape[2:]), conv_geometry(d.anchor))


def band_scratch_floats(band: FusedOp, vw: int) -> int:
    """``ml_band_scratch_floats`` of conv_band.h for vectors of ``vw`` floats."""
    p, d, q = _parts(band)
    dd, rows = _geometry(d), band_rows(band)
    c = d.out.shape[1]
    mid_rows = (rows - 1) * dd["SH"] + dd["KH"]
    up16 = lambda n: -(-n // 16) * 16
    mid = up16(c * mid_rows * dd["W"]) if p else 0
    out = up16(c * rows * dd["OW"]) if q else 0
    fa = bbuf_floats(p.anchor.inputs[0].shape[1], mid_rows * dd["W"]) if p else 0
    fq = bbuf_floats(c, rows * dd["OW"]) if q else 0
    return mid + out + up16(max(fa, fq)) + dw_scratch_floats(dd, vw)


def emit_band(fused: FusedOp, ctx: EmitContext) -> str:
    """C of a ``band`` fused op (float32 NCHW, static shapes): an ``ml_band_args`` and
    one ``ml_conv_band`` over the images, with one thread's scratch of
    :func:`band_scratch_floats` floats (the most over the vector widths).

    Raises
    ------
    CompileError
        When a link's epilogue cannot run on a band (:func:`band_chain` rules that out).
    """
    p, d, q = _parts(fused)
    dn = d.anchor
    x = (p or d).anchor.inputs[0]
    n, _, h, w = x.shape
    c = d.out.shape[1]
    dd, rows = _geometry(d), band_rows(fused)
    include_gemm(ctx)
    include_depthwise(ctx)
    ctx.include("conv_band.h")
    last = q or d
    y = ctx.ptr(last.out)
    out_c = last.out.shape[1]
    oh, ow = dd["OH"], dd["OW"]
    per_thread = max(band_scratch_floats(fused, vw) for vw in VECTOR_WIDTHS)
    scratch = ctx.scratch(4 * per_thread)

    def bias(node: Node) -> str:
        b = node.input(2)
        return ctx.ptr(b) if b is not None else "0"

    fields = {
        "x": ctx.ptr(x),
        "C": c, "H": h, "W": w, "OH": oh, "OW": ow, "PT": dd["PT"], "PL": dd["PL"],
        "KH": dd["KH"], "SH": dd["SH"], "SW": dd["SW"],
        "dw_w": ctx.ptr(dn.inputs[1]), "dw_bias": bias(dn),
        "units": f"ml_dw_units_{dd['KH']}_{dd['SH']}{dd['SW']}",
        "y": y, "epi_out": y, "n": 0,
        "rows": rows, "per_thread": per_thread,
        # every image in one call (image 0's pointers; whole images a task)
        "nimg": n, "x_img": x.shape[1] * h * w, "y_img": out_c * oh * ow,
    }
    if p is not None:
        k = x.shape[1]
        mid_ld = ((rows - 1) * dd["SH"] + dd["KH"]) * w
        fields.update({
            "K": k, "a": ctx.param(pack_a(p.anchor.inputs[1].const.reshape(c, k)), "packed_a"),
            "a_bias": bias(p.anchor),
            "a_epi": epi_call(ctx.tile_epilogue(_GROUPS, p, band_ld=mid_ld)),
        })
    if q is not None:
        fields["dw_epi"] = epi_call(ctx.tile_epilogue(_GROUPS, d, band_ld=rows * ow))
        fields.update({
            "M": out_c, "q": ctx.param(pack_a(q.anchor.inputs[1].const.reshape(out_c, c)),
                                       "packed_q"),
            "q_bias": bias(q.anchor), "q_epi": epi_call(ctx.tile_epilogue(_GROUPS, q)),
        })
    else:
        fields["dw_epi"] = epi_call(ctx.tile_epilogue(_GROUPS, d))
    sets = "".join(f"  ba_.{k} = {v};\n" for k, v in fields.items())
    return (
        "{\n  ml_band_args ba_;\n  memset(&ba_, 0, sizeof ba_);\n"
        f"{sets}  ml_conv_band(&ba_, (float*){scratch});\n}}"
    )
