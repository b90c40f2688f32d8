"""Tensor/shape ops against ONNX Runtime: infer, reference and emitted C (plain and with
a fused epilogue where the op accepts one)."""

from __future__ import annotations

import numpy as np
import pytest
from harness import check_op, run_c, make_node

from monolib.compiler.ops import op_of
from monolib.errors import ShapeError, UnsupportedOpError

R = np.random.default_rng(99)
I64 = lambda *v: np.array(v, np.int64)
BIG = np.iinfo(np.int64).max


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


# (op, inputs, attrs, opset, constant_inputs, n_outputs)
CASES = [
    ("Reshape", [f32(2, 3, 4), I64(4, -1)], {}, 13, (1,), 1),
    ("Reshape", [f32(2, 3, 4), I64(0, 0, 2, 2)], {}, 13, (1,), 1),
    ("Reshape", [f32(2, 0, 4), I64(0, 4)], {"allowzero": 1}, 14, (1,), 1),
    ("Flatten", [f32(2, 3, 4, 5)], {"axis": 2}, 13, (), 1),
    ("Flatten", [f32(2, 3, 4)], {"axis": 0}, 13, (), 1),
    ("Flatten", [f32(2, 3, 4)], {"axis": -1}, 11, (), 1),
    ("Squeeze", [f32(1, 3, 1, 4)], {}, 13, (), 1),
    ("Squeeze", [f32(1, 3, 1, 4), I64(-2)], {}, 13, (1,), 1),
    ("Squeeze", [f32(1, 3, 1, 4)], {"axes": [0]}, 11, (), 1),
    ("Unsqueeze", [f32(3, 4), I64(0, -1)], {}, 13, (1,), 1),
    ("Unsqueeze", [f32(3, 4)], {"axes": [1]}, 11, (), 1),
    ("Identity", [f32(3, 4)], {}, 16, (), 1),
    ("Transpose", [f32(2, 3, 4)], {}, 13, (), 1),
    ("Transpose", [f32(2, 3, 4)], {"perm": [0, 2, 1]}, 13, (), 1),
    ("Transpose", [f32(2, 3, 4, 5)], {"perm": [0, 2, 3, 1]}, 13, (), 1),
    ("Transpose", [f32(2, 3, 4, 5)], {"perm": [3, 1, 0, 2]}, 13, (), 1),
    ("Transpose", [f32(37, 53)], {"perm": [1, 0]}, 13, (), 1),
    ("Transpose", [f32(70, 133)], {"perm": [1, 0]}, 13, (), 1),  # blocked tiles, ragged edges
    ("Transpose", [f32(2, 67, 3, 81)], {"perm": [0, 3, 2, 1]}, 13, (), 1),
    ("Transpose", [f32(1, 40, 1, 96)], {"perm": [0, 2, 3, 1]}, 13, (), 1),
    ("Transpose", [np.arange(24, dtype=np.int64).reshape(2, 3, 4)], {"perm": [2, 0, 1]}, 13, (), 1),
    ("Concat", [f32(2, 3), f32(2, 5)], {"axis": 1}, 13, (), 1),
    ("Concat", [f32(2, 3, 4), f32(1, 3, 4), f32(3, 3, 4)], {"axis": 0}, 13, (), 1),
    ("Concat", [f32(2, 3, 4), f32(2, 0, 4), f32(2, 2, 4)], {"axis": -2}, 13, (), 1),
    ("Concat", [I64(1, 2), I64(3)], {"axis": 0}, 11, (), 1),
    ("Split", [f32(6, 4)], {"axis": 0}, 13, (), 3),
    ("Split", [f32(2, 7), I64(3, 4)], {"axis": 1}, 13, (1,), 2),
    ("Split", [f32(2, 7)], {"axis": -1, "split": [2, 5]}, 11, (), 2),
    ("Split", [f32(7, 2)], {"axis": 0, "num_outputs": 3}, 18, (), 3),
    ("Slice", [f32(5, 6), I64(1, 0), I64(4, BIG), I64(0, 1), I64(2, 2)], {}, 13, (1, 2, 3, 4), 1),
    ("Slice", [f32(5, 6), I64(-1), I64(-BIG), I64(1), I64(-2)], {}, 13, (1, 2, 3, 4), 1),
    ("Slice", [f32(5, 6), I64(-3), I64(-1)], {}, 13, (1, 2), 1),
    ("Slice", [f32(4, 5, 6), I64(1, 1), I64(100, -1), I64(-1, 0)], {}, 11, (1, 2, 3), 1),
    ("Slice", [f32(4, 5, 6), I64(4), I64(0), I64(1), I64(-1)], {}, 13, (1, 2, 3, 4), 1),
    ("Slice", [f32(4, 5)], {"starts": [1], "ends": [3], "axes": [1]}, 9, (), 1),
    ("Slice", [f32(4, 5), I64(3), I64(1)], {}, 13, (1, 2), 1),
    ("Gather", [f32(5, 4), I64(0, 3, -1)], {"axis": 0}, 13, (1,), 1),
    ("Gather", [f32(3, 5, 4), I64([0, 2], [4, -5])], {"axis": 1}, 13, (1,), 1),
    ("Gather", [f32(3, 5, 4), np.array(2, np.int64)], {"axis": -1}, 13, (1,), 1),
    ("Gather", [f32(5, 4), np.array([1, -2, 4], np.int32)], {"axis": 0}, 11, (), 1),
    ("Gather", [I64(10, 20, 30), I64(2)], {"axis": 0}, 13, (), 1),
    ("Expand", [f32(3, 1), I64(2, 3, 4)], {}, 13, (1,), 1),
    ("Expand", [f32(1, 4), I64(3, 1)], {}, 13, (1,), 1),
    ("Expand", [np.array([1, 2], np.int32), I64(3, 2)], {}, 8, (1,), 1),
    ("Tile", [f32(2, 3), I64(2, 3)], {}, 13, (1,), 1),
    ("Tile", [f32(2, 1, 3), I64(1, 4, 1)], {}, 13, (1,), 1),
    ("Pad", [f32(2, 3), I64(1, 2, 0, 1)], {}, 13, (1,), 1),
    ("Pad", [f32(2, 3), I64(1, 2, 0, 1), np.array(1.5, np.float32)], {}, 13, (1, 2), 1),
    ("Pad", [f32(2, 3), I64(1, 2, 0, 1), np.array(-2.0, np.float32)], {}, 11, (1,), 1),
    ("Pad", [f32(1, 1, 10), I64(0, 0, 3, 0, 0, 3)], {"mode": "reflect"}, 13, (1,), 1),
    ("Pad", [f32(3, 4), I64(2, 3, 2, 3)], {"mode": "reflect"}, 13, (1,), 1),
    ("Pad", [f32(3, 4), I64(2, 1, 1, 5)], {"mode": "edge"}, 13, (1,), 1),
    ("Pad", [f32(3, 4), I64(1, 2, 1, 3)], {"mode": "wrap"}, 19, (1,), 1),
    ("Pad", [f32(3, 5), I64(-1, 2, 0, -2)], {}, 13, (1,), 1),
    ("Pad", [f32(2, 3, 4), I64(1, 2), np.array(0.0, np.float32), I64(-1)], {}, 18, (1, 2, 3), 1),
    ("Pad", [f32(2, 3)], {"pads": [0, 1, 1, 0], "value": 3.0}, 2, (), 1),
    (
        "Pad",
        [np.arange(6, dtype=np.int64).reshape(2, 3), I64(1, 0, 0, 1)],
        {"mode": "edge"},
        13,
        (1,),
        1,
    ),
    ("DepthToSpace", [f32(1, 8, 2, 3)], {"blocksize": 2}, 13, (), 1),
    ("DepthToSpace", [f32(2, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}, 13, (), 1),
    ("SpaceToDepth", [f32(1, 2, 4, 6)], {"blocksize": 2}, 13, (), 1),
    ("Size", [f32(2, 3, 4)], {}, 13, (), 1),
    ("Shape", [f32(2, 3, 4)], {}, 13, (), 1),
    ("Shape", [f32(2, 3, 4, 5)], {"start": 1, "end": -1}, 15, (), 1),
    ("Shape", [f32(2, 3, 4, 5)], {"start": -10}, 15, (), 1),
    ("ConstantOfShape", [I64(2, 3)], {}, 9, (0,), 1),
    (
        "Range",
        [np.array(1, np.int64), np.array(10, np.int64), np.array(3, np.int64)],
        {},
        11,
        (0, 1, 2),
        1,
    ),
    (
        "Range",
        [np.array(1.0, np.float32), np.array(-2.0, np.float32), np.array(-0.5, np.float32)],
        {},
        11,
        (0, 1, 2),
        1,
    ),
]


def _id(case):
    op, ins, attrs, opset, _, _ = case
    shapes = "x".join("_".join(map(str, x.shape)) for x in ins)
    return f"{op}{opset}-{shapes}-{'-'.join(f'{k}{v}' for k, v in attrs.items())}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_tensor_op_matches_ort(case):
    op, ins, attrs, opset, consts, nout = case
    check_op(op, ins, attrs, opset=opset, const=consts, n_outputs=nout)


def test_constant_of_shape_value_attr():
    import onnx
    import onnx.helper as oh

    value = oh.make_tensor("v", onnx.TensorProto.INT32, [1], [7])
    check_op("ConstantOfShape", [I64(3, 2)], {"value": value}, opset=20, const=(0,))


def test_alias_ops_emit_nothing():
    for op, ins, attrs, consts in [
        ("Reshape", [f32(2, 3), I64(6)], {}, (1,)),
        ("Squeeze", [f32(1, 3)], {}, ()),
        ("Flatten", [f32(2, 3)], {}, ()),
    ]:
        node = make_node(op, ins, attrs, 13, consts)
        assert op_of(node).alias
        assert op_of(node).emit(node, None) == ""


def test_gather_runtime_index_out_of_range_is_clamped():
    data, idx = f32(4, 3), I64(7, -9)
    node = make_node("Gather", [data, idx], {"axis": 0}, 13)
    (got,) = run_c(node, [data, idx])
    np.testing.assert_array_equal(got, data[[3, 0]])


@pytest.mark.parametrize(
    "op,ins,attrs,consts,err,match",
    [
        ("Reshape", [f32(2, 3), I64(4, -1)], {}, (1,), ShapeError, "cannot reshape"),
        ("Reshape", [f32(2, 3), I64(-1, -1)], {}, (1,), ShapeError, "invalid target"),
        ("Tile", [f32(2, 3), I64(1, 2)], {}, (), UnsupportedOpError, "max_sizes=.*--max-size"),
        ("Squeeze", [f32(2, 3), I64(0)], {}, (1,), ShapeError, "cannot squeeze"),
        ("Transpose", [f32(2, 3)], {"perm": [0, 0]}, (), ShapeError, "not a permutation"),
        ("Concat", [f32(2, 3), f32(3, 3)], {"axis": 1}, (), ShapeError, "cannot join"),
        ("Gather", [f32(3, 2), I64(3)], {"axis": 0}, (1,), ShapeError, "out of range"),
        ("Split", [f32(7, 2)], {"axis": 0}, (), ShapeError, "evenly"),
        ("Tile", [f32(2, 3), I64(2)], {}, (1,), ShapeError, "repeats"),
        ("Pad", [f32(2, 3), I64(1, 1)], {}, (1,), ShapeError, "pads has"),
        ("Expand", [f32(3, 2), I64(4, 3)], {}, (1,), ShapeError, "not broadcastable"),
    ],
)
def test_tensor_op_errors(op, ins, attrs, consts, err, match):
    nout = 2 if op == "Split" else 1
    with pytest.raises(err, match=match):
        make_node(op, ins, attrs, 13, consts, n_outputs=nout)


def test_unsupported_pad_mode():
    with pytest.raises(UnsupportedOpError, match="mode"):
        make_node("Pad", [f32(2, 3), I64(1, 1, 1, 1)], {"mode": "mirror"}, 13, (1,))


# (op, inputs, attrs, opset, constant_inputs)
MORE = [
    ("GatherElements", [f32(3, 4), I64([0, 2, 1, -1], [2, 0, 0, 1])], {"axis": 0}, 13, ()),
    (
        "GatherElements",
        [f32(3, 4, 2), R.integers(-4, 4, (3, 2, 2)).astype(np.int64)],
        {"axis": 1},
        13,
        (),
    ),
    ("GatherElements", [f32(3, 4), np.array([[3, 0], [1, 1]], np.int32)], {"axis": -1}, 11, (1,)),
    ("Trilu", [f32(4, 5)], {}, 14, ()),
    ("Trilu", [f32(2, 4, 5), np.array(-1, np.int64)], {"upper": 0}, 14, (1,)),
    ("Trilu", [f32(3, 3), np.array(2, np.int64)], {"upper": 1}, 14, (1,)),
    (
        "OneHot",
        [I64(0, 2, -1, 5), np.array(4, np.int64), np.array([0.0, 1.0], np.float32)],
        {},
        11,
        (1,),
    ),
    (
        "OneHot",
        [I64([1, 0], [2, 3]), np.array(4, np.int64), np.array([2.0, 7.0], np.float32)],
        {"axis": 0},
        11,
        (1,),
    ),
    ("CumSum", [f32(3, 4), np.array(1, np.int64)], {}, 14, (1,)),
    ("CumSum", [f32(3, 4, 2), np.array(-2, np.int32)], {"exclusive": 1}, 14, (1,)),
    ("CumSum", [f32(5, 3), np.array(0, np.int64)], {"reverse": 1}, 11, (1,)),
    (
        "CumSum",
        [np.arange(12, dtype=np.int64).reshape(3, 4), np.array(1, np.int64)],
        {"reverse": 1, "exclusive": 1},
        14,
        (1,),
    ),
]


@pytest.mark.parametrize("case", MORE, ids=[f"{c[0]}{c[3]}-{i}" for i, c in enumerate(MORE)])
def test_more_tensor_ops_match_ort(case):
    op, ins, attrs, opset, consts = case
    check_op(op, ins, attrs, opset=opset, const=consts)


TOPK = [
    (f32(3, 7), 3, {"axis": 1}, 11),
    (R.integers(0, 4, (4, 6)).astype(np.float32), 4, {"axis": 0}, 11),  # ties
    (R.integers(0, 4, (2, 5, 3)).astype(np.float32), 2, {"axis": 1, "largest": 0}, 11),
    (R.integers(-9, 9, (3, 8)).astype(np.int64), 8, {"axis": -1}, 11),
    (f32(10), 1, {}, 10),
]


@pytest.mark.parametrize("x,k,attrs,opset", TOPK, ids=[f"topk{i}" for i in range(len(TOPK))])
def test_topk(x, k, attrs, opset):
    check_op("TopK", [x, I64(k)], attrs, opset=opset, const=(1,), n_outputs=2)


SCATTER = [
    ("ScatterElements", [f32(3, 4), I64([1, 0, 2], [0, 2, 1]), f32(2, 3)], {"axis": 0}, 11),
    (
        "ScatterElements",
        [f32(3, 4), I64([1, -1], [0, 3]), f32(2, 2)],
        {"axis": 1, "reduction": "add"},
        16,
    ),
    (
        "ScatterElements",
        [f32(3, 4), I64([1, 1], [0, 0]), f32(2, 2)],
        {"axis": 1, "reduction": "max"},
        18,
    ),
    ("ScatterND", [f32(4, 3), I64([1], [3]), f32(2, 3)], {}, 11),
    ("ScatterND", [f32(2, 3, 4), I64([0, 1], [1, -1]), f32(2, 4)], {}, 13),
    ("ScatterND", [f32(4, 3), I64([1], [1]), f32(2, 3)], {"reduction": "mul"}, 16),
]


@pytest.mark.parametrize(
    "op,ins,attrs,opset", SCATTER, ids=[f"{c[0]}{i}" for i, c in enumerate(SCATTER)]
)
def test_scatter(op, ins, attrs, opset):
    check_op(op, ins, attrs, opset=opset)


GATHER_ND = [
    (f32(3, 4), I64([1, 2], [0, -1])),
    (f32(3, 4, 2), I64([1], [2], [0])),
    (f32(2, 3), I64([[1, 0]], [[0, 2]])),
    (f32(4), I64([3], [0])),
]


@pytest.mark.parametrize("x,idx", GATHER_ND, ids=[f"gnd{i}" for i in range(len(GATHER_ND))])
def test_gather_nd(x, idx):
    check_op("GatherND", [x, idx], {}, opset=13)
