"""Reductions, Softmax/LogSoftmax, ArgMax/ArgMin and the normalizations against ONNX
Runtime: infer, reference and emitted C (plain and with a fused epilogue)."""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_op, make_node, run_c

from monolib.errors import ShapeError, UnsupportedOpError

R = np.random.default_rng(7)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


REDUCE_OPS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSumExp",
]
AXES = [None, [0], [1], [-1], [0, 2], [1, 2], [0, 1, 2], [1, 3]]


@pytest.mark.parametrize("op", REDUCE_OPS)
@pytest.mark.parametrize("axes", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_attribute(op, axes, keepdims):
    x = f32(2, 3, 4, 5) if axes != [1, 3] else f32(2, 3, 1, 5)
    attrs = {"keepdims": keepdims}
    if axes is not None:
        attrs["axes"] = axes
    check_op(op, [x], attrs, opset=11, rtol=2e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2"])
@pytest.mark.parametrize("axes", [[2], [0, 1], [-2], []], ids=str)
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_axes_input(op, axes, noop):
    x = f32(3, 4, 6)
    ins = [x, np.array(axes, np.int64)]
    check_op(
        op,
        ins,
        {"keepdims": 1, "noop_with_empty_axes": noop},
        opset=18,
        const=(1,),
        rtol=2e-5,
        atol=1e-5,
    )


def test_reduce_long_rows_and_ints():
    check_op("ReduceSum", [f32(3, 1000)], {"keepdims": 0}, opset=13, rtol=1e-5, atol=1e-4)
    check_op("ReduceMax", [f32(4, 2048)], {"axes": [1]}, opset=13)
    xi = R.integers(-50, 50, (3, 7)).astype(np.int32)
    check_op("ReduceSum", [xi, np.array([1], np.int64)], {}, opset=13, const=(1,))
    check_op("ReduceMax", [xi], {"axes": [0]}, opset=13)
    check_op("ReduceMin", [xi.astype(np.int64)], {"axes": [1], "keepdims": 0}, opset=13)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes", [[-1], [1]], ids=str)
def test_reduce_extremes_keep_nans_and_infinities(op, axes):
    """Rows of 3, 16 and 40 floats (tail only, whole vectors, vectors + tail): a NaN in
    a vector's lanes or in the tail gives NaN wherever it lies (NumPy's rule; ONNX
    Runtime's result depends on the NaNs' count and place, microsoft/onnxruntime#10514),
    infinities are values; random rows (the branchless vector path) match NumPy."""
    np_fn = np.max if op == "ReduceMax" else np.min
    for n in (3, 16, 40):
        x = f32(4, 6, n)
        x[0, 1, n - 1] = np.nan  # the tail (or a lane where n = 16)
        x[1, 2, min(5, n - 1)] = np.nan  # a vector's lane
        x[2, 3, :] = -np.inf
        x[3, 0, 0] = np.inf
        x[3, 4, :] = np.nan
        node = make_node(op, [x], {"axes": axes, "keepdims": 0}, opset=13)
        got = run_c(node, [x])[0]
        np.testing.assert_array_equal(got, np_fn(x, axis=tuple(axes)), err_msg=f"n={n}")


def test_reduce_runtime_axes_rejected():
    with pytest.raises(ShapeError, match="axes input must be a constant"):
        make_node("ReduceSum", [f32(2, 3), np.array([1], np.int64)], {}, 13)


def test_reduce_axis_out_of_range():
    with pytest.raises(ShapeError, match="out of range"):
        make_node("ReduceMean", [f32(2, 3)], {"axes": [2]}, 13)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(
    "shape,axis,opset",
    [
        ((2, 5), -1, 13),
        ((3, 4, 5), 1, 13),
        ((3, 4, 5), 0, 13),
        ((2, 3, 4), 1, 11),
        ((2, 3, 4), -1, 11),
        ((1, 40, 300), -1, 12),
        ((2, 3, 4), 2, 11),
        ((7,), 0, 13),
    ],
)
def test_softmax(op, shape, axis, opset):
    check_op(op, [f32(*shape) * 4], {"axis": axis}, opset=opset, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis,keepdims,last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (2, 0, 1)])
def test_argmax(op, axis, keepdims, last):
    x = R.integers(0, 4, (3, 4, 5)).astype(np.float32)  # many ties
    check_op(op, [x], {"axis": axis, "keepdims": keepdims, "select_last_index": last}, opset=13)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 8, 7), (4, 6)])
@pytest.mark.parametrize("opset", [9, 15])
@pytest.mark.parametrize("const", [True, False])
def test_batchnorm(shape, opset, const):
    c = shape[1]
    params = [f32(c), f32(c), f32(c), np.abs(f32(c)) + 0.1]
    consts = (1, 2, 3, 4) if const else ()
    check_op(
        "BatchNormalization",
        [f32(*shape)] + params,
        {"epsilon": 1e-3},
        opset=opset,
        const=consts,
        rtol=1e-5,
        atol=1e-5,
    )


def test_batchnorm_statistics_outputs_need_training_mode():
    # training mode itself is tested in test_batchnorm_training.py
    c = 3
    with pytest.raises(UnsupportedOpError, match="extra outputs need training_mode=1"):
        make_node("BatchNormalization", [f32(2, c, 4)] + [f32(c)] * 4, {}, 15, n_outputs=3)


@pytest.mark.parametrize(
    "shape,axis,sshape,bias",
    [
        ((2, 5, 16), -1, (16,), True),
        ((3, 4, 6), 1, (4, 6), True),
        ((3, 4, 6), -2, (1, 6), False),
        ((2, 384), -1, (384,), True),
    ],
)
@pytest.mark.parametrize("outs", [1, 3])
def test_layernorm(shape, axis, sshape, bias, outs):
    ins = [f32(*shape) + 3, f32(*sshape)] + ([f32(*sshape)] if bias else [])
    check_op(
        "LayerNormalization",
        ins,
        {"axis": axis, "epsilon": 1e-5},
        opset=17,
        const=(1, 2),
        n_outputs=outs,
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("shape", [(2, 3, 10), (1, 4, 5, 6)])
def test_instancenorm(shape):
    c = shape[1]
    check_op(
        "InstanceNormalization",
        [f32(*shape), f32(c), f32(c)],
        {"epsilon": 1e-5},
        opset=6,
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize(
    "op,x,attrs,opset",
    [
        ("Hardmax", R.integers(0, 3, (3, 5)).astype(np.float32), {"axis": -1}, 13),
        ("Hardmax", R.integers(0, 3, (2, 4, 3)).astype(np.float32), {"axis": 1}, 13),
        ("Hardmax", R.integers(0, 3, (2, 4, 3)).astype(np.float32), {"axis": 1}, 11),
        ("LpNormalization", f32(3, 5), {"axis": -1, "p": 2}, 13),
        ("LpNormalization", f32(3, 5, 2), {"axis": 1, "p": 1}, 13),
        ("LpNormalization", np.zeros((2, 3), np.float32), {"axis": 1, "p": 2}, 13),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_hardmax_lpnorm(op, x, attrs, opset):
    check_op(op, [x], attrs, opset=opset, rtol=1e-5, atol=1e-6)
