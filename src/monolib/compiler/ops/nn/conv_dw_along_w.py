"""Depthwise Conv vectorised along W (the ``depthwise`` candidate of ``conv.py``).

``ml_dwconv2d`` of ``conv_depthwise.h``: per channel, blocks of padded input rows in L1
and tiles of output rows x vectors along W, the taps broadcast from the weights; square
3x3 / 5x5 windows at strides 1 and 2 take unrolled entry points named for the shape
(``ml_dw_units_<K>_<SH><SW>``), everything else run-time loops. The channel-blocked
kernel is ``conv_dw_blocked.py``; ``conv.py``'s rule weighs the two (``dw_costs``).
"""

from __future__ import annotations

from ....errors import UndecidableDimError
from ...ir import Node
from ...symbolic import is_dim, size_hint
from .._constants import include_checked
from ..base import EmitContext

__all__ = ["emit_depthwise", "include_depthwise", "dw_decidable", "dw_fast", "dw_rows",
           "dw_scratch_floats", "VECTOR_WIDTHS"]


# ml_dwconv2d's fast path (conv_depthwise.h): square 3x3/5x5 windows, strides 1 and 2, no
# dilation, left and right pads up to ML_DW_PAD; ML_DW_R output rows per tile, blocks of
# ML_DW_BLOCK floats of padded input rows. Mirrors ml_dw_is_fast / mldw_scratch_floats;
# include_depthwise has the C compiler check the macros against these values.
_DW_PAD = 4
_DW_R = 4
_DW_BLOCK = 8192
VECTOR_WIDTHS = (4, 8, 16)  # ML_VW of SSE, AVX, AVX-512: the scratch fits any


def include_depthwise(ctx: EmitContext) -> None:
    """Paste ``conv_depthwise.h`` (after ``conv.h``, whose padded rows it reads), its
    fast-path macros checked against this module's ``_DW_PAD``, ``_DW_R``, ``_DW_BLOCK``."""
    ctx.include("conv.h")
    include_checked(
        ctx,
        "conv_depthwise.h",
        {"ML_DW_PAD": _DW_PAD, "ML_DW_R": _DW_R, "ML_DW_BLOCK": _DW_BLOCK},
        __name__,
    )


def dw_fast(d: dict[str, int]) -> bool:
    """Whether ``ml_dwconv2d`` takes its unrolled path (``ml_dw_is_fast``)."""
    wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
    return (
        d["DH"] == d["DW"] == 1
        and d["KH"] == d["KW"] in (3, 5)
        and d["SH"] in (1, 2)
        and d["SW"] in (1, 2)
        and 0 <= d["PL"] <= _DW_PAD
        and wp - d["W"] - d["PL"] <= _DW_PAD
    )


def dw_decidable(d: dict) -> bool:
    """False when whether ``ml_dwconv2d`` takes its fast path depends on run-time sizes
    (then the grouped GEMM path convolves instead)."""
    try:
        dw_fast(d)
    except UndecidableDimError:
        return False
    return True


def dw_scratch_floats(d: dict[str, int], vw: int) -> int:
    """``mldw_scratch_floats`` of kernels/conv.h for vectors of ``vw`` floats."""
    oh, ow, kh, kw, sh, sw = (d[k] for k in ("OH", "OW", "KH", "KW", "SH", "SW"))
    wp = (ow - 1) * sw + (kw - 1) * d["DW"] + 1
    if dw_fast(d):
        row = -(-((ow - 1) * sw + kw + vw * sw + 2) // vw) * vw
        rows = _DW_BLOCK // row
        blk = (rows - kw) // sh + 1 if rows > kw else 1
        blk = max(blk // _DW_R * _DW_R, 2 * _DW_R)
        blk = max(min(blk, oh), _DW_R)
        return ((blk - 1) * sh + kh) * row + ow + _DW_R * vw
    hp = (oh - 1) * sh + (kh - 1) * d["DH"] + 1
    ring = min(hp, (kh - 1) * d["DH"] + 1)
    return (ring * sw * (-(-wp // sw) + 2 * vw) + 1) // 2 * 2 + 2 * ring


def dw_rows(d: dict[str, int]) -> int:
    """Output rows per fast-path tile by rule: 4, or 3 where that computes 5% fewer (3,
    5, 6, 9 rows: a short last tile is moved back over rows already done); 3 rows run
    ~5% slower."""
    oh = size_hint(d["OH"])
    return 3 if -(-oh // 3) * 3 * 1.05 < max(-(-oh // 4) * 4, 4) else 4


def emit_depthwise(
    node: Node, ctx: EmitContext, d: dict[str, int], epi: str, rows: int | None = None
) -> str:
    """One ``ml_dwconv2d`` over the images; the fast path's entry point is named for the
    shape so that the build compiles only the unrolled kernels the model uses. ``rows``
    (3 or 4) overrides :func:`dw_rows` on the fast path."""
    include_depthwise(ctx)
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    n, c = x.shape[:2]
    # run-time sizes: the scratch at the upper bounds (it grows with the image)
    top = {k: v.hi if is_dim(v) else v for k, v in d.items()}
    floats = max(dw_scratch_floats(top, vw) for vw in VECTOR_WIDTHS)
    scratch = ctx.scratch(4 * floats)
    units = "ml_dw_units_any"
    if dw_fast(d):
        r3 = (rows or dw_rows(d)) == 3
        units = f"ml_dw_units_{d['KH']}_{d['SH']}{d['SW']}" + ("_r3" if r3 else "")
    bias = ctx.ptr(b) if b is not None else "0"
    yp = ctx.ptr(y)
    args = ", ".join(str(d[k]) for k in ("KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW"))
    # every image in one call: their units one job (a job per image before)
    return (
        f"ml_dwconv2d({n}, {c}, {d['H']}, {d['W']}, {d['OH']}, {d['OW']}, {args},\n"
        f"    {ctx.ptr(x)}, {ctx.ptr(w)}, {bias},\n"
        f"    {yp}, (float*){scratch}, {epi}, {yp}, 0, {units});"
    )
