"""pool.h's flat path (small planes at stride 1 whose output keeps the input's size: the
plane as one vector run, column masks per window tap) and its separable path (vertical
stride 1) vs ONNX Runtime on odd shapes: pads summing to the window less one (3x3 pad 1,
SAME_UPPER / SAME_LOWER, asymmetric 4x4), count_include_pad 0 and 1, planes whose size
is not a multiple of eight, a NaN plane (the NaN-aware direct path) and a -inf plane;
1 and 2 threads bit-identical; 2x2 windows at stride 2 (the even/odd shuffle interior) vs
ORT and NumPy. The C test checks which geometries the flat path takes."""

from __future__ import annotations

import ctypes
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import monolib
from monolib.compiler.backends.c.headers import kernel_header
from monolib.compiler.testing import build_shared, ort_run
from monolib.runtime import GraphModule, cpu, set_num_threads

RNG = np.random.default_rng(141)

#: (op, attributes) of pools reaching the flat path on small planes
FLAT_NODES = [
    ("MaxPool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER"}),
    ("MaxPool", {"kernel_shape": [4, 4], "pads": [1, 2, 2, 1]}),
    ("MaxPool", {"kernel_shape": [1, 3], "pads": [0, 1, 0, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
    ("AveragePool", {"kernel_shape": [5, 3], "pads": [2, 0, 2, 2], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [4, 4], "pads": [2, 1, 1, 2]}),
]


def _model(shape: list[int], specs: list | None = None) -> onnx.ModelProto:
    specs = FLAT_NODES if specs is None else specs
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    nodes = [helper.make_node(op, ["x"], [f"y{i}"], **attrs)
             for i, (op, attrs) in enumerate(specs)]
    probe = helper.make_model(helper.make_graph(nodes, "flat", [x], []),
                              opset_imports=[helper.make_opsetid("", 18)])
    known = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    graph = helper.make_graph(nodes, "flat", [x], [known[f"y{i}"] for i in range(len(nodes))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


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


def _runs_vs_ort(model, x):
    """Outputs at 1 and 2 threads and ORT's: each within 1e-6 of ORT's (max exact; an
    average sums in another order, an ulp or two), 1 and 2 threads bit-identical."""
    want = ort_run(model, {"x": x})
    one, two = _runs(model, x)
    for got, ref in zip(one, want):
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    return one, two, want


@pytest.mark.parametrize("shape", [[1, 64, 13, 13], [2, 24, 7, 9], [1, 40, 3, 21]])
def test_flat_pools_match_ort(shape: list[int]) -> None:
    model = _model(shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    one, two, want = _runs_vs_ort(model, x)
    for k, (op, _) in enumerate(FLAT_NODES):
        if op == "MaxPool":
            np.testing.assert_array_equal(one[k], want[k])


def test_flat_max_nan_and_inf_planes() -> None:
    shape = [1, 40, 13, 13]
    model = _model(shape)
    x = RNG.standard_normal(shape).astype(np.float32)
    x[0, 3, 5, 7] = np.nan
    x[0, 5] = -np.inf
    one, two = _runs(model, x)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    win = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    np.testing.assert_array_equal(one[0], win.max(axis=(4, 5)))  # NaN wins its windows
    assert np.isnan(one[0][0, 3, 4:7, 6:9]).all()
    assert np.isneginf(one[0][0, 5]).all()


#: 2x2 windows at stride 2 (pool.h's even/odd shuffle interior): odd widths, pads, ceil
STRIDE2_NODES = [
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 0, 1]}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 1, 1, 1],
                     "count_include_pad": 1}),
]


@pytest.mark.parametrize("shape", [[1, 16, 29, 37], [2, 8, 11, 64]])
def test_2x2_stride2_matches_ort(shape: list[int]) -> None:
    model = _model(shape, STRIDE2_NODES)
    x = RNG.standard_normal(shape).astype(np.float32)
    one, two, want = _runs_vs_ort(model, x)
    np.testing.assert_array_equal(one[0], want[0])
    n, c, h, w = shape
    even = x[:, :, : h // 2 * 2, : w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2)
    np.testing.assert_array_equal(one[0], even.max(axis=(3, 5)))


#: 3x3 windows at stride 2 (the separable path where its count of vector ops is less)
STRIDE2_SEP_NODES = [
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1]}),
    ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                     "count_include_pad": 1, "ceil_mode": 1}),
    ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
]


def test_3x3_stride2_separable_matches_ort() -> None:
    shape = [1, 12, 30, 33]
    model = _model(shape, STRIDE2_SEP_NODES)
    x = RNG.standard_normal(shape).astype(np.float32)
    x[0, 4, 9, 11] = np.nan
    want = ort_run(model, {"x": x})
    one, two = _runs(model, x)
    for k, (got, ref) in enumerate(zip(one, want)):
        if STRIDE2_SEP_NODES[k][0] == "AveragePool":
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
        else:  # ORT skips a NaN: the other planes exactly
            keep = np.ones(shape[1], bool)
            keep[4] = False
            np.testing.assert_array_equal(got[:, keep], ref[:, keep])
            assert np.isnan(got[0, 4]).any()
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


_SEP_C = r"""
int32_t sep_ok(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t P0, int64_t P1,
               int32_t is_max) {
    ml_pool2d_args a = {1, H, W, OH, OW, 3, 3, 2, 2, P0, P0, P1, P1, is_max, 0, 0, 0, 1, 0, 1};
#if defined(__AVX__)
    return ml_pool2d_sep_ok(&a);
#else
    return -1;
#endif
}
"""


def test_separable_choice_at_stride2() -> None:
    lib = build_shared(kernel_header("pool.h") + _SEP_C)
    lib.sep_ok.argtypes = [ctypes.c_int64] * 6 + [ctypes.c_int32]
    if lib.sep_ok(56, 56, 28, 28, 0, 1, 1) < 0:
        pytest.skip("no AVX: pool.h has no separable path")
    assert lib.sep_ok(56, 56, 28, 28, 0, 1, 1) == 1  # a border column each row, measured ahead
    assert lib.sep_ok(28, 28, 14, 14, 1, 1, 0) == 1
    assert lib.sep_ok(27, 27, 13, 13, 0, 0, 1) == 0  # no border, 13 of 16 lanes: direct


_FLAT_C = r"""
int32_t flat_ok(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW,
                int64_t S) {
    ml_pool2d_args a = {1, H, W, OH, OW, KH, KW, S, S, 1, 1, 1, 1, 1, 0, 0, 0, 1, 0, 1};
#if defined(__AVX__)
    return ml_pool2d_flat_ok(&a);
#else
    return -1;
#endif
}
"""


def test_flat_path_takes_small_same_size_planes() -> None:
    lib = build_shared(kernel_header("pool.h") + _FLAT_C)
    lib.flat_ok.argtypes = [ctypes.c_int64] * 7
    if lib.flat_ok(13, 13, 13, 13, 3, 3, 1) < 0:
        pytest.skip("no AVX: pool.h has no flat path")
    assert lib.flat_ok(13, 13, 13, 13, 3, 3, 1) == 1
    assert lib.flat_ok(28, 28, 28, 28, 3, 3, 1) == 1
    assert lib.flat_ok(56, 56, 56, 56, 3, 3, 1) == 0  # masks past the stack tables
    assert lib.flat_ok(13, 13, 7, 7, 3, 3, 2) == 0  # stride 2
    assert lib.flat_ok(13, 13, 11, 11, 3, 3, 1) == 0  # output narrower than input
