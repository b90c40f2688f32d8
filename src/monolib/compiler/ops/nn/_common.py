"""Shared helpers of the nn ops: attribute geometry (pads, strides, output sizes).

Follows the ONNX operator spec for ``Conv``/``MaxPool``/``AveragePool``: ``auto_pad``
``NOTSET`` uses ``pads`` (``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]``), ``VALID``
pads nothing, ``SAME_UPPER``/``SAME_LOWER`` pad so that ``out = ceil(in / stride)``,
the odd pixel going at the end (UPPER) or the beginning (LOWER).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ....errors import ShapeError, UnsupportedOpError
from ...ir import Node
from ...backends.cstyle import c_literal
from ...symbolic import dim_max, dim_min, is_dim, same

__all__ = ["Geometry", "attr_ints", "epi_call", "f32", "geometry", "pointwise", "require_float32",
           "window_dims"]

logger = logging.getLogger(__name__)


@dataclass
class Geometry:
    """Sliding-window geometry over the spatial dims (all lists have one entry per dim).

    ``out[i] = floor((in[i] + begin[i] + end[i] - ((kernel[i]-1)*dilations[i]+1))
    / strides[i]) + 1`` (or ``ceil`` with ``ceil_mode``, never starting a window in the
    end padding).
    """

    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    begin: list[int]
    end: list[int]
    out: list[int]


def attr_ints(node: Node, name: str, default: list[int]) -> list[int]:
    """An ints attribute, or ``default`` when absent or empty."""
    v = node.attrs.get(name)
    return [int(x) for x in v] if v else list(default)


def require_float32(node: Node, *idx: int) -> None:
    """Raise UnsupportedOpError unless the listed inputs are float32."""
    for i in idx:
        v = node.input(i)
        if v is not None and v.dtype != np.float32:
            raise UnsupportedOpError(
                f"{node.op_type} node {node.name!r}: input {i} is {v.dtype}; monolib's C "
                f"kernels implement float32 only"
            )


def geometry(
    node: Node, in_sizes: list[int], kernel: list[int], ceil_mode: bool = False
) -> Geometry:
    """Pads and output sizes of a Conv/pool node over spatial sizes ``in_sizes``.

    Raises
    ------
    ShapeError
        When a window does not fit (output size < 1) or attribute lengths disagree.
    """
    nd = len(in_sizes)
    strides = attr_ints(node, "strides", [1] * nd)
    dil = attr_ints(node, "dilations", [1] * nd)
    pads = attr_ints(node, "pads", [0] * (2 * nd))
    if len(kernel) != nd or len(strides) != nd or len(dil) != nd or len(pads) != 2 * nd:
        raise ShapeError(
            f"{node.op_type} node {node.name!r}: kernel {kernel}, strides {strides}, "
            f"dilations {dil}, pads {pads} do not match {nd} spatial dims"
        )
    auto = node.attrs.get("auto_pad", "NOTSET") or "NOTSET"
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_sizes, strides)]
        total = [dim_max((o - 1) * s + e - i, 0)  # a run-time size: a max atom
                 for o, s, e, i in zip(out, strides, eff, in_sizes)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if auto == "SAME_UPPER" else (big, small)
    elif auto == "VALID":
        begin, end = [0] * nd, [0] * nd
    elif auto == "NOTSET":
        begin, end = pads[:nd], pads[nd:]
    else:
        raise UnsupportedOpError(f"{node.op_type} node {node.name!r}: auto_pad {auto!r}")
    out = []
    for i in range(nd):
        span = in_sizes[i] + begin[i] + end[i] - eff[i]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-in_sizes[i] // strides[i])
        elif ceil_mode:
            o = -(-span // strides[i]) + 1
            # the last window must start inside the input or the begin padding (pads are
            # below the kernel, so at most one window starts past it: a min over Dims)
            if is_dim(o):
                o = dim_min(o, (in_sizes[i] + begin[i] - 1) // strides[i] + 1)
            elif (o - 1) * strides[i] >= in_sizes[i] + begin[i]:
                o -= 1
        else:
            o = span // strides[i] + 1
        if span < 0 or o < 1:
            raise ShapeError(
                f"{node.op_type} node {node.name!r}: window {kernel} (dilations {dil}) does "
                f"not fit input {in_sizes} with pads {begin}+{end}"
            )
        out.append(o)
    return Geometry(kernel, strides, dil, begin, end, out)


def epi_call(fn: str) -> str:
    """C expression of an ``ml_epi_fn`` from ``ctx.tile_epilogue``'s name (``0``: none)."""
    return "(ml_epi_fn)0" if fn == "0" else f"(ml_epi_fn){fn}"


def f32(value: float) -> str:
    """A float32 C literal (``1.0f``, ``1e+10f``, ``INFINITY``): ``c_literal`` for float32."""
    return c_literal(value, np.float32)


def window_dims(spatial: Sequence[int], geo: Any) -> dict[str, int]:
    """The 2-D window constants the C kernels take, from a spatial input shape
    (``[W]`` or ``[H, W]``) and its geometry (:class:`Geometry` or any object with
    ``kernel``, ``strides``, ``dilations``, ``begin``, ``end``, ``out`` per spatial dim).

    Keys: ``H W`` (input), ``KH KW`` (kernel), ``SH SW`` (strides), ``PT PB PL PR``
    (pads top, bottom, left, right), ``DH DW`` (dilations), ``OH OW`` (output). A 1-D
    window is a 2-D one of height 1 with no vertical padding.
    """
    if len(spatial) == 1:
        return {"H": 1, "W": spatial[0], "KH": 1, "KW": geo.kernel[0], "SH": 1,
                "SW": geo.strides[0], "PT": 0, "PB": 0, "PL": geo.begin[0], "PR": geo.end[0],
                "DH": 1, "DW": geo.dilations[0], "OH": 1, "OW": geo.out[0]}
    return {"H": spatial[0], "W": spatial[1], "KH": geo.kernel[0], "KW": geo.kernel[1],
            "SH": geo.strides[0], "SW": geo.strides[1], "PT": geo.begin[0], "PB": geo.end[0],
            "PL": geo.begin[1], "PR": geo.end[1], "DH": geo.dilations[0],
            "DW": geo.dilations[1], "OH": geo.out[0], "OW": geo.out[1]}


def pointwise(d: dict) -> bool:
    """Whether a conv's 2-D view ``d`` (``conv.as_2d``) is a 1x1 window at stride 1
    without padding (its input is the GEMM operand as it is)."""
    return (
        d["KH"] == d["KW"] == d["SH"] == d["SW"] == 1
        and d["PT"] == d["PL"] == 0
        and same(d["OH"], d["H"])
        and same(d["OW"], d["W"])
    )
