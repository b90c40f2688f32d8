"""Conv with the output pixels as GEMM rows (the ``pixel_rows`` candidate of ``conv.py``).

``y^T [OH*OW, C_out] = cols^T [OH*OW, K] @ W^T [K, C_out]``: on a small image (ResNet's
7x7 stage, SqueezeNet's 13x13) the usual ``W @ cols`` has only 49 or 169 columns, which
round up to whole 32-column micro-tiles (30% and 14% of the multiplies wasted); with the
pixels as rows they round to ``MR`` = 6 (10% and 3%) and the output channels, a multiple
of 16 in most networks, fill the columns. ``W^T`` is packed at compile time as gemm.h's B;
per image the input is padded (when the convolution pads) and gathered straight into
gemm.h's packed A by ``ml_pack_a_im2col`` (1x1 stride-1: the input itself is A,
column-major, read in place by the micro-kernel: ``a_cm``), multiplied into a
``[pixels, C_out]`` scratch with the bias per column, transposed to NCHW
(``ml_transpose_pm``), the fused epilogue running on each block of channels as it is
written. Next to a channel-blocked depthwise conv the tensor between them is NCHW16c
(``backends/c/layout.py``): a 1x1 conv reads such an input in place (``a_cm`` 2) and the
micro-kernel stores the output in 16-channel blocks itself (``ldc_blk``; below ``MR``
pixels by 16-column copies, ``ml_block_pm``), no transpose.
"""

from __future__ import annotations

import logging

import numpy as np

from ....errors import CompileError
from ...ir import Node
from ...symbolic import is_dim
from ..base import EmitContext
from ._gemm import MR, gemm_call, pack_b

__all__ = ["MAX_PIXELS", "emit_pixel_rows", "pixel_rows_valid"]

logger = logging.getLogger(__name__)

#: Largest output (pixels) this path takes: beyond it the usual orientation wastes
#: little, and the packed A (K x pixels floats) outgrows L2 (a 784-pixel 3x3 conv of
#: 128 channels ran 1.3x slower than the direct kernel).
MAX_PIXELS = 256


def pixel_rows_valid(node: Node, d: dict[str, int], group: int) -> bool:
    """Whether the ``pixel_rows`` candidate applies: one group, constant weights, static
    sizes, at most ``MAX_PIXELS`` output pixels. (A 1x1 conv of a larger map storing a
    channel-blocked output for a depthwise conv after it measured no faster than the
    usual orientation: PP-LCNet's 16 -> 32 at 112x112 5% faster, 64 -> 64 at 56x56 and
    128 -> 128 at 28x28 2% slower.)"""
    x, w = node.inputs[0], node.inputs[1]
    if group != 1 or w.const is None:
        return False
    if any(is_dim(v) for v in (*x.shape, *d.values())):
        return False
    return d["OH"] * d["OW"] <= MAX_PIXELS


def _padded(d: dict[str, int]) -> tuple[int, int]:
    hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
    wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
    return hp, wp


def emit_pixel_rows(node: Node, ctx: EmitContext, d: dict[str, int], epi: str,
                    pointwise: bool) -> str:
    """C of a Conv through pixels-as-rows GEMMs, one per image (see the module
    docstring); ``pointwise``: 1x1 stride-1 unpadded, the input packed as it is."""
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    n, c = x.shape[:2]
    m = w.shape[0]
    k = c * d["KH"] * d["KW"]
    p = d["OH"] * d["OW"]
    hw = d["H"] * d["W"]
    wt = np.ascontiguousarray(w.const.reshape(m, k).T.astype(np.float32))
    bp = ctx.param(pack_b(wt), f"{node.name}.packed_wt")
    yp = ctx.ptr(y)
    # a channel-blocked output is stored by the micro-kernel itself (gemm.h's ldc_blk)
    direct = ctx.blocked(y) and p >= MR
    tmp = None if direct else ctx.scratch(4 * p * m)
    xn = f"{ctx.ptr(x)} + n * {c * hw}"
    out = f"{yp} + n * {m * p}" if direct else f"(float*){tmp}"
    fields = {"M": str(p), "N": str(m), "K": str(k), "c": out}
    if direct:
        fields.update({"ldc": "16", "ldc_blk": str(16 * p)})
    if ctx.blocked(x):  # channel-blocked by the depthwise conv before (layout.py)
        if not (pointwise and p >= MR):
            raise CompileError(f"Conv node {node.name!r}: a channel-blocked input is read "
                               f"in place only by a 1x1 conv of at least {MR} pixels")
        pack = ""
        fields.update({"a": "0", "a_raw": xn, "lda": str(16 * p), "a_cm": "2"})
    elif pointwise and p >= MR:
        # the input is A itself, column-major ([K rows of p pixels]), broadcast in place
        # by the micro-kernel (gemm.h's a_cm): no packing pass (Zen 4, one thread:
        # 1152 -> 192 at 7x7 0.222 -> 0.201 ms, 480 -> 80 at 14x14 0.172 -> 0.137)
        pack = ""
        fields.update({"a": "0", "a_raw": xn, "lda": str(p), "a_cm": "1"})
    elif pointwise:
        apack = ctx.scratch(4 * MR * k)
        pack = f"  ml_pack_a_par({p}, {k}, {xn}, 1, {p}, (float*){apack});\n"
        fields["a"] = f"(const float*){apack}"
    else:
        apack = ctx.scratch(4 * -(-p // MR) * MR * k)
        fields["a"] = f"(const float*){apack}"
        hp, wp = _padded(d)
        src, sh, sw = xn, d["H"], d["W"]
        pack = ""
        if d["PT"] or d["PL"] or hp > d["H"] or wp > d["W"]:
            padded = ctx.scratch(4 * c * hp * wp)
            pack += (
                f"  ml_pad_image_par({c}, {d['H']}, {d['W']}, {hp}, {wp}, {d['PT']}, "
                f"{d['PL']}, {xn}, (float*){padded});\n"
            )
            src, sh, sw = f"(const float*){padded}", hp, wp
        pack += (
            f"  ml_pack_a_im2col({src}, {c}, {sh}, {sw}, {d['KH']}, {d['KW']}, {d['SH']}, "
            f"{d['SW']}, {d['DH']}, {d['DW']}, {d['OH']}, {d['OW']}, (float*){apack});\n"
        )
    if b is not None:
        fields["bias_n"] = ctx.ptr(b)
    bsrc = {"kind": "ML_B_PACKED", "p": bp, "k_total": str(k)}
    # the epilogue runs on each block of channels as the transpose (or, for a
    # channel-blocked output, the copy) writes it; after a GEMM that stored the blocks
    # itself, on each block in turn
    if direct:
        finish = f"ml_block_epilogue({p}, {m}, {out}, {epi}, {yp}, n);"
    else:
        how = "ml_block_pm" if ctx.blocked(y) else "ml_transpose_pm"
        finish = f"{how}({p}, {m}, (const float*){tmp}, {yp} + n * {m * p}, {epi}, {yp}, n);"
    return (
        f"for (int64_t n = 0; n < {n}; ++n) {{\n{pack}"
        f"{gemm_call(fields, bsrc)}\n  {finish}\n"
        f"}}"
    )
