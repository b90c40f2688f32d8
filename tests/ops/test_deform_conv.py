"""DeformConv (groups, offset groups, mask, bias, strides, pads, dilations, offsets
reaching outside the image) against ``onnx.reference``."""

import numpy as np
from refnode import check_node

RNG = np.random.default_rng(19)


def test_deform_conv_groups_mask():
    n, c, h, w, m, kh, kw = 1, 4, 6, 7, 4, 2, 3
    attrs = {"group": 2, "offset_group": 2, "strides": [1, 2], "pads": [1, 0, 0, 1],
             "dilations": [2, 1]}
    oh = (h + 1 - ((kh - 1) * 2 + 1)) // 1 + 1
    ow = (w + 1 - kw) // 2 + 1
    ins = {"x": RNG.standard_normal((n, c, h, w)).astype(np.float32),
           "w": RNG.standard_normal((m, c // 2, kh, kw)).astype(np.float32),
           "off": (2.5 * RNG.standard_normal((n, 2 * kh * kw * 2, oh, ow))).astype(np.float32),
           "b": RNG.standard_normal(m).astype(np.float32),
           "mask": RNG.random((n, 2 * kh * kw, oh, ow)).astype(np.float32)}
    check_node("DeformConv", ins, ["y"], opset=19, rtol=1e-4, atol=1e-4, **attrs)
