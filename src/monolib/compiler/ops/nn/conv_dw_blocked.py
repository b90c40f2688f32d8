"""Depthwise Conv vectorised over channels (the ``depthwise_cb`` candidate of ``conv.py``).

``ml_dwcb_conv2d`` of ``conv_depthwise.h``: per block of ``ML_VW`` channels a band of
input rows is transposed into ``[rows][Wa][ML_VW]`` scratch, tiles of ``ML_DWCB_P``
output pixels x ``ML_VW`` channels are summed in registers and transposed back to NCHW.
The weights are packed here at compile time as ``[ceil(C/16)][KH*KW][16]`` (zeros past
C), which any vector width reads one block at a time.

Which of the two depthwise kernels runs is decided per signature by :func:`dw_costs`
(a cost model fitted to both kernels' measured times on an AMD EPYC Zen 4 with 16-float
vectors, in nanoseconds) unless ``--tune`` measures both. Measured (``tuning.measure``,
1 thread, us, W-vectorised -> channel-blocked, fused HardSwish where PP-LCNet has it):

=====================  ======  =====  =====
shape (C@HxW, window)  stride  along  over
                               W      C
=====================  ======  =====  =====
512@7x7 5x5            1       74.5   26.9
256@14x14 5x5          1       83.3   47.6
256@14x14 5x5          2       59.3   17.8
128@28x28 3x3          2       35.2   21.1
32@112x112 3x3         2       86.4   74.1
96@20x20 7x7           1       352.6  59.8
64@56x56 3x3           1       75.1   87.3
16@112x112 3x3         1       81.0   101.5
=====================  ======  =====  =====
"""

from __future__ import annotations

import logging

import numpy as np

from ...ir import Node
from ...symbolic import is_dim
from .._constants import include_checked
from ..base import EmitContext
from .conv_cost import L2_BYTES, host_vector_width

__all__ = ["dw_blocked_valid", "dw_costs", "dwcb_scratch_floats", "emit_dw_blocked",
           "pack_dw_weights"]

logger = logging.getLogger(__name__)

#: conv_depthwise.h's ML_DWCB_G (channels per packed weight group), ML_DWCB_P (output
#: pixels per tile), ML_DWCB_IN (pixel slots of a band's transposed input rows)
DWCB_G = 16
DWCB_P = 8
DWCB_IN = 4096


def dw_blocked_valid(node: Node, d: dict) -> bool:
    """Whether ``depthwise_cb`` applies: constant weights (packed at compile time) and
    every size known at compile time."""
    w = node.inputs[1]
    return w.const is not None and not any(is_dim(v) for v in (*node.inputs[0].shape,
                                                                 *d.values()))


def _owa(ow: int) -> int:
    return -(-ow // DWCB_P) * DWCB_P


def _wa(d: dict[str, int]) -> int:
    need = (_owa(d["OW"]) - 1) * d["SW"] + (d["KW"] - 1) * d["DW"] + 1
    return max(need, d["PL"] + d["W"])


def _band(d: dict[str, int], wa: int) -> int:
    rows, span = DWCB_IN // wa, (d["KH"] - 1) * d["DH"] + 1
    b = (rows - span) // d["SH"] + 1 if rows > span else 1
    return min(b, d["OH"])


def dwcb_scratch_floats(d: dict[str, int]) -> int:
    """``ml_dwcb_scratch_floats`` of ``conv_depthwise.h`` (at 16-float vectors, the most)."""
    wa = _wa(d)
    band = _band(d, wa)
    rows = (band - 1) * d["SH"] + (d["KH"] - 1) * d["DH"] + 1
    return (rows * wa + band * _owa(d["OW"])) * DWCB_G


def pack_dw_weights(w: np.ndarray) -> np.ndarray:
    """``[C, 1, KH, KW]`` weights as ``[ceil(C/16)][KH*KW][16]`` floats (zeros past C)."""
    c = w.shape[0]
    kk = int(np.prod(w.shape[2:]))
    g = -(-c // DWCB_G)
    flat = np.zeros((g * DWCB_G, kk), np.float32)
    flat[:c] = w.reshape(c, kk)
    return np.ascontiguousarray(flat.reshape(g, DWCB_G, kk).transpose(0, 2, 1))


# Cost model (ns): least squares (relative error) over both kernels' times on the 59
# depthwise signatures of PP-LCNet, PP-OCR v4/v6 det/cls/rec and ShuffleNet (Zen 4, 16
# floats per vector, 1 thread, tuning.measure): it picks the faster kernel on 54 of them,
# the other 5 within 12% of each other. W-vectorised: per vector of outputs per tap on the
# unrolled stride-1 / stride-2 / run-time-loop paths, and per float of padded input rows;
# channel-blocked: per vector of a tile pixel per tap, and per pixel vector transposed in or
# out; both: per output float through the fused epilogue (the same on both, for the fit).
_W_TAP = {"fast1": 0.29, "fast2": 0.44, "any": 1.87}
_W_PAD = 0.106
#: The W-vectorised fast path on 3x3 windows, which reads its input rows in place
#: (``conv_depthwise.h``'s ``ML_DW_IN_PLACE``, mirrored by :data:`IN_PLACE_K`): per vector
#: of outputs per tap at strides 1 and 2, and per float of input rows read (the padded
#: row's extent, as ``_W_PAD``). Fitted (the other constants kept; least squares on the
#: relative error) on the 85 3x3 depthwise signatures of PP-OCR v4/v6, PP-LCNet, the
#: layout detector, NudeNet, ShuffleNet, the zoo's MobileNets / MnasNet / EfficientNet /
#: RegNet-Y and the families bench (Zen 4, 1 thread, tuning.measure at 301 rounds, best
#: of two runs). Picking by the model: 1 of the 85 more than 5% slower than the faster
#: kernel, 0.3% over it on average (the same on random halves held out of the fit); with
#: ``_W_TAP`` / ``_W_PAD``, which price the padded copy of every row the kernel made
#: before, 20 and 3.3%. At stride 2 the fit gives the taps no cost of their own: the
#: input's read (four floats an output) covers them.
_W_TAP_IP = {"fast1": 0.176, "fast2": 0.0}
_W_READ_IP = 0.0973
#: Windows (K x K) whose fast path reads the input in place.
IN_PLACE_K = (3,)
_CB_TAP = 0.395
#: the channel-blocked tap on the register tiles of 3- and 5-wide windows at strides 1
#: and 2 (ml_dwcb_taps_r), the other constants kept: the value that picks best over
#: both kernels measured on 115 depthwise signatures (the zoo's torchvision nets,
#: PP-LCNet, PP-OCR v4/v6, NudeNet, a layout detector; Zen 4, 1 thread): 6.5% over the
#: faster kernel's summed time with the run-time loops' 0.395, 2.9% with it (0.26-0.27
#: on random halves, 0.4-5.6% on the halves held out, 4.8-8.8% with 0.395)
_CB_TAP_R = 0.27
_CB_MOVE = 1.64
_CB_CALL = 1300.0
#: per float in and out where they outgrow L2 (L2_BYTES): the passes then stream from L3
#: or memory. Fitted (the terms above kept) on the 10 depthwise signatures of the 26
#: models of bench/run.py past 1 MiB (16-48 channels of 160-320 px), where both models
#: had run 0.3-0.8x the measured times and picked the slower kernel on 7: over all 59,
#: picking by the model went from 6.3% to 5.0% over the faster kernel's summed time.
_W_BIG = 0.0528
_CB_BIG = 0.0407


def dw_costs(d: dict[str, int], c: int, fast: bool, vw: int | None = None) -> dict[str, float]:
    """Estimated nanoseconds of the two depthwise kernels on one image.

    Parameters
    ----------
    d : dict
        The conv's 2-D view (static sizes).
    c : int
        Channels.
    fast : bool
        Whether the W-vectorised kernel takes its unrolled path (``conv_dw_along_w.dw_fast``).
    vw : int, optional
        Floats per vector (default: the host's, ``conv_cost.host_vector_width``).

    Returns
    -------
    dict
        ``{"depthwise": ns, "depthwise_cb": ns}``, without the epilogue's share (the
        same for both). The W-vectorised kernel pays for each output row rounded up to
        whole vectors (a 7-wide row fills 7 of 16 lanes) and for its padded copy of every
        input row (3x3 windows: for reading the rows in place); the channel-blocked one for the channels rounded up to whole vectors,
        the output rows to whole tiles, and the transposes of every input pixel (halo
        rows once per band) and output pixel.
    """
    vw = vw or host_vector_width()
    taps = d["KH"] * d["KW"]
    oh, ow, h, w = d["OH"], d["OW"], d["H"], d["W"]
    wvec = oh * max(-(-ow // vw), 1)  # vectors of outputs per channel
    path = "any" if not fast else ("fast2" if d["SW"] == 2 else "fast1")
    if fast and d["KH"] in IN_PLACE_K:
        w_ns = c * (wvec * taps * _W_TAP_IP[path] + (h + d["KH"]) * (w + 2 * vw) * _W_READ_IP)
    else:
        w_ns = c * (wvec * taps * _W_TAP[path] + (h + d["KH"]) * (w + 2 * vw) * _W_PAD)
    blocks = -(-c // vw)
    bands = -(-oh // _band(d, _wa(d)))  # each re-transposes its halo rows
    halo = (bands - 1) * max((d["KH"] - 1) * d["DH"] + 1 - d["SH"], 0) * w
    moved = h * w + halo + oh * ow
    regs = d["KW"] in (3, 5) and d["DW"] == 1 and d["SW"] in (1, 2)  # ml_dwcb_units
    tap = _CB_TAP_R if regs else _CB_TAP
    cb_ns = blocks * (oh * _owa(ow) * taps * tap + moved * _CB_MOVE) + _CB_CALL
    if c * (h * w + oh * ow) * 4 > L2_BYTES:  # streamed from L3 or memory
        w_ns += c * (h * w + oh * ow) * _W_BIG
        cb_ns += c * (h * w + oh * ow) * _CB_BIG
    return {"depthwise": w_ns, "depthwise_cb": cb_ns}


def emit_dw_blocked(node: Node, ctx: EmitContext, d: dict[str, int], epi: str) -> str:
    """One ``ml_dwcb_conv2d`` over the images, the weights packed at compile time; the
    input and the output NCHW, or channel-blocked where ``ctx.blocked`` says so."""
    ctx.include("conv.h")
    include_checked(
        ctx, "conv_depthwise.h",
        {"ML_DWCB_G": DWCB_G, "ML_DWCB_P": DWCB_P, "ML_DWCB_IN": DWCB_IN}, __name__,
    )
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    n, c = x.shape[:2]
    wp = ctx.param(pack_dw_weights(np.asarray(w.const, np.float32)), f"{node.name}.dwcb_w")
    scratch = ctx.scratch(4 * dwcb_scratch_floats(d))
    bias = ctx.ptr(b) if b is not None else "0"
    yp = ctx.ptr(y)
    args = ", ".join(str(d[k]) for k in ("KH", "KW", "SH", "SW", "PT", "PL", "DH", "DW"))
    # x, y channel-blocked where the conv before / after keeps that layout (layout.py)
    layout = int(ctx.blocked(x)) | 2 * int(ctx.blocked(y))
    # every image in one call: their units one job (a job per image before)
    return (
        f"ml_dwcb_conv2d({n}, {c}, {d['H']}, {d['W']}, {d['OH']}, {d['OW']}, {args},\n"
        f"    {ctx.ptr(x)}, {wp}, {bias},\n"
        f"    {yp}, (float*){scratch}, {epi}, {yp}, 0, {layout});"
    )
