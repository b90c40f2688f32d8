"""Conv (ONNX opset 1 and 11: identical semantics): 1-D and 2-D, groups, depthwise.

Lowering (``emit``):

* depthwise (``group == C_in == C_out``): ``ml_dwconv2d`` of ``conv_depthwise.h``, a direct
  kernel vectorised along W, 4 output rows x 2 vectors per tile, unrolled for 3x3/5x5
  windows with strides 1 and 2 (``conv_dw_along_w.dw_fast``), run-time loops for other shapes;
* everything else is ``y[Cout_g, OH*OW] = W[Cout_g, Cin_g*KH*KW] @ cols`` with the weights
  packed at compile time (``_gemm.pack_a``), per image and group:

  - 1x1 stride-1: one GEMM of ``kernels/gemm.h`` on the input itself (no im2col);
  - groups whose GEMMs are each too small to split but large together run as thread-pool
    tasks, one group each (``ml_conv_groups`` of ``conv.h``, ``_group_tasks``);
  - ``direct``: ``ml_conv_direct``, whose micro-kernel reads the zero-padded,
    phase-split image through a compile-time table of tap offsets (no B packing);
  - ``gemm``: one GEMM whose B blocks are packed straight from the padded image (an
    implicit im2col);
  - a batch of images with small outputs (``FOLD_BATCH_BELOW`` pixels) runs as ONE GEMM
    over every image's columns, then is scattered to NCHW;
  - ``pixel_rows``: small images as ``cols^T @ W^T``, the pixels as GEMM rows
    (``conv_pixel_rows.py``: 49 pixels round to 54 rows, not 64 columns);
  - stride-1 3x3 and 1-D 3/5-tap convolutions with enough channels: Winograd minimal
    filtering (``winograd.py``, ``kernels/winograd.h``), unless ``MONOLIB_WINOGRAD=0``.

  Among direct, gemm and Winograd F(2)/F(4) the rule takes the cheapest by the cost
  model of ``conv_cost.py`` (the work each kernel does on this CPU's vectors: rows of
  tiles padded to vectors, output rows padded to micro-tiles, im2col packing);
  ``--tune`` measures instead.

1-D convolutions are 2-D ones with ``H = 1``. The fused epilogue sees output 0 as
``[N, C_out, spatial]``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from ....errors import ShapeError, UndecidableDimError, UnsupportedOpError
from ...backends.cstyle import c_literal, ctype
from ...ir import Node
from ...symbolic import is_dim, is_one, size_hint
from ...tuning.select import Candidate, active, choose, excluded
from ..base import EmitContext, OpDef, OutType, register
from ._common import Geometry, attr_ints, epi_call, geometry, require_float32, window_dims
from ._common import pointwise as _pointwise
from ._gemm import MR, batch_call, bbuf_floats, gemm_call, gemv_shaped, include_gemm, pack_a
from .conv_cost import conv_costs, folded_cost, row_window
from .conv_dw_along_w import dw_decidable, dw_fast, dw_rows, emit_depthwise, include_depthwise
from .conv_dw_blocked import dw_blocked_valid, dw_costs, emit_dw_blocked
from .conv_ocv import emit_ocv, ocv_cost, ocv_in_rule, ocv_valid
from .conv_pixel_rows import emit_pixel_rows, pixel_rows_valid
from .winograd import CO_BLOCK, emit_winograd, plan_winograd

if TYPE_CHECKING:  # the device lowerings' shared pieces, imported when lowering
    from ...backends.device.lowerings import Kernel

__all__ = [
    "Conv", "as_2d", "blocked_roles", "conv_candidates", "conv_geometry", "conv_reference",
    "cost_candidate", "grouped_conv", "include_depthwise", "phase_split", "rule_costs",
]

logger = logging.getLogger(__name__)

#: Multiply-adds of a grouped conv (per image) from which its groups become pool tasks
#: when one group's GEMM is below it (threadpool.h's ML_PAR_MIN_WORK, the size below
#: which ml_sgemm_par keeps a GEMM on one thread).
GROUP_TASKS_MIN_WORK = 1 << 21


def conv_geometry(node: Node) -> Geometry:
    """Geometry of a Conv node from its input and weight shapes.

    Raises
    ------
    ShapeError
        On a channel/group mismatch or a window that does not fit.
    """
    x, w = node.inputs[0], node.inputs[1]
    if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
        raise ShapeError(
            f"Conv node {node.name!r}: needs X [N,C,...] and W of the same rank, "
            f"got {x and x.shape} and {w and w.shape}"
        )
    group = int(node.attrs["group"])
    if group < 1 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise ShapeError(
            f"Conv node {node.name!r}: X {x.shape}, W {w.shape} and group "
            f"{group} disagree (C_in must be W.shape[1]*group)"
        )
    kernel = attr_ints(node, "kernel_shape", list(w.shape[2:]))
    if kernel != list(w.shape[2:]):
        raise ShapeError(f"Conv node {node.name!r}: kernel_shape {kernel} != W {w.shape}")
    return geometry(node, list(x.shape[2:]), kernel)


def grouped_conv(
    x: np.ndarray, w: np.ndarray, geo: Geometry, group: int, acc: type
) -> np.ndarray:
    """N-D grouped convolution without bias, summed in dtype ``acc``: one einsum per
    kernel tap over the zero-padded input.

    Parameters
    ----------
    x : numpy.ndarray
        ``[N, C, *S]``.
    w : numpy.ndarray
        ``[M, C / group, *K]``.
    geo : Geometry
        Kernel, strides, dilations, pads and output sizes (``conv_geometry``).
    group : int
    acc : numpy dtype
        The accumulator (float32 for Conv; int64 for the integer convolutions).

    Returns
    -------
    numpy.ndarray
        ``[N, M, *O]`` of dtype ``acc``.
    """
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(geo.begin, geo.end)))
    y = np.zeros((n, group, mg, *geo.out), acc)
    wg = w.reshape(group, mg, cg, *geo.kernel)
    for tap in np.ndindex(*geo.kernel):
        sl = tuple(
            slice(k * d, k * d + (o - 1) * s + 1, s)
            for k, d, o, s in zip(tap, geo.dilations, geo.out, geo.strides)
        )
        patch = xp[(slice(None), slice(None)) + sl].reshape(n, group, cg, *geo.out)
        y += np.einsum("gmc,ngc...->ngm...", wg[(Ellipsis,) + tap], patch)
    return y.reshape(n, m, *geo.out)


def conv_reference(
    x: np.ndarray, w: np.ndarray, b: np.ndarray | None, geo: Geometry, group: int
) -> np.ndarray:
    """N-D grouped convolution (ONNX Conv) in NumPy, float32, one einsum per tap."""
    m = w.shape[0]
    y = grouped_conv(x, w, geo, group, np.float32)
    if b is not None:
        y += b.reshape(1, m, *([1] * len(geo.out)))
    return y.astype(np.float32)


def as_2d(shape: list[int], geo: Geometry) -> dict[str, int]:
    """The 2-D view (H=1 for 1-D) of a spatial ``shape`` and its geometry.

    A 2-D convolution over a single column (``W == 1``, ``KW == 1``, no W padding, e.g.
    Magika's ``[N, C, 508, 1]``) is the same memory as a 1-D one along W and is viewed so:
    the kernels vectorise and copy along W, never along a 1-wide row.
    """
    if (
        len(shape) == 2
        and is_one(shape[1])
        and geo.kernel[1] == 1
        and is_one(geo.out[1])
        and geo.begin[1] == 0
    ):
        shape = [shape[0]]
        geo = Geometry(
            geo.kernel[:1],
            geo.strides[:1],
            geo.dilations[:1],
            geo.begin[:1],
            geo.end[:1],
            geo.out[:1],
        )
    return window_dims(shape, geo)


@register
class Conv(OpDef):
    """ONNX ``Conv``: ``Y = conv(X, W) + B`` (NCHW, grouped, dilated, padded, strided).

    Shapes: X ``[N, C_in, *S]``, W ``[C_out, C_in/group, *K]``, B ``[C_out]`` (optional),
    Y ``[N, C_out, *O]``; float32. The C backend emits 1-D and 2-D convolutions.
    """

    op_type = "Conv"
    since_version = 1
    also_versions = (22,)  # 22 adds bfloat16 only

    def infer(self, node: Node) -> list[OutType]:
        geo = conv_geometry(node)
        x, w, b = node.inputs[0], node.inputs[1], node.input(2)
        if b is not None and b.shape != (w.shape[0],):
            raise ShapeError(f"Conv node {node.name!r}: B {b.shape} != ({w.shape[0]},)")
        return [((x.shape[0], w.shape[0], *geo.out), x.dtype)]

    def reference(self, node: Node, inputs: list) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1]
        b = inputs[2] if len(inputs) > 2 else None
        y = conv_reference(x, w, b, conv_geometry(node), int(node.attrs["group"]))
        return [y.astype(x.dtype)]

    def epilogue_groups(self, node: Node) -> list[list[int]]:
        return [[0], [1], list(range(2, len(node.outputs[0].shape)))]

    def emit(self, node: Node, ctx: EmitContext) -> str:
        require_float32(node, 0, 1, 2)
        x = node.inputs[0]
        if len(x.shape) not in (3, 4):
            raise UnsupportedOpError(
                f"Conv node {node.name!r}: only 1-D and 2-D convolutions "
                f"are emitted, X is {x.shape}"
            )
        geo = conv_geometry(node)
        d = as_2d(list(x.shape[2:]), geo)
        include_gemm(ctx)
        ctx.include("conv.h")
        epi = epi_call(ctx.tile_epilogue(self.epilogue_groups(node)))
        group = int(node.attrs["group"])
        # next to a channel-blocked tensor the pick is made as layout.py made it: with
        # the output blocked where it is, or could be (no side inputs in the chain) when
        # the input is; with the input's credit where it is
        x_blk, y_blk = ctx.blocked(x), ctx.blocked(node.outputs[0])
        blocked = y_blk or (x_blk and not ctx.side_inputs())
        pick = _pick(node, d, group, epi != "(ml_epi_fn)0", blocked, x_blk)
        if pick.algo == "depthwise":
            return emit_depthwise(node, ctx, d, epi, pick.param("rows"))
        if pick.algo == "depthwise_cb":
            return emit_dw_blocked(node, ctx, d, epi)
        if pick.algo in ("winograd", "winograd_raw"):  # a run-time image: at its bounds
            plan = plan_winograd(node, d, group, pick.param("m"), pick.param("cob"),
                                 raw=pick.algo == "winograd_raw")
            return emit_winograd(node, ctx, d, epi, plan)
        if pick.algo == "pixel_rows":
            return emit_pixel_rows(node, ctx, d, epi, _pointwise(d))
        if pick.algo == "direct_ocv":
            return emit_ocv(node, ctx, d, epi)
        return _emit_gemm(node, ctx, d, epi, group, pick.algo)

    def emit_device(self, node: Node, ctx: Any) -> Kernel:
        """Device Conv: 1-D or 2-D, groups (depthwise), strides, dilations, pads,
        optional bias; one output element per work item (a 1x1 convolution reads
        neighbouring pixels from neighbouring work items).

        Raises
        ------
        UnsupportedOpError
            For a convolution of more than 2 spatial dims.
        """
        from ...backends.device.lowerings import decompose, element_kernel

        x, w, b = node.inputs[0], node.inputs[1], node.input(2)
        y = node.outputs[0]
        if len(x.shape) not in (3, 4):
            raise UnsupportedOpError(
                f"device Conv (node {node.name!r}): only 1-D and 2-D, got {x.shape}"
            )
        g = window_dims(list(x.shape[2:]), conv_geometry(node))
        group = int(node.attrs["group"])
        C, OC = x.shape[1], y.shape[1]
        cg, ocg = C // group, OC // group
        T = ctype(y.dtype)
        xp = ctx.language.pointer(ctype(x.dtype), True)
        wp = ctx.language.pointer(ctype(w.dtype), True)
        # ctx.ptr places constants in the params blob in call order: W before B

        def acc0() -> str:
            return f"{T} acc = {ctx.ptr(b) + '[i1]' if b is not None else c_literal(0, y.dtype)};"

        i = decompose("gid", [y.shape[0], OC, g["OH"], g["OW"]], "i")
        pointwise = all(g[k] == 1 for k in ("KH", "KW", "SH", "SW")) and not any(
            g[k] for k in ("PT", "PB", "PL", "PR")
        )
        if pointwise:  # 1x1: a dot product over channels, neighbours read neighbours
            hw = g["H"] * g["W"]
            body = [
                *i,
                (
                    f"{xp} X = {ctx.ptr(x)} + "
                    f"(i0 * {C} + (i1 / {ocg}) * {cg}) * {hw} + i2 * {g['W']} + i3;"
                ),
                f"{wp} Wt = {ctx.ptr(w)} + i1 * {cg};",
                acc0(),
                f"for (int c = 0; c < {cg}; ++c) acc += X[c * {hw}] * Wt[c];",
            ]
            return element_kernel(node, ctx, body)
        body = [
            *i,
            f"{xp} X = {ctx.ptr(x)};",
            f"{wp} Wt = {ctx.ptr(w)};",
            acc0(),
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
        return element_kernel(node, ctx, body)


def _weights(node: Node, ctx: EmitContext, group: int, mg: int, k: int) -> tuple[str, int, str]:
    """(packed A pointer, floats per group, C that packs it at run time or "")."""
    w = node.inputs[1]
    per_group = -(-mg // MR) * MR * k
    if w.const is not None:
        wg = w.const.reshape(group, mg, k)
        packed = np.concatenate([pack_a(wg[g]) for g in range(group)])
        return ctx.param(packed, f"{node.name}.packed_w"), per_group, ""
    buf = ctx.scratch(4 * per_group * group)
    code = (
        f"for (int64_t g = 0; g < {group}; ++g)\n"
        f"  ml_pack_a({mg}, {k}, {ctx.ptr(w)} + g * {mg * k}, {k}, 1, "
        f"(float*){buf} + g * {per_group});\n"
    )
    return f"((const float*){buf})", per_group, code


def _plane(d: dict[str, int]) -> tuple[int, int, int, int]:
    """(Hp, Wp, Wq, floats per channel) of the padded, phase-split image of the direct
    path. A short last tile of a row reads up to 31 floats past the row's end: into the
    next row (junk columns, never stored), or, at the very end, into the 64 floats of
    slack the buffer carries."""
    hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
    wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
    wq = -(-wp // d["SW"])
    return hp, wp, wq, hp * d["SW"] * wq


def _direct_fits(d: dict[str, int], cg: int) -> bool:
    """The tap offsets of the direct path are int32: the group's planes must fit (a
    run-time image at its upper bound)."""
    return cg * size_hint(_plane(d)[3]) < 2**31 - 1


def _emit_direct(
    node: Node, ctx: EmitContext, d: dict[str, int], epi: str, group: int, ap: str, per_group: int
) -> str:
    """Per image: pad + phase-split every channel (ml_pad_planes: ml_dw_pad_plane per
    channel, on the thread pool when large), then per group one ml_conv_direct with a
    compile-time table of tap offsets."""
    x, b, y = node.inputs[0], node.input(2), node.outputs[0]
    n, c = x.shape[:2]
    m = node.inputs[1].shape[0]
    cg, mg = c // group, m // group
    sh, sw = d["SH"], d["SW"]
    hp, wp, wq, plane = _plane(d)
    buf = ctx.scratch(4 * (c * plane + 64))
    fill = ""
    if is_dim(plane):  # a run-time image: the tap table is filled when the op runs
        taps = cg * d["KH"] * d["KW"]
        table = f"((const int32_t*){ctx.scratch(4 * taps)})"
        fill = (
            f"  {{ int32_t* t_ = (int32_t*){table}; int64_t i_ = 0;\n"
            f"    for (int64_t ci = 0; ci < {cg}; ++ci) for (int64_t ky = 0; ky < {d['KH']}; ++ky)\n"
            f"      for (int64_t kx = 0; kx < {d['KW']}; ++kx)\n"
            f"        t_[i_++] = (int32_t)(ci * {plane} + ky * {d['DH'] * sw} * {wq} + "
            f"((kx * {d['DW']}) % {sw}) * {wq} + (kx * {d['DW']}) / {sw}); }}\n"
        )
    else:
        ci, ky, kx = np.meshgrid(
            np.arange(cg), np.arange(d["KH"]), np.arange(d["KW"]), indexing="ij"
        )
        koff = (
            (ci * plane + ky * d["DH"] * sw * wq + ((kx * d["DW"]) % sw) * wq
             + (kx * d["DW"]) // sw)
            .astype(np.int32)
            .ravel()
        )
        table = ctx.param(koff, f"{node.name}.tap_offsets")
    hw, ohw = d["H"] * d["W"], d["OH"] * d["OW"]
    yp = ctx.ptr(y)
    bias = f"{ctx.ptr(b)} + g * {mg}" if b is not None else "0"
    return fill + (
        f"for (int64_t n = 0; n < {n}; ++n) {{\n"
        f"  ml_pad_planes({c}, {ctx.ptr(x)} + n * {c * hw}, {d['H']}, {d['W']}, {hp}, "
        f"{wp}, {sw}, {wq}, {d['PT']}, {d['PL']}, (float*){buf}, {plane});\n"
        f"  for (int64_t g = 0; g < {group}; ++g)\n"
        f"    ml_conv_direct({mg}, {cg * d['KH'] * d['KW']}, {ap} + g * {per_group}, {table}, "
        f"(const float*){buf} + g * {cg * plane}, {sh}, {sw}, {wq}, {d['OH']}, {d['OW']}, "
        f"{bias}, {yp} + (n * {m} + g * {mg}) * {ohw}, {epi}, {yp}, n, g * {mg});\n}}"
    )


#: Outputs below this many pixels: a batch runs as ONE GEMM over every image's columns.
FOLD_BATCH_BELOW = 64


def _may_exceed(a, b) -> bool:
    """``a > b``, or True when only the run-time sizes decide (padding is then always
    done: ``ml_pad_image`` also crops)."""
    try:
        return bool(a > b)
    except UndecidableDimError:
        return True


def phase_split(d: dict[str, int]) -> bool:
    """Whether the implicit im2col of a strided conv reads the image split into column
    phases (``ml_pad_planes``; ``ml_bsrc.Wq``): static sizes, a column stride above 1 and
    a window at least as wide, so every phase is read. Packing then copies whole vectors
    where it gathered every ``SW``-th float (3x3/2 128 -> 128 at 56x56, 1 thread: the
    strided gather was ~0.5 ns a float, a fifth of the op)."""
    if any(is_dim(v) for v in d.values()):
        return False
    return d["SW"] > 1 and (d["KW"] - 1) * d["DW"] + 1 >= d["SW"]


def _b_source(
    node: Node, ctx: EmitContext, d: dict[str, int], folded: bool
) -> tuple[dict[str, str], str]:
    """(ml_bsrc fields for image ``n`` (all images when folded) and group ``g``, C that
    pads the input first or "")."""
    x = node.inputs[0]
    n, c = x.shape[:2]
    cg = c // int(node.attrs["group"])
    hw = d["H"] * d["W"]
    pointwise = _pointwise(d)
    first = "0" if folded else "n"
    if pointwise and not folded:
        return {
            "kind": "ML_B_STRIDED",
            "p": f"{ctx.ptr(x)} + (n * {c} + g * {cg}) * {hw}",
            "ldk": str(hw),
            "ldn": "1",
        }, ""
    hp = (d["OH"] - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
    wp = (d["OW"] - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
    pad = ""
    src = f"{ctx.ptr(x)} + {first} * {c * hw} + g * {cg * hw}"
    images = n if folded else 1
    if phase_split(d):  # strided columns: packed by whole vectors from the phases
        sw, wq = d["SW"], -(-wp // d["SW"])
        plane = hp * sw * wq
        buf = ctx.scratch(4 * images * c * plane)
        pad = (
            f"for (int64_t i = 0; i < {images}; ++i)\n"
            f"  ml_pad_planes({c}, {ctx.ptr(x)} + ({first} + i) * {c * hw}, {d['H']}, {d['W']}, "
            f"{hp}, {wp}, {sw}, {wq}, {d['PT']}, {d['PL']}, (float*){buf} + i * {c * plane}, "
            f"{plane});\n"
        )
        bsrc = {"kind": "ML_B_IM2COL", "p": f"(const float*){buf} + g * {cg * plane}",
                "H": str(hp), "W": str(sw * wq), "img": str(c * plane if folded else 0),
                "Wq": str(wq)}
        bsrc.update({key: str(d[key]) for key in ("KH", "KW", "SH", "SW", "DH", "DW", "OH", "OW")})
        return bsrc, pad
    if d["PT"] or d["PL"] or _may_exceed(hp, d["H"]) or _may_exceed(wp, d["W"]):
        padded = ctx.scratch(4 * images * c * hp * wp)
        pad = (
            f"for (int64_t i = 0; i < {images}; ++i)\n"
            f"  ml_pad_image_par({c}, {d['H']}, {d['W']}, {hp}, {wp}, {d['PT']}, {d['PL']}, "
            f"{ctx.ptr(x)} + ({first} + i) * {c * hw}, (float*){padded} + i * {c * hp * wp});\n"
        )
        src = f"(const float*){padded} + g * {cg * hp * wp}"
    else:
        hp, wp = d["H"], d["W"]
    bsrc = {
        "kind": "ML_B_IM2COL",
        "p": src,
        "H": str(hp),
        "W": str(wp),
        "img": str(c * hp * wp if folded else 0),
    }
    bsrc.update({key: str(d[key]) for key in ("KH", "KW", "SH", "SW", "DH", "DW", "OH", "OW")})
    return bsrc, pad


def _emit_gemm(
    node: Node, ctx: EmitContext, d: dict[str, int], epi: str, group: int, algo: str
) -> str:
    """``algo`` (:func:`conv_candidates`): ``"direct"`` (ml_conv_direct), ``"gemm"``
    (one GEMM per image and group, implicit im2col or the input itself for 1x1) or
    ``"gemm_folded"`` (one GEMM over the whole batch's columns per group)."""
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    n, c = x.shape[:2]
    m = w.shape[0]
    cg, mg = c // group, m // group
    k = cg * d["KH"] * d["KW"]
    ohw = d["OH"] * d["OW"]
    ap, per_group, code = _weights(node, ctx, group, mg, k)
    folded = algo == "gemm_folded"
    if algo == "direct":
        return code + _emit_direct(node, ctx, d, epi, group, ap, per_group)
    bsrc, pad = _b_source(node, ctx, d, folded)
    cols = n * ohw if folded else ohw
    bbuf = ctx.scratch(4 * -(-bbuf_floats(k, cols) // 16) * 16)  # (a batch's scratch too)
    yp = ctx.ptr(y)
    fields = {
        "M": str(mg),
        "N": str(cols),
        "K": str(k),
        "a": f"{ap} + g * {per_group}",
        "bbuf": f"(float*){bbuf}",
    }
    if b is not None:
        fields["bias_m"] = f"{ctx.ptr(b)} + g * {mg}"
    if not folded:
        fields.update(
            {
                "c": f"{yp} + (n * {m} + g * {mg}) * {ohw}",
                "epi": epi,
                "epi_out": yp,
                "epi_b": "n",
                "epi_m0": f"g * {mg}",
            }
        )
        batched = _image_batch(ctx, fields, bsrc, n, group, pad, m * ohw, c * d["H"] * d["W"])
        if batched:
            return code + batched
        call = _group_tasks(fields, bsrc, group, per_group, cg, d)
        loop = call or f"for (int64_t g = 0; g < {group}; ++g)\n{gemm_call(fields, bsrc)}"
        return code + f"for (int64_t n = 0; n < {n}; ++n) {{\n{pad}{loop}\n}}"
    # folded: C' [mg, n*ohw] per group in scratch, then scattered to [n, m, ohw]
    tmp = ctx.scratch(4 * mg * cols)
    fields["c"] = f"(float*){tmp}"
    epi_line = (
        f"    ({epi})({yp}, i, g * {mg}, (g + 1) * {mg}, 0, {ohw});\n"
        if epi != "(ml_epi_fn)0"
        else ""
    )
    return (
        code + pad + f"for (int64_t g = 0; g < {group}; ++g) {{\n{gemm_call(fields, bsrc)}\n"
        f"  for (int64_t i = 0; i < {n}; ++i) {{\n"
        f"    for (int64_t r = 0; r < {mg}; ++r)\n"
        f"      memcpy({yp} + (i * {m} + g * {mg} + r) * {ohw}, (const float*){tmp} + "
        f"r * {cols} + i * {ohw}, {4 * ohw});\n{epi_line}  }}\n}}"
    )


def _image_batch(ctx: EmitContext, fields: dict[str, str], bsrc: dict[str, str], n,
                 group: int, pad: str, c_stride, x_stride) -> str:
    """C that runs a batch of images' pointwise GEMMs (one group, the input read in
    place) as one ``ml_sgemm_batch``: with at least as many images as threads each
    thread takes whole images, one job for the op, where the loop over the images made
    a job per image (or none: each too small to split). PP-OCR's line classifier at
    batch 8 on 2 threads: its 1x1 convs of 8-32 channels on 6-24 x 96 maps 14-20%
    faster, the model 3.2 -> 2.93 ms (1 thread: the same). Each image's GEMM is the
    call the loop made (the same sums in the same order): the same bits, whatever the
    batch size (a run-time batch ``n``: the offset table holds its upper bound's
    images). "" where it does not apply. ``fields`` and ``bsrc`` are image ``n``'s and
    group ``g``'s; the call is made at ``n = g = 0``."""
    most = n.bounds[1] if is_dim(n) else n
    if (most < 2 or group != 1 or pad or bsrc.get("kind") != "ML_B_STRIDED"
            or not all(isinstance(v, int) for v in (c_stride, x_stride))
            or not all(fields[k].isdigit() for k in "MNK") or gemv_shaped(fields, bsrc)):
        return ""  # (a GEMV-shaped image sums in ml_sgemv_pa's order, not the batch's)
    one = {key: val for key, val in fields.items() if key != "bbuf"}
    table = ctx.unique("img_off")
    offs = ", ".join(f"0, {i * x_stride}" for i in range(most))
    # the loop's B buffer is the calling thread's scratch (ml_gemm_batch_floats: the B
    # block buffer rounded to 16 floats, as _emit_gemm sized it)
    call = batch_call(one, bsrc, {"nb": f"({n})", "off": table, "a_pstride": "0",
                                  "c_stride": str(c_stride)}, fields["bbuf"])
    return (f"static const int64_t {table}[{2 * most}] = {{{offs}}};\n"
            f"{{\nconst int64_t n = 0, g = 0;\n(void)n;\n(void)g;\n{call}\n}}")


def _group_tasks(
    fields: dict[str, str], bsrc: dict[str, str], group: int, per_group: int, cg: int,
    d: dict[str, int],
) -> str:
    """C that runs one image's ``group`` GEMMs as ``ml_conv_groups`` where the op's work
    is at least :data:`GROUP_TASKS_MIN_WORK`; else "". At run time conv.h makes the
    groups the pool's tasks, each with its own B buffer, where one group's GEMM is too
    small for ``ml_sgemm_par`` to split or the groups share out evenly over the threads,
    and otherwise splits each group in turn. ``fields`` and ``bsrc`` are group ``g``'s,
    evaluated at ``g = 0`` for the job's base call."""
    if group < 2 or not all(fields[k].isdigit() for k in "MNK") or gemv_shaped(fields, bsrc):
        return ""  # a run-time image keeps the serial loop
    dims = [int(fields[k]) for k in "MNK"]
    work = dims[0] * dims[1] * dims[2]
    if work * group < GROUP_TASKS_MIN_WORK:
        return ""
    plane = cg * (int(bsrc["H"]) * int(bsrc["W"]) if bsrc["kind"] == "ML_B_IM2COL"
                  else d["H"] * d["W"])  # phase planes: W is SW * Wq
    call = gemm_call(fields, bsrc)
    last = "  ml_sgemm_par(&ga_);"
    assert call.endswith(last + "\n}"), call  # gemv/dot shapes were ruled out above
    job = (f"  ml_conv_groups_job gj_ = {{ga_, {group}, {per_group}, {plane}, "
           f"{dims[0] * d['OH'] * d['OW']}, {dims[0]}}};\n  ml_conv_groups(&gj_);")
    return "{\nconst int64_t g = 0;\n" + call[: -len(last) - 2] + job + "\n}\n}"


def _pick(node: Node, d: dict[str, int], group: int, has_epi: bool,
          blocked: bool = False, blocked_in: bool = False) -> Candidate:
    """The algorithm emitted: the active selection's (forced, then measured on this CPU)
    among the candidates, else the fixed rule's (``blocked``, ``blocked_in``: see
    :func:`rule_costs`)."""
    if active() is None:  # the rule alone (no candidates to list)
        return _rule(node, d, group, blocked, blocked_in)
    sig, candidates, pick = conv_candidates(node, d, group, has_epi, blocked, blocked_in)
    return pick if sig is None else choose(node.name, sig, candidates, pick)


def blocked_roles(node: Node, has_epi: bool, blocked: bool = False,
                  blocked_in: bool = False) -> tuple[bool, bool]:
    """Whether the algorithm picked for a 2-D Conv ``node`` reads its input X, and
    whether it writes its output, channel-blocked (NCHW16c, ``backends/c/layout.py``):
    the channel-blocked depthwise kernel both, a pixels-as-rows conv its output (the
    copy out of its ``[pixels, C_out]`` tile), and its input where it reads a 1x1 conv's
    input in place (gemm.h's blocked ``a_raw``, at least ``MR`` pixels). ``has_epi``:
    a chain is fused after it (part of the signature the selection is keyed by);
    ``blocked``, ``blocked_in``: the pick as made next to channel-blocked neighbours
    (:func:`rule_costs`)."""
    x = node.inputs[0]
    if len(x.shape) != 4 or any(is_dim(v) for v in x.shape) or node.inputs[1].const is None:
        return False, False
    geo = conv_geometry(node)
    d = as_2d(list(x.shape[2:]), geo)
    if any(is_dim(v) for v in d.values()):
        return False, False
    pick = _pick(node, d, int(node.attrs["group"]), has_epi, blocked, blocked_in)
    if pick.algo == "depthwise_cb":
        return True, True
    if pick.algo == "pixel_rows":
        return _pointwise(d) and d["OH"] * d["OW"] >= MR, True
    return False, False


def _rule(node: Node, d: dict[str, int], group: int, blocked: bool = False,
          blocked_in: bool = False) -> Candidate:
    """The fixed rule's algorithm: depthwise where it applies, a batch of small images
    folded into one GEMM, else the cheapest of direct, implicit GEMM and Winograd F(2) /
    F(4) by the cost model (``conv_cost``: the work each kernel really does on this
    CPU's vectors), leaving out what the size budget excludes for the node
    (``conv_budget``, ``select.excluded``)."""
    x, w = node.inputs[0], node.inputs[1]
    if group == x.shape[1] == w.shape[0] and dw_decidable(d):
        # vectorised along W or over channels: the cheaper by dw_costs
        if dw_blocked_valid(node, d):
            cost = dw_costs(d, int(x.shape[1]), dw_fast(d))
            if cost["depthwise_cb"] < cost["depthwise"]:
                return Candidate("depthwise_cb")
        return Candidate("depthwise", (("rows", dw_rows(d)),) if dw_fast(d) else ())
    costs = rule_costs(node, d, group, blocked, blocked_in)
    if costs is None:
        return Candidate("gemm_folded")
    costs = {k: v for k, v in costs.items() if not excluded(node.name, cost_candidate(k))}
    return cost_candidate(min(costs, key=costs.get))


def cost_candidate(label: str) -> Candidate:
    """The Candidate of a :func:`rule_costs` label (``"winograd(m=4)"``, ``"direct"``)."""
    if label.startswith("winograd"):  # also winograd_raw: raw weights transformed per pass
        return Candidate(label.split("(")[0], (("m", int(label[-2])),))
    return Candidate(label)


def rule_costs(node: Node, d: dict[str, int], group: int,
               blocked: bool = False, blocked_in: bool = False) -> dict[str, float] | None:
    """Estimated ns of each algorithm the rule compares for a non-depthwise Conv
    (``conv_cost.conv_costs`` labels), or None where it folds a batch of small images
    into one GEMM with no direct_ocv to weigh (silero's 3-tap convs ran 2-4x faster so).
    ``blocked``: a neighbouring depthwise conv would keep the tensor between them
    channel-blocked if this one ran pixels-as-rows (``backends/c/layout.py``);
    ``blocked_in``: its input would come channel-blocked so (``conv_cost.conv_costs``)."""
    x, w = node.inputs[0], node.inputs[1]
    n, c = x.shape[:2]
    # a run-time batch folds too (at 1 the fold only costs a copy); a run-time image is
    # judged (plans and costs) at its upper bound
    if (is_dim(n) or n > 1) and size_hint(d["OH"] * d["OW"]) < FOLD_BATCH_BELOW:
        ocv = ocv_valid(node, d, group) and ocv_in_rule(d, c, w.shape[0], group)
        return {"gemm_folded": folded_cost(d, n, c, w.shape[0], group, _pointwise(d)),
                "direct_ocv": ocv_cost(d, n, c, w.shape[0], group=group)} if ocv else None
    plans = {m: plan_winograd(node, d, group, m) for m in (2, 4)}
    if not any(plans.values()) or row_window(d):
        plans = {}
    labels = {f"winograd(m={m})": plan for m, plan in plans.items()}
    labels.update({f"winograd_raw(m={m})": plan_winograd(node, d, group, m, raw=True)
                   for m, plan in plans.items() if plan is not None})
    costs = conv_costs(d, n, c, w.shape[0], group, _pointwise(d), labels,
                       pixel_rows_valid(node, d, group), blocked=blocked,
                       blocked_in=blocked_in)
    if "direct" in costs and not _direct_fits(d, c // group):
        del costs["direct"]
    # ocv_in_rule: not 1x1 windows nor big weights (what its model does not see)
    if ocv_valid(node, d, group) and ocv_in_rule(d, c, w.shape[0], group):
        costs["direct_ocv"] = ocv_cost(d, n, c, w.shape[0], group=group)
    return costs


def conv_candidates(
    node: Node, d: dict[str, int], group: int, fused: bool, blocked: bool = False,
    blocked_in: bool = False,
) -> tuple[dict[str, Any] | None, list[Candidate], Candidate]:
    """The tuning signature of a Conv, its valid candidates and the rule's choice.

    Parameters
    ----------
    node : Node
        A float32 Conv.
    d : dict
        Its 2-D view (:func:`as_2d`).
    group : int
    fused : bool
        Whether an elementwise epilogue is fused into it (part of the signature).
    blocked, blocked_in : bool
        The rule's choice as :func:`rule_costs` makes it with them.

    Returns
    -------
    (dict or None, list of Candidate, Candidate)
        The signature (shapes, geometry, group, bias, epilogue, dtype, layout; None when
        a size is only known at run time: then only the rule's choice is listed), the
        candidates (``depthwise`` with 3 or 4 rows per tile, ``winograd`` F(2)/F(4) with
        the rule's or half or twice its output channels per pass (``cob``),
        ``winograd_raw`` F(2)/F(4) (raw weights transformed per pass), ``direct``,
        ``gemm``, ``pixel_rows`` (``conv_pixel_rows``), ``gemm_folded``) and the rule's
        choice, one of them.
    """
    x, w = node.inputs[0], node.inputs[1]
    default = _rule(node, d, group, blocked, blocked_in)
    sizes = [*x.shape, *w.shape, *d.values()]
    if any(is_dim(v) for v in sizes):
        return None, [default], default
    n, c = x.shape[:2]
    cg = c // group
    geo = conv_geometry(node)
    cands: list[Candidate] = []
    if group == c == w.shape[0] and dw_decidable(d):
        fast = dw_fast(d)
        cands += [Candidate("depthwise", (("rows", r),)) for r in (3, 4)] if fast else [
            Candidate("depthwise")
        ]
        cands += [Candidate("depthwise_cb")] if dw_blocked_valid(node, d) else []
    for m in (2, 4):
        if plan_winograd(node, d, group, m) is not None:
            cands += [Candidate("winograd", (("m", m),)), Candidate("winograd_raw", (("m", m),))]
            # output channels per pass: half or twice the rule's CO_BLOCK where the
            # channels make it differ (the rule's own has no "cob" in its label)
            c_out = w.shape[0]
            cands += [
                Candidate("winograd", (("cob", cob), ("m", m)))
                for cob in (CO_BLOCK // 2, 2 * CO_BLOCK)
                if c_out > min(cob, CO_BLOCK)
            ]
    if not _pointwise(d) and _direct_fits(d, cg):
        cands.append(Candidate("direct"))
    if ocv_valid(node, d, group) and not _pointwise(d):
        cands.append(Candidate("direct_ocv"))
    cands.append(Candidate("gemm"))
    if pixel_rows_valid(node, d, group):
        cands.append(Candidate("pixel_rows"))
    if n > 1:
        cands.append(Candidate("gemm_folded"))
    if default not in cands:
        cands.append(default)
    sig = {
        "op": "Conv",
        "x": [int(v) for v in x.shape],
        "w": [int(v) for v in w.shape],
        "group": group,
        "geometry": {k: int(v) for k, v in sorted(d.items())},
        "attrs": {  # the ONNX attributes, explicit: a benchmark rebuilds the node from them
            "kernel_shape": [int(v) for v in geo.kernel],
            "strides": [int(v) for v in geo.strides],
            "dilations": [int(v) for v in geo.dilations],
            "pads": [int(v) for v in (*geo.begin, *geo.end)],
        },
        "bias": node.input(2) is not None,
        "const_w": w.const is not None,
        "epilogue": "fused" if fused else "none",
        "dtype": "float32",
        "layout": "NCHW",
    }
    return sig, cands, default
