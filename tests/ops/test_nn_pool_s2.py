"""MaxPool at stride 2 (pool.h's ``ml_pool2d_s2``): column maxima of each window's rows,
then stride-2 taps by even/odd shuffles. Exact (a max in any order): compared with ORT
and NumPy bit for bit, NaN planes with NumPy (a NaN wins its windows), 1 and 2 threads
identical; ``pool.py``'s ``_s2_plane`` agrees with the C rule ``ml_pool2d_s2_ok``."""

from __future__ import annotations

import ctypes
import itertools
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.ops.nn._common import Geometry
from monolib.compiler.ops.nn.pool import _s2_plane
from monolib.compiler.testing import build_shared, ort_run
from monolib.runtime import GraphModule, cpu, set_num_threads

RNG = np.random.default_rng(2)

#: (kernel, strides, pads, ceil_mode): 3x3/2 as in AlexNet, SqueezeNet, Inception,
#: with pads and ceil_mode, wider windows, a vertical stride of 3; 2x2/2 as in VGG and
#: U-Nets (with ceil_mode and a pad: odd sizes)
NODES = [
    ([2, 2], [2, 2], [0, 0, 0, 0], 0),
    ([2, 2], [2, 2], [0, 0, 0, 0], 1),
    ([2, 2], [2, 2], [1, 1, 0, 0], 0),
    ([3, 3], [2, 2], [0, 0, 0, 0], 0),
    ([3, 3], [2, 2], [0, 0, 1, 1], 0),
    ([3, 3], [2, 2], [1, 1, 1, 1], 0),
    ([3, 3], [2, 2], [0, 0, 0, 0], 1),
    ([3, 3], [2, 2], [1, 2, 0, 1], 1),
    ([5, 5], [2, 2], [2, 2, 2, 2], 0),
    ([4, 3], [3, 2], [1, 0, 2, 1], 1),
    ([2, 7], [2, 2], [0, 3, 1, 3], 0),
]


def _model(shape: list[int]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    nodes = [helper.make_node("MaxPool", ["x"], [f"y{i}"], kernel_shape=k, strides=s, pads=p,
                              ceil_mode=c) for i, (k, s, p, c) in enumerate(NODES)]
    probe = helper.make_model(helper.make_graph(nodes, "s2", [x], []),
                              opset_imports=[helper.make_opsetid("", 18)])
    known = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    graph = helper.make_graph(nodes, "s2", [x], [known[f"y{i}"] for i in range(len(nodes))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _numpy_max(x: np.ndarray, kernel, strides, pads, out_hw) -> np.ndarray:
    """Max over each window (pads -inf; np.max: a NaN wins)."""
    (kh, kw), (sh, sw), (oh, ow) = kernel, strides, out_hw
    bottom = max(0, (oh - 1) * sh + kh - pads[0] - x.shape[2])
    right = max(0, (ow - 1) * sw + kw - pads[1] - x.shape[3])
    xp = np.pad(x, [(0, 0), (0, 0), (pads[0], bottom), (pads[1], right)],
                constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    return win[:, :, ::sh, ::sw][:, :, :oh, :ow].max(axis=(4, 5))


def _runs(model: onnx.ModelProto, x: np.ndarray) -> list[list[np.ndarray]]:
    gm = GraphModule(monolib.compile(model)["default"](cpu()))
    runs = []
    try:
        for n in (1, 2):
            set_num_threads(n)
            gm.run(x=x)
            runs.append([gm.get_output(i).numpy().copy() for i in range(gm.get_num_outputs())])
    finally:
        set_num_threads(len(os.sched_getaffinity(0)))
    return runs


# with AVX-512 rows of 16 or more (outputs 8 or more) run sixteen wide: column maxima
# eight wide (27, 61, 21 columns) or sixteen (32, 48: rows on cache lines; any 2-row
# window); 16 columns with 7 outputs stay eight wide
@pytest.mark.parametrize("shape", [[1, 24, 27, 27], [2, 5, 13, 13], [1, 3, 14, 61],
                                   [1, 4, 9, 8], [1, 6, 30, 21], [1, 5, 17, 32],
                                   [2, 3, 11, 48], [1, 3, 16, 16]])
def test_stride2_max_matches_ort_and_numpy(shape: list[int]) -> None:
    model = _model(shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    x[:, :1] = -np.inf  # a plane of -inf stays -inf (ORT pads with -FLT_MAX: NumPy's only)
    one, two = _runs(model, x)
    for k, (got, ref) in enumerate(zip(one, ort_run(model, {"x": x}))):
        kernel, strides, pads, _ = NODES[k]
        np.testing.assert_array_equal(got[:, 1:], ref[:, 1:])
        np.testing.assert_array_equal(got, _numpy_max(x, kernel, strides, pads, got.shape[2:]))
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("width", [27, 32])
def test_stride2_max_nan_planes(width: int) -> None:
    """A NaN anywhere a window reads (first rows, the last row of a window, a column of
    the overlapping last vector) sends its plane to the NaN-aware path: NumPy's max
    (column maxima eight and sixteen wide)."""
    shape = [1, 8, 27, width]
    model = _model(shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    for c, (r, w) in enumerate([(0, 0), (1, 5), (2, 26), (26, 20), (13, 22), (25, 1)]):
        x[0, c, r, w] = np.nan
    one, two = _runs(model, x)
    for k, got in enumerate(one):
        kernel, strides, pads, _ = NODES[k]
        want = _numpy_max(x, kernel, strides, pads, got.shape[2:])
        np.testing.assert_array_equal(got, want)
        assert np.isnan(got[0, 0]).any() and not np.isnan(got[0, 7]).any()
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_stride2_max_narrow_outputs_stay_in_their_plane() -> None:
    """Outputs 1-3 wide (a 2x8 window on 8 columns): a row's vector store must not spill
    past its plane, into the next plane, which another thread may have written already
    (it raced: about a third of 2-thread runs were wrong), nor past the last plane."""
    cases = [([2, 8], [1, 1024, 4, 8]), ([2, 6], [1, 1024, 6, 9]), ([4, 8], [2, 512, 12, 9])]
    for kernel, shape in cases:
        oh, ow = (shape[2] - kernel[0]) // 2 + 1, (shape[3] - kernel[1]) // 2 + 1
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [*shape[:2], oh, ow])
        node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=kernel, strides=[2, 2])
        model = helper.make_model(helper.make_graph([node], "narrow", [x], [y]),
                                  opset_imports=[helper.make_opsetid("", 18)])
        xv = RNG.standard_normal(shape).astype(np.float32)
        want = _numpy_max(xv, kernel, [2, 2], [0, 0], (oh, ow))
        gm = GraphModule(monolib.compile(model)["default"](cpu()))
        try:
            for n in (1, 2):
                set_num_threads(n)
                for _ in range(30):
                    gm.run(x=xv)
                    np.testing.assert_array_equal(gm.get_output(0).numpy(), want)
        finally:
            set_num_threads(len(os.sched_getaffinity(0)))


_S2_C = r"""
int32_t s2_ok(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW,
              int64_t SH, int64_t SW, int64_t PT, int64_t PL, int32_t is_max) {
    ml_pool2d_args a = {1, H, W, OH, OW, KH, KW, SH, SW, PT, PL, 0, 0, is_max, 0, 0, 0, 1, 0, 1};
#if defined(__AVX__)
    return ml_pool2d_s2_ok(&a);
#else
    return -1;
#endif
}
"""


def test_s2_choice_matches_pool_py() -> None:
    """The C rule and the emitter's copy of it agree (the emitter sends rows under eight
    wide to ml_pool2d only when the stride-2 path takes them)."""
    lib = build_shared(kernel_header("pool.h") + _S2_C)
    lib.s2_ok.argtypes = [ctypes.c_int64] * 10 + [ctypes.c_int32]
    if lib.s2_ok(27, 27, 13, 13, 3, 3, 2, 2, 0, 0, 1) < 0:
        pytest.skip("no AVX: pool.h has no stride-2 path")
    assert lib.s2_ok(27, 27, 13, 13, 3, 3, 2, 2, 0, 0, 1) == 1
    assert lib.s2_ok(28, 28, 14, 14, 2, 2, 2, 2, 0, 0, 1) == 1  # 2x2/2
    assert lib.s2_ok(28, 28, 27, 14, 2, 1, 1, 2, 0, 0, 1) == 0  # a 1-wide window
    assert lib.s2_ok(27, 27, 13, 13, 3, 3, 2, 2, 0, 0, 0) == 0  # an average: not here
    assert lib.s2_ok(27, 27, 25, 13, 3, 3, 1, 2, 0, 0, 1) == 0  # vertical stride 1
    max_pool = helper.make_node("MaxPool", ["x"], ["y"])
    checked = 0
    for h, w, k, kw, s, pt, pl in itertools.product(
            (5, 13, 27), (7, 8, 13, 600), (2, 3), (1, 2, 3, 5, 9), (1, 2, 3), (0, 1, 3), (0, 1, 2)):
        if pt >= k + 2 or pl >= kw + 2:
            continue
        oh, ow = (h + pt - k) // s + 1, (w + pl - kw) // 2 + 1
        if oh < 1 or ow < 1:
            continue
        geo = Geometry([k, kw], [s, 2], [1, 1], [pt, pl], [0, 0], [oh, ow])
        want = bool(lib.s2_ok(h, w, oh, ow, k, kw, s, 2, pt, pl, 1))
        assert _s2_plane(max_pool, geo, [h, w]) == want, (h, w, k, kw, s, pt, pl)
        checked += 1
    assert checked > 300
