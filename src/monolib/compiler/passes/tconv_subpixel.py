"""A strided 2-D ConvTranspose whose windows overlap, as a Conv to ``s * s`` phases of
output channels and a ``DepthToSpace`` (then a ``Slice`` where the phases overshoot the
output): the "sub-pixel convolution" identity. A 1-D one likewise, as a Conv to ``s``
phases whose ``[C, s, L]`` output is transposed to ``[C, L, s]`` (Reshape, Transpose,
Reshape: DepthToSpace is 2-D only). C backend only (devices have no DepthToSpace); run
by ``backends/c/backend.py`` before fusion.

Output row ``oy = s * i + r`` (phase ``r``) of a ConvTranspose (stride ``s``, kernel
``k``, pad ``PT``) sums the taps ``ky = (r + PT) mod s + s * t`` (``ky < k``) over input
rows ``i + floor((r + PT) / s) - t``: for each phase, a correlation of the input with
``ceil(k / s)`` taps at offsets that differ by phase. One Conv covers the union of the
offsets (a phase's missing taps are zero weights), its output channel ``co * s * s + r_y
* s + r_x`` being phase ``(r_y, r_x)`` of output channel ``co``, which ``DepthToSpace``
(CRD) puts in place. (ONNX ConvTranspose spec; the identity is the one of Shi et al.'s
sub-pixel convolution, facts carry over, code does not.)

Why: the direct lowering computes all ``C_out * k * k`` taps per input pixel into a
column buffer and scatters them (``ml_col2im_add``), e.g. 64 -> 32 channels, 4x4,
stride 2, pad 1 at 80x80: a 13 MB buffer, 12.9 ms at 1 thread (ONNX Runtime 6.8); as a
3x3 Conv to 128 channels + DepthToSpace it is a Conv the fast kernels take (see
:data:`MAX_WORK_RATIO`). The 1-D upsampling of HiFi-GAN-style vocoders (kernel 2s, pad
s/2): 128 -> 64 channels, 16 taps, stride 8, over 400 samples took 2.1 ms at 1 thread
(ONNX Runtime 1.4), half of it the serial scatter; as a 3-tap Conv to 512 channels and
a transpose 1.15 ms. A kernel that tiles the output (``k == s``, no pads) keeps its own
fused kernel (``ml_tconv_exact``).
"""

from __future__ import annotations

import logging

import numpy as np

from ..ir import Graph, Node
from ..ops.nn.conv_transpose import tconv_geometry
from .base import Pass, PassResult, splice_nodes
from .rewrite import NodeBuilder, graph_index, ops_available

__all__ = ["MAX_WORK_RATIO", "ConvTransposeToSubpixel", "subpixel_taps"]

logger = logging.getLogger(__name__)

#: Most multiply-adds the Conv may do over the ConvTranspose's own (the zero taps of
#: the union window): 2.25 for 4x4 / stride 2 (3x3 windows for 2x2 taps a phase),
#: 1.78 for 3x3 / stride 2.
MAX_WORK_RATIO = 2.5


def subpixel_taps(k: int, s: int, pt: int) -> tuple[int, int, list[list[tuple[int, int]]]]:
    """``(lo, size, taps)`` along one dim: the Conv's window starts at input offset
    ``lo`` (its begin pad is ``-lo``) and spans ``size``; ``taps[r]`` lists ``(u, ky)``:
    window position ``u`` of phase ``r`` takes ConvTranspose tap ``ky``."""
    per = []
    for r in range(s):
        c = (r + pt) // s
        per.append([(c - t, (r + pt) % s + s * t) for t in range(k) if (r + pt) % s + s * t < k])
    offsets = [o for p in per for o, _ in p]
    lo, hi = min(offsets), max(offsets)
    return lo, hi - lo + 1, [[(o - lo, ky) for o, ky in p] for p in per]


def _qualifies(node: Node) -> bool:
    x, w = node.inputs[0], node.inputs[1]
    b = node.input(2)
    if (node.domain != "" or len(x.shape) not in (3, 4) or w.const is None
            or (b is not None and b.const is None) or int(node.attrs["group"]) != 1
            or str(x.dtype) != "float32" or not all(isinstance(d, int) for d in x.shape)):
        return False
    geo = tconv_geometry(node)
    s, k = geo.strides, geo.kernel
    if any(d != 1 for d in geo.dilations) or len(set(s)) != 1 or s[0] < 2:
        return False
    if k == s and not any(geo.begin) and not any(geo.end):
        return False  # tiles the output: ml_tconv_exact
    if any(p < 0 for p in geo.begin):
        return False
    ratio = 1.0
    for kk, ss, pt in zip(k, s, geo.begin):
        lo, size, _ = subpixel_taps(kk, ss, pt)
        if lo > 0:  # the window would start past the input's first row: not handled
            return False
        ratio *= size * ss / kk
    return ratio <= MAX_WORK_RATIO


class ConvTransposeToSubpixel(Pass):
    """Each qualifying ConvTranspose (float32 NCHW, 1-D or 2-D, static shapes, group 1,
    constant weights, equal strides of 2 or more, no dilation, windows that overlap or
    pads, at most :data:`MAX_WORK_RATIO` the multiply-adds) -> Conv + DepthToSpace (1-D:
    Reshape, Transpose, Reshape) (+ Slice); see the module doc. The replacement's last
    node writes the ConvTranspose's output value.

    Raises
    ------
    ShapeError
        From ``tconv_geometry`` on a ConvTranspose whose attributes and shapes disagree.
    """

    def call(self, graph: Graph) -> PassResult:
        _, _, _, names = graph_index(graph)
        replace: dict[int, list[Node]] = {}
        for node in graph.nodes:
            if node.op_type != "ConvTranspose" or not _qualifies(node):
                continue
            one_d = len(node.inputs[0].shape) == 3
            ops = ("Conv", "Reshape", "Transpose", "Slice") if one_d else (
                "Conv", "DepthToSpace", "Slice")
            if ops_available(ops, max(node.opset, 13)):
                replace[id(node)] = (_subpixel_nodes_1d if one_d else _subpixel_nodes)(
                    node, names)
        if not replace:
            return PassResult(graph, False)
        splice_nodes(graph, replace, set())
        logger.info("%d ConvTranspose as sub-pixel Conv + DepthToSpace", len(replace))
        return PassResult(graph, True)


def _subpixel_nodes(node: Node, names: set[str]) -> list[Node]:
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    geo = tconv_geometry(node)
    s = geo.strides[0]
    _, _, h, wd = x.shape
    cin, cout = w.shape[0], w.shape[1]
    (ly, sy, ty), (lx, sx, tx) = (subpixel_taps(k, s, p) for k, p in zip(geo.kernel, geo.begin))
    wt = w.const.astype(np.float32)
    wc = np.zeros((cout, s, s, cin, sy, sx), np.float32)
    for ry in range(s):
        for uy, ky in ty[ry]:
            for rx in range(s):
                for ux, kx in tx[rx]:
                    wc[:, ry, rx, :, uy, ux] = wt[:, :, ky, kx].T
    wc = wc.reshape(cout * s * s, cin, sy, sx)
    oh, ow = geo.out
    rows, cols = -(-oh // s), -(-ow // s)  # phase rows / columns the output needs
    # end pads so that the Conv gives rows x cols (at least 0; extra rows are sliced)
    ey, ex = max(0, rows - 1 + sy - h + ly), max(0, cols - 1 + sx - wd + lx)
    bld = NodeBuilder(node.name, names, max(node.opset, 13), y.dtype)
    inputs = [x, bld.const("w_subpixel", wc)]
    if b is not None:
        inputs.append(bld.const("b_subpixel", np.repeat(b.const.astype(np.float32), s * s)))
    conv = bld.add("Conv", inputs, {"kernel_shape": [sy, sx], "pads": [-ly, -lx, ey, ex],
                                    "strides": [1, 1], "dilations": [1, 1], "group": 1,
                                    "auto_pad": "NOTSET"})
    crop = conv.shape[2] != rows or conv.shape[3] != cols or rows * s != oh or cols * s != ow
    d2s = bld.add("DepthToSpace", [conv], {"blocksize": s, "mode": "CRD"},
                  out=None if crop else y)
    if crop:
        bld.add("Slice", [d2s, bld.const("starts", np.array([0, 0], np.int64)),
                          bld.const("ends", np.array([oh, ow], np.int64)),
                          bld.const("axes", np.array([2, 3], np.int64))], out=y)
    return bld.nodes


def _subpixel_nodes_1d(node: Node, names: set[str]) -> list[Node]:
    """The 1-D form: Conv to ``cout * s`` channels (phase ``r`` of channel ``co`` is
    channel ``co * s + r``), viewed ``[N, cout, s, cols]``, transposed to ``[N, cout,
    cols, s]`` and viewed ``[N, cout, cols * s]`` (+ Slice)."""
    x, w, b, y = node.inputs[0], node.inputs[1], node.input(2), node.outputs[0]
    geo = tconv_geometry(node)
    s = geo.strides[0]
    n, _, length = x.shape
    cin, cout = w.shape[0], w.shape[1]
    lx, sx, tx = subpixel_taps(geo.kernel[0], s, geo.begin[0])
    wt = w.const.astype(np.float32)
    wc = np.zeros((cout, s, cin, sx), np.float32)
    for rx in range(s):
        for ux, kx in tx[rx]:
            wc[:, rx, :, ux] = wt[:, :, kx].T
    wc = wc.reshape(cout * s, cin, sx)
    ow = geo.out[0]
    cols = -(-ow // s)
    ex = max(0, cols - 1 + sx - length + lx)
    bld = NodeBuilder(node.name, names, max(node.opset, 13), y.dtype)
    inputs = [x, bld.const("w_subpixel", wc)]
    if b is not None:
        inputs.append(bld.const("b_subpixel", np.repeat(b.const.astype(np.float32), s)))
    conv = bld.add("Conv", inputs, {"kernel_shape": [sx], "pads": [-lx, ex], "strides": [1],
                                    "dilations": [1], "group": 1, "auto_pad": "NOTSET"})
    got = conv.shape[2]
    phases = bld.add("Reshape", [conv, bld.const("phases", np.array([n, cout, s, got], np.int64))])
    inter = bld.add("Transpose", [phases], {"perm": [0, 1, 3, 2]})
    crop = got * s != ow
    flat = bld.add("Reshape", [inter, bld.const("flat", np.array([n, cout, got * s], np.int64))],
                   out=None if crop else y)
    if crop:
        bld.add("Slice", [flat, bld.const("starts", np.array([0], np.int64)),
                          bld.const("ends", np.array([ow], np.int64)),
                          bld.const("axes", np.array([2], np.int64))], out=y)
    return bld.nodes
