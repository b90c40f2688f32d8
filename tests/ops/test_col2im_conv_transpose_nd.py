"""Col2Im (2-D and 3-D, pads, strides, dilations) against ``onnx.reference`` and
3-D ConvTranspose (groups, strides, pads, dilations, output_padding, bias) against ONNX
Runtime: both run the N-D col2im loop nest of ``ops/nn/col2im.py``."""

import numpy as np
import pytest
from refnode import check_node

RNG = np.random.default_rng(13)


@pytest.mark.parametrize("image,block,attrs", [
    ([6, 7], [2, 3], {"pads": [1, 0, 1, 2], "strides": [2, 1], "dilations": [1, 2]}),
    ([4, 3, 5], [2, 2, 3], {"strides": [1, 2, 1]}),
])
def test_col2im(image, block, attrs):
    r = len(image)
    st = attrs.get("strides", [1] * r)
    dl = attrs.get("dilations", [1] * r)
    p = attrs.get("pads", [0] * 2 * r)
    grid = [(image[d] + p[d] + p[r + d] - (dl[d] * (block[d] - 1) + 1)) // st[d] + 1
            for d in range(r)]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(grid)))).astype(np.float32)
    check_node("Col2Im", {"x": x}, ["y"], opset=18, rtol=1e-5, atol=1e-5,
               consts={"image": np.array(image), "block": np.array(block)}, **attrs)


def test_conv_transpose_3d():
    x = RNG.standard_normal((2, 4, 3, 4, 5)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 2, 3, 2)).astype(np.float32)
    check_node("ConvTranspose", {"x": x}, ["y"], oracle="ort", rtol=1e-4, atol=1e-4,
               consts={"w": w, "b": RNG.standard_normal(6).astype(np.float32)}, group=2,
               strides=[2, 1, 2], pads=[1, 0, 1, 0, 1, 0], dilations=[1, 2, 1],
               output_padding=[1, 0, 0])
